// Column kernels in passes: reductions over the axes before the last whose results the kernel reads again
// (softmax over the first axis, a batch norm's variance of x - mean), and values computed from those results.

#include "compiler/codegen/cpu/row_kernel.h"

#include <algorithm>
#include <map>

namespace kiln::compiler::cpu {

namespace {

// A work item takes a block of columns and every reduced row of it, so that its per-column values are complete
// before the next pass reads them: blocks of up to 1024 columns (4 KiB of floats per row, which the hardware
// prefetchers stream), narrower where that leaves fewer than this many items for the threads.
constexpr std::int64_t passes_block = 1024;
constexpr std::int64_t passes_items = 16;
// What a work item may keep of the values two passes compute (a transcendental: softmax's exp(x - max), summed in
// one pass and divided in the next), a block's columns for every reduced row. Computed again, exp made softmax over
// the first axis of 4096^2 floats 1.4x slower than three kernels writing exp(x - max) once; the block narrows to
// keep it within this, and below 16 columns the values are computed again after all.
constexpr std::int64_t column_cache_bytes = std::int64_t{4} << 20;
// Where a block's reduced rows are more than this many bytes at the widest block, the next pass would find them in
// no cache: the work items split the reduced rows too, each pass is a parallel loop of its own whose items fold
// blocks of rows into partial results, combined per column before the next (as the one-pass column kernel's row
// blocks are). Softmax over the first axis of 4096^2 floats walked 4096 rows of a block in each of three passes,
// with a cache of exp(x - max) beside them, and took 26-37 ms on Zen 3, slower than the standard executor's five
// kernels (23-30 ms).
constexpr std::int64_t split_rows_bytes = std::int64_t{2} << 20;
// Fewer reduced rows than this are not split.
constexpr std::int64_t split_min_rows = 128;

// `text` two spaces further in, line by line: a block of generated code inside a phase's `if`.
std::string indented(const std::string& text) {
  std::string result;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::size_t stop = end == std::string::npos ? text.size() : end + 1;
    if (stop - start > 1) result += "  ";
    result.append(text, start, stop - start);
    start = stop;
  }
  return result;
}

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

void RowKernel::collect_column_elements(int root, std::set<int>& needed, std::set<int>& per_column,
                                        const std::set<int>& written) const {
  if (needed.count(root) || per_column.count(root)) return;
  if (is_per_column(root)) {
    per_column.insert(root);
    return;
  }
  if (!varying(root)) return;  // a row value, computed once per item
  needed.insert(root);
  if (written.count(root)) return;  // read back from its cache
  for (int operand : at(root).operands) collect_column_elements(operand, needed, per_column, written);
}

std::string RowKernel::per_column_values(const std::set<int>& per_column) const {
  std::string text;
  for (int id : per_column) {
    const std::string& name = at(id).name;
    text += "        const " + vector_type(emitter_, at(id).value) + " " + name + " = column_" + name + "[group];\n";
    if (divisor_of_elements(id))
      text += "        const " + vector_type(emitter_, at(id).value) + " reciprocal_" + name + " = column_reciprocal_" +
              name + "[group];\n        const bool use_reciprocal_" + name + " = column_use_reciprocal_" + name +
              "[group];\n";
  }
  return text;
}

bool RowKernel::divisor_of_elements(int id) const {
  for (int user = 0; user < emitter_.instance_count(); ++user)
    if (divides_by_reciprocal(user) && at(user).operands[1] == id) return true;
  return false;
}

std::string RowKernel::emit_column_passes() {
  const std::int64_t columns = layout_.inner_size, reduced = layout_.middle_count(), outer = layout_.rows();
  // Blocks of whole vectors, narrower where the outer axes and wide blocks would leave threads idle.
  const std::int64_t per_outer =
      (passes_items + std::max<std::int64_t>(outer, 1) - 1) / std::max<std::int64_t>(outer, 1);
  const std::int64_t narrow = (columns + per_outer - 1) / per_outer;
  std::int64_t block =
      std::clamp<std::int64_t>((narrow + widest_lanes - 1) / widest_lanes * widest_lanes, widest_lanes, passes_block);
  const std::int64_t widest_block =
      std::min((std::max<std::int64_t>(columns, 1) + widest_lanes - 1) / widest_lanes * widest_lanes, passes_block);
  const bool split =
      reduced * widest_block * static_cast<std::int64_t>(sizeof(float)) > split_rows_bytes && reduced >= split_min_rows;
  if (split) block = widest_block;

  // Each reduction in the first pass after those whose results it reads; each value computed from results after
  // the pass that completes them.
  // Per-column values that no reduction feeds (a broadcast operand's sign(x), also written out) come before the
  // first pass, which may read them.
  std::vector<std::vector<int>> passes, computed_after;
  std::vector<int> computed_before;
  std::set<int> per_column;
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    if (!is_per_column(id)) continue;
    per_column.insert(id);
    const bool reduction = at(id).kind == Instance::Kind::reduction;
    if (!reduction && column_pass(id) == 0) {
      computed_before.push_back(id);
      continue;
    }
    const std::size_t pass = static_cast<std::size_t>(reduction ? column_pass(id) : std::max(column_pass(id), 1) - 1);
    if (passes.size() <= pass) {
      passes.resize(pass + 1);
      computed_after.resize(pass + 1);
    }
    (reduction ? passes : computed_after)[pass].push_back(id);
  }
  // Element outputs that read no pass's results (a gradient stored and summed over the rows for a bias's) are stored
  // by the first pass, which computes them anyway: a last pass would read the block's inputs again and compute them
  // again (block-train's gelu backward with its bias's gradient, 1024 x 2048: 4.1-4.4 -> 2.3 ms).
  auto stored_in_first_pass = [&](ir::ValueId value, int id) {
    return !passes.empty() && !is_row_output(value) && !per_column.count(id) && column_pass(id) == 0;
  };
  // The values each pass computes at every element (the last one: the element outputs'), first without caches, to
  // find the expensive ones two passes would compute; those are cached where the budget allows.
  auto pass_roots = [&](std::size_t pass) {
    std::vector<int> roots;
    if (pass < passes.size())
      for (int reduction : passes[pass]) roots.push_back(at(reduction).operands[0]);
    for (const auto& [value, id] : outputs_)
      if (!is_row_output(value) && ((pass == 0 && stored_in_first_pass(value, id)) ||
                                    (pass == passes.size() && !stored_in_first_pass(value, id))))
        roots.push_back(id);
    return roots;
  };
  std::map<int, int> passes_computing;
  for (std::size_t pass = 0; pass <= passes.size(); ++pass) {
    std::set<int> elements, ignored;
    for (int root : pass_roots(pass)) collect_column_elements(root, elements, ignored);
    for (int id : elements)
      if (at(id).kind == Instance::Kind::compute && ir::is_transcendental_op(emitter_.graph().node(at(id).value).op))
        passes_computing[id] += 1;
  }
  std::int64_t cached_bytes = 0;  // per column and reduced row
  for (const auto& [id, count] : passes_computing)
    if (count > 1) {
      cached_.insert(id);
      cached_bytes += static_cast<std::int64_t>(size_of(emitter_.graph().type(at(id).value).dtype));
    }
  if (split) cached_.clear();  // each pass reads its rows again anyway: the values are computed again with them
  if (!cached_.empty()) {
    const std::int64_t fits = column_cache_bytes / std::max<std::int64_t>(cached_bytes * reduced, 1);
    if (fits < widest_lanes)
      cached_.clear();
    else
      block = std::min(block, fits / widest_lanes * widest_lanes);
  }
  const std::int64_t column_blocks = (columns + block - 1) / block;
  // Split: row blocks as the one-pass column kernel chooses them.
  const std::int64_t row_blocks = split ? column_row_blocks(reduced, outer * column_blocks) : 1;
  const std::int64_t rows_per_block = (reduced + row_blocks - 1) / row_blocks;
  column_block_ = block;
  whole_vectors_ = columns % widest_lanes == 0 && block % widest_lanes == 0;
  first_write_.assign(static_cast<std::size_t>(emitter_.instance_count()), -1);
  std::vector<std::set<int>> pass_elements(passes.size() + 1), pass_per_column(passes.size() + 1);
  std::set<int> written;
  for (std::size_t pass = 0; pass <= passes.size(); ++pass) {
    for (int root : pass_roots(pass))
      collect_column_elements(root, pass_elements[pass], pass_per_column[pass], written);
    for (int id : pass_elements[pass])
      if (cached_.count(id) && written.insert(id).second)
        first_write_[static_cast<std::size_t>(id)] = static_cast<int>(pass);
  }
  choose_streamed(element_outputs());
  std::string stores, first_pass_stores;
  for (const auto& [value, id] : outputs_) {
    if (is_row_output(value)) continue;
    if (stored_in_first_pass(value, id)) {
      first_pass_stores += element_store(value, id);
      continue;
    }
    if (per_column.count(id)) pass_per_column[passes.size()].insert(id);  // stored at every element of its column
    stores += element_store(value, id);
  }

  const std::string prefix = emitter_.prefix();
  const std::string group = "        const int64_t group = (j - block_begin) / lanes;\n";
  // A pass over the block's reduced rows: `body` at each vector of columns, after the pass's per-column values and
  // element values; `accumulators` (arrays of them, one per reduction) held in registers for the step. Where the
  // pass computes no transcendental and one reduced axis gives the row, rows go in groups of column_row_group, each
  // vector of columns down the group (as the one-pass kernel: more streams in flight).
  const std::string first_row = split ? "r_begin" : "0", last_row = split ? "r_end" : std::to_string(reduced);
  auto pass_over_rows = [&](std::size_t pass, const std::vector<int>& folded, const std::string& body) {
    std::string values = per_column_values(pass_per_column[pass]);
    std::string load, keep;
    for (int reduction : folded) {
      const std::string& name = at(reduction).name;
      load += "        " + vector_type(emitter_, at(reduction).value) + " accumulator_" + name + " = column_" + name +
              "[group];\n";
      keep += "        column_" + name + "[group] = accumulator_" + name + ";\n";
    }
    const std::string elements = element_values(pass_elements[pass], static_cast<int>(pass));
    // (A transcendental an earlier pass cached is a load here.)
    std::set<int> computed;
    for (int id : pass_elements[pass])
      if (!cached_.count(id) || first_write_[static_cast<std::size_t>(id)] == static_cast<int>(pass))
        computed.insert(id);
    const bool grouped = layout_.middle_sizes.size() == 1 && !computes_transcendental(computed);
    if (!grouped)
      return "    for (int64_t r = " + first_row + "; r < " + last_row + "; ++r) {\n" +
             digits(layout_.middle_sizes, "r", "d", "      ") +
             inner_vector_loop("block_begin", "block_end", group + values + load + elements + body + keep, "", 1) +
             "    }\n";
    const std::string rows = std::to_string(column_row_group);
    return "    for (int64_t r0 = " + first_row + "; r0 < " + last_row + "; r0 += " + rows + ") {\n" +
           "      const int64_t group_end = r0 + " + rows + " < " + last_row + " ? r0 + " + rows + " : " + last_row +
           ";\n" +
           inner_vector_loop("block_begin", "block_end",
                             group + values + load + "        for (int64_t d0 = r0; d0 < group_end; ++d0) {\n" +
                                 "        const int64_t r = d0;\n" + elements + body + "        }\n" + keep,
                             "", 1) +
           "    }\n";
  };
  // Split: the pass whose combine completes each per-column value a pass computes (its reductions, and the values
  // they complete), which the items of later phases load.
  std::map<int, std::size_t> completed_in;
  for (std::size_t pass = 0; pass < passes.size(); ++pass) {
    for (int id : passes[pass]) completed_in[id] = pass;
    for (int id : computed_after[pass]) completed_in[id] = pass;
  }
  std::string text = "struct " + prefix + "_state {\n" + state_fields(emitter_);
  if (split) {
    text += "  int64_t phase;  // the pass whose rows (or whose partial results) the items take\n";
    for (const auto& [id, pass] : completed_in)
      text += "  " + emitter_.storage_type(at(id).value) + "* columns_" + at(id).name + ";  // [outer index][column]\n";
    for (const std::vector<int>& reductions : passes)
      for (int id : reductions)
        text += "  " + emitter_.storage_type(at(id).value) + "* partials_" + at(id).name +
                ";  // [row block][outer index][column]\n";
  }
  text += "};\n\n";
  const std::string count = "block_end - j < lanes ? static_cast<int>(block_end - j) : lanes";
  // Where per-column value `id` lies in state, at the row and the column j.
  auto columns_at = [&](int id) {
    return "state.columns_" + at(id).name + " + row * " + std::to_string(columns) + " + j";
  };
  auto partials_at = [&](int id, const std::string& row_block) {
    return "state.partials_" + at(id).name + " + (" + row_block + " * " + std::to_string(outer) + " + row) * " +
           std::to_string(columns) + " + j";
  };
  // An items function's opening: its item's outer row, block of columns and (`rows_split`) block of reduced rows,
  // its row pointers, the block's per-column arrays, and the values of each column that no reduction feeds.
  auto opening = [&](bool rows_split) {
    std::string t = "  for (int64_t item = begin; item < end; ++item) {\n";
    const std::int64_t items_per_row = column_blocks * (rows_split ? row_blocks : 1);
    t += "    const int64_t row = item / " + std::to_string(items_per_row) + ";\n";
    if (rows_split) {
      t += "    const int64_t row_block = item / " + std::to_string(column_blocks) + " % " +
           std::to_string(row_blocks) + ";\n";
      t += "    const int64_t r_begin = row_block * " + std::to_string(rows_per_block) + ";\n";
      t += "    const int64_t r_end = r_begin + " + std::to_string(rows_per_block) + " < " + std::to_string(reduced) +
           " ? r_begin + " + std::to_string(rows_per_block) + " : " + std::to_string(reduced) + ";\n";
    }
    t += "    const int64_t block_begin = item % " + std::to_string(column_blocks) + " * " + std::to_string(block) +
         ";\n    const int64_t block_end = block_begin + " + std::to_string(block) + " < " + std::to_string(columns) +
         " ? block_begin + " + std::to_string(block) + " : " + std::to_string(columns) + ";\n";
    return t + row_setup() + row_values(0);
  };
  text += "void " + prefix + "_items(void* context, int64_t begin, int64_t end) {\n" + state_from_context();
  for (int id : cached_) {
    const std::string type = emitter_.storage_type(at(id).value);
    text += "  // " + at(id).name + " for each reduced row of the block, written by the pass that computes it first\n";
    text += "  " + type + "* cache_" + at(id).name + " = static_cast<" + type + "*>(state.runtime->allocate(" +
            std::to_string(block * reduced) + " * sizeof(" + type + ")));\n";
  }
  text += opening(split);
  std::string arrays =
      "    // The values of each column of the block that the passes compute, a vector per lanes columns.\n";
  for (int id : per_column) {
    const std::string type = vector_type(emitter_, at(id).value), size = "[" + std::to_string(block) + " / lanes]";
    arrays += "    " + type + " column_" + at(id).name + size + ";\n";
    if (divisor_of_elements(id))
      arrays += "    " + type + " column_reciprocal_" + at(id).name + size + ";  // 1 / " + at(id).name +
                ", used where every lane's is a normal number\n    bool column_use_reciprocal_" + at(id).name + size +
                ";\n";
  }
  text += arrays;
  // The values `ids` at each column of the block, from the per-column values and elements they read, and the
  // reciprocals of those that divide.
  auto column_values = [&](const std::vector<int>& ids) {
    std::string body;
    for (int id : ids) {
      std::set<int> elements, read_per_column;
      // An iota has no operands: its value is its coordinate, which element_values writes (kiln-fuzz seed 3:
      // iota / a column sum, per column, spelled iota() with nothing to call). An input is loaded, whatever op made
      // it in its own kernel (kiln-fuzz --gradients seed 2, graph 5434: a reduce_min's result read per column and
      // written out again as a reshape, spelled reduce_min() with nothing to reduce).
      const bool coordinate =
          emitter_.graph().node(at(id).value).op == ir::Op::iota || at(id).kind == Instance::Kind::load;
      if (coordinate) elements.insert(id);
      for (int operand : at(id).operands) collect_column_elements(operand, elements, read_per_column);
      body += "        {\n" + per_column_values(read_per_column) + element_values(elements, 0) +
              (coordinate ? "" : "        " + emitter_.describe(at(id).value) + "\n") + "        column_" +
              at(id).name + "[group] = " + (coordinate ? at(id).name : computed(id)) + ";\n        }\n";
    }
    return body;
  };
  auto reciprocals = [&](const std::vector<int>& ids) {
    std::string body;
    for (int id : ids) {
      if (!divisor_of_elements(id)) continue;
      const std::string& name = at(id).name;
      body += "        column_reciprocal_" + name + "[group] = div(splat<" + emitter_.storage_type(at(id).value) +
              ">(1), column_" + name + "[group]);\n        column_use_reciprocal_" + name +
              "[group] = has_normal_reciprocals(column_" + name + "[group], count);\n";
    }
    return body;
  };
  std::string before;
  if (!computed_before.empty()) {
    before += "    // The values of each column that no reduction feeds, before the passes read them.\n";
    before += "    {\n" +
              inner_vector_loop("block_begin", "block_end",
                                group + column_values(computed_before) + reciprocals(computed_before), "", 1) +
              "    }\n";
  }
  text += before;
  // What pass `pass`'s results complete at each column: its means divided, the values computed from them, and the
  // reciprocals of divisors.
  auto completions = [&](std::size_t pass) {
    std::string body;
    for (int reduction : passes[pass]) {
      const Instance& item = at(reduction);
      const ir::Node& node = emitter_.graph().node(item.value);
      if (node.op == ir::Op::reduce_mean)
        body += "        column_" + item.name +
                "[group] = " + finished("column_" + item.name + "[group]", node, emitter_.storage_type(item.value)) +
                ";\n";
    }
    body += column_values(computed_after[pass]);
    std::vector<int> completed = passes[pass];
    completed.insert(completed.end(), computed_after[pass].begin(), computed_after[pass].end());
    return body + reciprocals(completed);
  };
  auto row_output_stores = [&] {
    std::string t;
    for (const auto& [value, id] : outputs_) {
      if (!is_row_output(value)) continue;
      t += "    for (int64_t j = block_begin; j < block_end; j += lanes)\n      store<" + emitter_.storage_type(value) +
           ">(state." + emitter_.output_name(value) + " + row * " + std::to_string(columns) + " + j, column_" +
           at(id).name + "[(j - block_begin) / lanes], " + count + ");\n";
    }
    return t;
  };
  // The fold of pass `pass`'s reductions along their block's rows into the block's per-column arrays.
  auto fold_rows = [&](std::size_t pass) {
    std::string folds, starts, t;
    t += "    // Pass " + std::to_string(pass + 1) + " over the block's rows, for";
    for (int reduction : passes[pass]) {
      const Instance& item = at(reduction);
      const ir::Node& node = emitter_.graph().node(item.value);
      const ReductionInfo info = reduction_info(node.op, node.type.dtype);
      folds += "        accumulator_" + item.name + " = " + info.combine + "(accumulator_" + item.name +
               ", first_lanes(" + at(item.operands[0]).name + ", " + info.identity + ", count));\n";
      starts += "    for (" + vector_type(emitter_, item.value) + "& accumulator : column_" + item.name +
                ") accumulator = " + info.identity + ";\n";
      t += " %" + std::to_string(item.value);
    }
    if (pass == 0 && !first_pass_stores.empty()) t += ", storing the element outputs that read no pass's results";
    return t + "\n" + starts + pass_over_rows(pass, passes[pass], folds + (pass == 0 ? first_pass_stores : ""));
  };
  if (split) {
    // Each phase's items load the per-column values of the passes before it.
    std::string loads;
    for (std::size_t pass = 0; pass < passes.size(); ++pass) {
      std::vector<int> ids;
      std::string body = group;
      for (const auto& [id, completing] : completed_in)
        if (completing == pass) {
          ids.push_back(id);
          body += "        column_" + at(id).name + "[group] = load<" + emitter_.storage_type(at(id).value) + ">(" +
                  columns_at(id) + ", count);\n";
        }
      if (ids.empty()) continue;
      loads += "    if (state.phase > " + std::to_string(pass) + ") {  // pass " + std::to_string(pass + 1) +
               "'s results\n" + inner_vector_loop("block_begin", "block_end", body + reciprocals(ids), "", 1) +
               "    }\n";
    }
    text += loads;
    for (std::size_t pass = 0; pass < passes.size(); ++pass) {
      if (passes[pass].empty()) continue;
      std::string phase = fold_rows(pass);
      phase += "    // The block of rows' partial results, which " + prefix + "_combine folds in row-block order.\n";
      for (int id : passes[pass])
        phase += "    for (int64_t j = block_begin; j < block_end; j += lanes)\n      store<" +
                 emitter_.storage_type(at(id).value) + ">(" + partials_at(id, "row_block") + ", column_" + at(id).name +
                 "[(j - block_begin) / lanes], " + count + ");\n";
      text += "    if (state.phase == " + std::to_string(pass) + ") {\n" + indented(phase) + "    }\n";
    }
    if (!stores.empty())
      text += "    if (state.phase == " + std::to_string(passes.size()) + ") {\n" +
              indented("    // The element outputs, in a last pass over the block's rows.\n" +
                       pass_over_rows(passes.size(), {}, stores)) +
              "    }\n";
    text += "  }\n";
    if (!streamed_.empty()) text += "  end_streaming();\n";
    text += release_row_caches() + "}\n\n";
    // The combine: per column, a pass's partial results folded in row-block order, what they complete, stored.
    text += "void " + prefix + "_combine(void* context, int64_t begin, int64_t end) {\n" + state_from_context() +
            opening(false) + arrays + before + loads;
    for (std::size_t pass = 0; pass < passes.size(); ++pass) {
      std::string body = group;
      for (int id : passes[pass]) {
        const Instance& item = at(id);
        const ir::Node& node = emitter_.graph().node(item.value);
        const ReductionInfo info = reduction_info(node.op, node.type.dtype);
        const std::string storage = emitter_.storage_type(item.value);
        body += "        " + vector_type(emitter_, item.value) + " total_" + item.name + " = " + info.identity + ";\n";
        body += "        for (int64_t row_block = 0; row_block < " + std::to_string(row_blocks) + "; ++row_block)\n";
        body += "          total_" + item.name + " = " + info.combine + "(total_" + item.name + ", first_lanes(load<" +
                storage + ">(" + partials_at(id, "row_block") + ", count), " + info.identity + ", count));\n";
        body += "        column_" + item.name + "[group] = total_" + item.name + ";\n";
      }
      body += completions(pass);
      for (const auto& [id, completing] : completed_in)
        if (completing == pass)
          body += "        store<" + emitter_.storage_type(at(id).value) + ">(" + columns_at(id) + ", column_" +
                  at(id).name + "[group], count);\n";
      text += "    if (state.phase == " + std::to_string(pass) + ") {\n" +
              inner_vector_loop("block_begin", "block_end", body, "", 1) +
              indented(pass + 1 == passes.size() ? row_output_stores() : "") + "    }\n";
    }
    text += "  }\n}\n\n" + entry_opening();
    const std::int64_t items = outer * column_blocks * row_blocks;
    for (const auto& [id, pass] : completed_in) {
      const std::string storage = emitter_.storage_type(at(id).value);
      text += "  state.columns_" + at(id).name + " = static_cast<" + storage + "*>(runtime->allocate(" +
              std::to_string(outer * columns) + " * sizeof(" + storage + ")));\n";
    }
    for (const std::vector<int>& reductions : passes)
      for (int id : reductions) {
        const std::string storage = emitter_.storage_type(at(id).value);
        text += "  state.partials_" + at(id).name + " = static_cast<" + storage + "*>(runtime->allocate(" +
                std::to_string(row_blocks * outer * columns) + " * sizeof(" + storage + ")));\n";
      }
    for (std::size_t pass = 0; pass < passes.size(); ++pass) {
      text += "  state.phase = " + std::to_string(pass) + ";\n";
      if (!passes[pass].empty())
        text += "  runtime->parallel_for(" + std::to_string(items) + ", 1, " + prefix + "_items, &state);\n";
      text += "  runtime->parallel_for(" + std::to_string(outer * column_blocks) + ", 1, " + prefix +
              "_combine, &state);\n";
    }
    if (!stores.empty())
      text += "  state.phase = " + std::to_string(passes.size()) + ";\n  runtime->parallel_for(" +
              std::to_string(items) + ", 1, " + prefix + "_items, &state);\n";
    for (const auto& [id, pass] : completed_in) text += "  runtime->deallocate(state.columns_" + at(id).name + ");\n";
    for (const std::vector<int>& reductions : passes)
      for (int id : reductions) text += "  runtime->deallocate(state.partials_" + at(id).name + ");\n";
    return text + "}\n";
  }
  for (std::size_t pass = 0; pass < passes.size(); ++pass) {
    if (!passes[pass].empty()) text += fold_rows(pass);
    const std::string body = completions(pass);
    if (!body.empty())
      text += "    {\n" + inner_vector_loop("block_begin", "block_end", group + body, "", 1) + "    }\n";
  }
  if (!stores.empty()) {
    text += "    // The element outputs, in a last pass over the block's rows.\n";
    text += pass_over_rows(passes.size(), {}, stores);
  }
  text += row_output_stores();
  text += "  }\n";
  if (!streamed_.empty()) text += "  end_streaming();\n";
  text += release_row_caches() + "}\n\n" + entry_opening();
  text +=
      "  runtime->parallel_for(" + std::to_string(outer * column_blocks) + ", 1, " + prefix + "_items, &state);\n}\n";
  return text;
}

}  // namespace kiln::compiler::cpu
