// Column kernels: reductions over the axes before the last.

#include "compiler/codegen/cpu/row_kernel.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler::cpu {

namespace {

// A column kernel's work items: at most this many columns each, so that each reduced row's segment is 4 KiB of
// floats, read contiguously (blocks of 64 columns read 256 bytes per row at a stride of the row, crossing a page
// every row: the hardware prefetchers gave up, and the kernel ran slower than the loop kernel and the standard
// reduction it replaced); about this many items in all, the reduced rows split into blocks of at least
// column_rows_per_block where the other axes give fewer.
constexpr std::int64_t column_block = 1024;
constexpr std::int64_t column_items = 16;
constexpr std::int64_t column_rows_per_block = 64;
constexpr std::int64_t column_max_rows_per_block = 512;  // column_row_blocks (row_kernel.h)
static_assert(column_block % widest_lanes == 0);

}  // namespace

std::int64_t column_row_blocks(std::int64_t reduced, std::int64_t other_items) {
  const std::int64_t wanted =
      (column_items + std::max<std::int64_t>(other_items, 1) - 1) / std::max<std::int64_t>(other_items, 1);
  return std::max({std::int64_t{1}, std::min(wanted, reduced / column_rows_per_block),
                   (reduced + column_max_rows_per_block - 1) / column_max_rows_per_block});
}

std::string RowKernel::emit_column() {
  const int rank = kernel_.space.rank(), first = rank - 1 - kernel_.reduced_axes;
  for (int axis = 0; axis + 1 < rank; ++axis) {
    (axis < first ? layout_.outer_sizes : layout_.middle_sizes).push_back(kernel_.space[axis]);
    (axis < first ? layout_.outer_axes : layout_.middle_axes).push_back(axis);
  }
  layout_.inner_size = kernel_.space[rank - 1];
  layout_.inner_axis = rank - 1;
  mark_varying();
  if (needs_column_passes()) return emit_column_passes();
  if (reductions_.empty()) throw CompileError("column kernel", "has no reduction", std::string());
  // One pass: every reduction folds its own operand; none reads another's result (needs_column_passes).
  struct Folded {
    const Instance* reduction;
    const ir::Node* node;
    ReductionInfo info;
    std::string accumulators;          // the array of its accumulators, a vector per group of lanes columns
    std::vector<ir::ValueId> outputs;  // the outputs it computes: itself, and views of it (a transpose of size-1 axes)
  };
  std::vector<Folded> folded;
  std::set<int> needed;
  for (int id : reductions_) {
    const Instance& reduction = at(id);
    const ir::Node& node = emitter_.graph().node(reduction.value);
    folded.push_back(
        {&reduction, &node, reduction_info(node.op, node.type.dtype), "accumulators_" + reduction.name, {}});
    for (const auto& [value, instance] : outputs_)
      if (instance == id) folded.back().outputs.push_back(value);
    collect_elements(reduction.operands[0], {}, needed);
  }
  choose_streamed(element_outputs());
  std::string stores;  // the element outputs, at each element of the block
  for (const auto& [value, id] : outputs_) {
    if (is_row_output(value)) continue;
    collect_elements(id, {}, needed);
    stores += element_store(value, id);
  }
  // Rows in groups (see column_row_group) where the body is cheap and one reduced axis gives the row's
  // coordinate without a division.
  const bool grouped = layout_.middle_sizes.size() == 1 && !computes_transcendental(needed);
  const std::int64_t columns = layout_.inner_size, reduced = layout_.middle_count(), outer = layout_.rows();
  const std::int64_t block =
      std::min((std::max<std::int64_t>(columns, 1) + widest_lanes - 1) / widest_lanes * widest_lanes, column_block);
  const std::int64_t column_blocks = (columns + block - 1) / block;
  const std::int64_t row_blocks = column_row_blocks(reduced, outer * column_blocks);
  const std::int64_t rows_per_block = (reduced + row_blocks - 1) / row_blocks;
  whole_vectors_ = columns % widest_lanes == 0;

  const std::string prefix = emitter_.prefix();
  const std::string group = "(j - block_begin) / lanes",
                    count = "block_end - j < lanes ? static_cast<int>(block_end - j) : lanes";
  // Where reduction `f`'s partial results of row block `row_block` lie, [row block][outer index][column].
  auto partials = [&](const Folded& f, const std::string& row_block) {
    return "state.partials_" + f.reduction->name + " + (" + row_block + " * " + std::to_string(outer) + " + row) * " +
           std::to_string(columns);
  };
  std::string text = "struct " + prefix + "_state {\n" + state_fields(emitter_);
  if (row_blocks > 1)
    for (const Folded& f : folded)
      text += "  " + emitter_.storage_type(f.reduction->value) + "* partials_" + f.reduction->name +
              ";  // [row block][outer index][column]\n";
  text += "};\n\n";
  text += "void " + prefix + "_items(void* context, int64_t begin, int64_t end) {\n" + state_from_context();
  text += "  for (int64_t item = begin; item < end; ++item) {\n";
  text += "    const int64_t row = item / " + std::to_string(column_blocks * row_blocks) + ";\n";
  text += "    const int64_t row_block = item / " + std::to_string(column_blocks) + " % " + std::to_string(row_blocks) +
          ";\n";
  text += "    const int64_t block_begin = item % " + std::to_string(column_blocks) + " * " + std::to_string(block) +
          ";\n    const int64_t block_end = block_begin + " + std::to_string(block) + " < " + std::to_string(columns) +
          " ? block_begin + " + std::to_string(block) + " : " + std::to_string(columns) + ";\n";
  text += row_setup() + row_values(0);
  for (const Folded& f : folded) {
    const std::string type = vector_type(emitter_, f.reduction->value);
    text += "    " + emitter_.describe(f.reduction->value) + ": one accumulator per group of lanes columns\n";
    text += "    " + type + " " + f.accumulators + "[" + std::to_string(block) + " / lanes];\n";
    text += "    for (" + type + "& accumulator : " + f.accumulators + ") accumulator = " + f.info.identity + ";\n";
  }
  text += "    const int64_t r_end = (row_block + 1) * " + std::to_string(rows_per_block) + " < " +
          std::to_string(reduced) + " ? (row_block + 1) * " + std::to_string(rows_per_block) + " : " +
          std::to_string(reduced) + ";\n";
  const std::string first_row = "row_block * " + std::to_string(rows_per_block);
  auto fold = [&](const Folded& f, const std::string& accumulator) {
    return accumulator + " = " + f.info.combine + "(" + accumulator + ", first_lanes(" +
           at(f.reduction->operands[0]).name + ", " + f.info.identity + ", count));\n";
  };
  if (grouped) {
    const std::string rows = std::to_string(column_row_group);
    text += "    // " + rows + " rows at a time, each vector of columns down them: " + rows +
            " streams in flight, the accumulators in registers.\n";
    text += "    for (int64_t r0 = " + first_row + "; r0 < r_end; r0 += " + rows + ") {\n";
    text += "      const int64_t group_end = r0 + " + rows + " < r_end ? r0 + " + rows + " : r_end;\n";
    std::string body, folds, keep;
    for (const Folded& f : folded) {
      const std::string type = vector_type(emitter_, f.reduction->value);
      body += "        " + type + " accumulator_" + f.reduction->name + " = " + f.accumulators + "[" + group + "];\n";
      folds += "          " + fold(f, "accumulator_" + f.reduction->name);
      keep += "        " + f.accumulators + "[" + group + "] = accumulator_" + f.reduction->name + ";\n";
    }
    body += "        for (int64_t d0 = r0; d0 < group_end; ++d0) {\n";
    body += element_values(needed, 0) + stores + folds + "        }\n" + keep;
    text += inner_vector_loop("block_begin", "block_end", body, "", 1) + "    }\n";
  } else {
    text += "    for (int64_t r = " + first_row + "; r < r_end; ++r) {\n";
    text += digits(layout_.middle_sizes, "r", "d", "      ");
    std::string body = element_values(needed, 0) + stores;
    for (const Folded& f : folded) body += "        " + fold(f, f.accumulators + "[" + group + "]");
    text += inner_vector_loop("block_begin", "block_end", body, "", 1) + "    }\n";
  }
  for (const Folded& f : folded) {
    const std::string storage = emitter_.storage_type(f.reduction->value);
    if (row_blocks > 1) {
      text += "    for (int64_t j = block_begin; j < block_end; j += lanes)\n      store<" + storage + ">(" +
              partials(f, "row_block") + " + j, " + f.accumulators + "[" + group + "], " + count + ");\n";
      continue;
    }
    for (ir::ValueId output : f.outputs)
      text += "    for (int64_t j = block_begin; j < block_end; j += lanes)\n      store<" + storage + ">(state." +
              emitter_.output_name(output) + " + row * " + std::to_string(columns) + " + j, " +
              finished(f.accumulators + "[" + group + "]", *f.node, storage) + ", " + count + ");\n";
  }
  text += "  }\n";
  if (!streamed_.empty()) text += "  end_streaming();\n";
  text += "}\n\n" + entry_opening();
  const std::int64_t items = outer * column_blocks * row_blocks;
  if (row_blocks == 1) {
    text += "  runtime->parallel_for(" + std::to_string(items) + ", 1, " + prefix + "_items, &state);\n}\n";
    return text;
  }
  for (const Folded& f : folded) {
    const std::string storage = emitter_.storage_type(f.reduction->value);
    text += "  state.partials_" + f.reduction->name + " = static_cast<" + storage + "*>(runtime->allocate(" +
            std::to_string(row_blocks * outer * columns) + " * sizeof(" + storage + ")));\n";
  }
  text += "  runtime->parallel_for(" + std::to_string(items) + ", 1, " + prefix + "_items, &state);\n";
  text += "  // The row blocks' partial results, combined in row-block order.\n";
  text += "  for (int64_t row = 0; row < " + std::to_string(outer) + "; ++row) {\n";
  text += "    const int64_t block_begin = 0, block_end = " + std::to_string(columns) + ";\n";
  text += "    for (int64_t j = block_begin; j < block_end; j += lanes) {\n      const int count = " + count + ";\n";
  for (const Folded& f : folded) {
    const std::string storage = emitter_.storage_type(f.reduction->value);
    const std::string type = vector_type(emitter_, f.reduction->value);
    text += "      " + type + " total_" + f.reduction->name + " = " + f.info.identity + ";\n";
    text += "      for (int64_t row_block = 0; row_block < " + std::to_string(row_blocks) + "; ++row_block)\n";
    text += "        total_" + f.reduction->name + " = " + std::string(f.info.combine) + "(total_" + f.reduction->name +
            ", first_lanes(load<" + storage + ">(" + partials(f, "row_block") + " + j, count), " + f.info.identity +
            ", count));\n";
    for (ir::ValueId output : f.outputs)
      text += "      store<" + storage + ">(state." + emitter_.output_name(output) + " + row * " +
              std::to_string(columns) + " + j, " + finished("total_" + f.reduction->name, *f.node, storage) +
              ", count);\n";
  }
  text += "    }\n  }\n";
  for (const Folded& f : folded) text += "  runtime->deallocate(state.partials_" + f.reduction->name + ");\n";
  text += "}\n";
  return text;
}

std::string RowKernel::finished(const std::string& accumulator, const ir::Node& node,
                                const std::string& storage) const {
  if (node.op != ir::Op::reduce_mean) return accumulator;
  return "div(" + accumulator + ", splat<" + storage + ">(static_cast<" + storage + ">(" +
         std::to_string(layout_.middle_count()) + ")))";
}

}  // namespace kiln::compiler::cpu
