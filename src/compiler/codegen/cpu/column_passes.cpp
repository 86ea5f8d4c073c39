// Column kernels in passes: reductions over the axes before the last whose results the kernel reads again
// (softmax over the first axis, a batch norm's variance of x - mean), and values computed from those results.

#include "compiler/codegen/cpu/row_kernel.h"

#include <algorithm>

namespace kiln::compiler::cpu {

namespace {

// A work item takes a block of columns and every reduced row of it, so that its per-column values are complete
// before the next pass reads them: blocks of up to 1024 columns (4 KiB of floats per row, which the hardware
// prefetchers stream), narrower where that leaves fewer than this many items for the threads.
constexpr std::int64_t passes_block = 1024;
constexpr std::int64_t passes_items = 16;

}  // namespace

bool RowKernel::varies_across_rows(int id) const {
  const Instance& item = at(id);
  if (item.kind == Instance::Kind::reduction) return false;
  if ((item.kind == Instance::Kind::load || item.kind == Instance::Kind::gather ||
       !item.address.coefficients.empty()) &&
      emitter_.varies_in_middle(item.address, layout_))
    return true;
  return std::any_of(item.operands.begin(), item.operands.end(),
                     [&](int operand) { return varies_across_rows(operand); });
}

bool RowKernel::is_per_column(int id) const {
  if (varies_across_rows(id)) return false;
  if (at(id).kind == Instance::Kind::reduction || ready_phase(id) > 0) return true;
  return std::any_of(outputs_.begin(), outputs_.end(),
                     [&](const auto& output) { return output.second == id && is_row_output(output.first); });
}

int RowKernel::column_pass(int id) const {
  int pass = 0;
  std::vector<int> stack(at(id).operands.begin(), at(id).operands.end());
  std::set<int> seen;
  while (!stack.empty()) {
    const int current = stack.back();
    stack.pop_back();
    if (!seen.insert(current).second) continue;
    if (at(current).kind == Instance::Kind::reduction) {
      pass = std::max(pass, column_pass(current) + 1);
      continue;
    }
    stack.insert(stack.end(), at(current).operands.begin(), at(current).operands.end());
  }
  return pass;
}

bool RowKernel::needs_column_passes() const {
  for (int id = 0; id < emitter_.instance_count(); ++id)
    if (ready_phase(id) > 0 && at(id).kind != Instance::Kind::reduction) return true;
  return std::any_of(outputs_.begin(), outputs_.end(), [&](const auto& output) {
    return is_row_output(output.first) && at(output.second).kind != Instance::Kind::reduction;
  });
}

void RowKernel::collect_column_elements(int root, std::set<int>& needed, std::set<int>& per_column) const {
  if (needed.count(root) || per_column.count(root)) return;
  if (is_per_column(root)) {
    per_column.insert(root);
    return;
  }
  if (!varying(root)) return;  // a row value, computed once per item
  needed.insert(root);
  for (int operand : at(root).operands) collect_column_elements(operand, needed, per_column);
}

std::string RowKernel::per_column_values(const std::set<int>& per_column) const {
  std::string text;
  for (int id : per_column)
    text += "        const " + emitter_.vector_type(at(id).value) + " " + at(id).name + " = column_" + at(id).name +
            "[group];\n";
  return text;
}

std::string RowKernel::emit_column_passes() {
  const std::int64_t columns = layout_.inner_size, reduced = layout_.middle_count(), outer = layout_.rows();
  // Blocks of whole vectors, narrower where the outer axes and wide blocks would leave threads idle.
  const std::int64_t per_outer =
      (passes_items + std::max<std::int64_t>(outer, 1) - 1) / std::max<std::int64_t>(outer, 1);
  const std::int64_t narrow = (columns + per_outer - 1) / per_outer;
  const std::int64_t block =
      std::clamp<std::int64_t>((narrow + widest_lanes - 1) / widest_lanes * widest_lanes, widest_lanes, passes_block);
  const std::int64_t column_blocks = (columns + block - 1) / block;
  whole_vectors_ = columns % widest_lanes == 0 && block % widest_lanes == 0;

  // Each reduction in the first pass after those whose results it reads; each value computed from results after
  // the pass that completes them.
  std::vector<std::vector<int>> passes, computed_after;
  std::set<int> per_column;
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    if (!is_per_column(id)) continue;
    per_column.insert(id);
    const bool reduction = at(id).kind == Instance::Kind::reduction;
    const std::size_t pass = static_cast<std::size_t>(reduction ? column_pass(id) : std::max(column_pass(id), 1) - 1);
    if (passes.size() <= pass) {
      passes.resize(pass + 1);
      computed_after.resize(pass + 1);
    }
    (reduction ? passes : computed_after)[pass].push_back(id);
  }
  std::set<int> final_elements, final_per_column;
  std::string stores;
  for (const auto& [value, id] : outputs_) {
    if (is_row_output(value)) continue;
    collect_column_elements(id, final_elements, final_per_column);
    stores += element_store(value, id);
  }
  streaming_ = element_output_bytes() >= streaming_bytes;

  const std::string prefix = emitter_.prefix();
  const std::string group = "        const int64_t group = (j - block_begin) / lanes;\n";
  // A loop over the block's reduced rows, stepping along each row's columns with `body`.
  auto over_rows = [&](const std::string& body) {
    return "    for (int64_t r = 0; r < " + std::to_string(reduced) + "; ++r) {\n" +
           digits(layout_.middle_sizes, "r", "d", "      ") +
           inner_vector_loop("block_begin", "block_end", body, "", 1) + "    }\n";
  };
  std::string text = "struct " + prefix + "_state {\n" + emitter_.state_fields() + "};\n\n";
  text += "void " + prefix + "_items(void* context, int64_t begin, int64_t end) {\n" + state_from_context();
  text += "  for (int64_t item = begin; item < end; ++item) {\n";
  text += "    const int64_t row = item / " + std::to_string(column_blocks) + ";\n";
  text += "    const int64_t block_begin = item % " + std::to_string(column_blocks) + " * " + std::to_string(block) +
          ";\n    const int64_t block_end = block_begin + " + std::to_string(block) + " < " + std::to_string(columns) +
          " ? block_begin + " + std::to_string(block) + " : " + std::to_string(columns) + ";\n";
  text += row_setup() + row_values(0);
  text += "    // The values of each column of the block that the passes compute, a vector per lanes columns.\n";
  for (int id : per_column)
    text += "    " + emitter_.vector_type(at(id).value) + " column_" + at(id).name + "[" + std::to_string(block) +
            " / lanes];\n";
  for (std::size_t pass = 0; pass < passes.size(); ++pass) {
    if (!passes[pass].empty()) {
      std::set<int> elements, read_per_column;
      std::string folds;
      text += "    // Pass " + std::to_string(pass + 1) + " over the block's rows, for";
      for (int reduction : passes[pass]) {
        const Instance& item = at(reduction);
        const ir::Node& node = emitter_.graph().node(item.value);
        const ReductionInfo info = reduction_info(node.op, node.type.dtype);
        collect_column_elements(item.operands[0], elements, read_per_column);
        const std::string accumulator = "column_" + item.name + "[group]";
        folds += "        " + accumulator + " = " + info.combine + "(" + accumulator + ", first_lanes(" +
                 at(item.operands[0]).name + ", " + info.identity + ", count));\n";
        text += " %" + std::to_string(item.value);
      }
      text += "\n";
      for (int reduction : passes[pass]) {
        const ir::Node& node = emitter_.graph().node(at(reduction).value);
        text += "    for (" + emitter_.vector_type(at(reduction).value) + "& accumulator : column_" +
                at(reduction).name + ") accumulator = " + reduction_info(node.op, node.type.dtype).identity + ";\n";
      }
      text += over_rows(group + per_column_values(read_per_column) + element_values(elements, 0) + folds);
    }
    // The pass's means divided, and the values its results complete, at each column of the block.
    std::string body;
    for (int reduction : passes[pass]) {
      const Instance& item = at(reduction);
      const ir::Node& node = emitter_.graph().node(item.value);
      if (node.op == ir::Op::reduce_mean)
        body += "        column_" + item.name +
                "[group] = " + finished("column_" + item.name + "[group]", node, emitter_.storage_type(item.value)) +
                ";\n";
    }
    for (int id : computed_after[pass]) {
      std::set<int> elements, read_per_column;
      for (int operand : at(id).operands) collect_column_elements(operand, elements, read_per_column);
      body += "        {\n" + per_column_values(read_per_column) + element_values(elements, 0) + "        " +
              emitter_.describe(at(id).value) + "\n        column_" + at(id).name +
              "[group] = " + emitter_.expression(id) + ";\n        }\n";
    }
    if (!body.empty())
      text += "    {\n" + inner_vector_loop("block_begin", "block_end", group + body, "", 1) + "    }\n";
  }
  if (!stores.empty()) {
    text += "    // The element outputs, in a last pass over the block's rows.\n";
    text += over_rows(group + per_column_values(final_per_column) + element_values(final_elements, 0) + stores);
  }
  for (const auto& [value, id] : outputs_) {
    if (!is_row_output(value)) continue;
    text += "    for (int64_t j = block_begin; j < block_end; j += lanes)\n      store<" +
            emitter_.storage_type(value) + ">(state." + emitter_.output_name(value) + " + row * " +
            std::to_string(columns) + " + j, column_" + at(id).name + "[(j - block_begin) / lanes], " +
            "block_end - j < lanes ? static_cast<int>(block_end - j) : lanes);\n";
  }
  text += "  }\n";
  if (streaming_) text += "  end_streaming();\n";
  text += "}\n\n" + entry_opening();
  text +=
      "  runtime->parallel_for(" + std::to_string(outer * column_blocks) + ", 1, " + prefix + "_items, &state);\n}\n";
  return text;
}

}  // namespace kiln::compiler::cpu
