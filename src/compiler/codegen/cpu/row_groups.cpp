// Reduction kernels that walk their rows a few at a time, loading what every row reads alike once per step for the
// whole group (row_kernel.h: row groups).

#include "compiler/codegen/cpu/row_kernel.h"

#include <algorithm>

namespace kiln::compiler::cpu {

namespace {

// Rows whose partial sums a group keeps in registers at once: 4 per row (partials_of), so 12 of AVX2's 16 vector
// registers and 16 of AVX-512's 32, the rest for the shared vector and the rows' loads. Four rows with AVX2 spilled
// the sums, and came out no faster than three. (The prelude's `lanes` is 16 with AVX-512, 8 with AVX2.)
constexpr const char* group_rows_declaration = "  constexpr int group_rows = lanes == 16 ? 4 : 3;\n";

// At least this many rows per work range before a kernel walks its rows in groups: a range of a few rows would
// take most of them one at a time anyway, and the module would compile the step twice for little.
constexpr std::int64_t group_min_rows = 16;

// `code` with each line indented two more spaces (a row's own code, written for the row loop, inside a group's).
std::string indented(const std::string& code) {
  std::string text;
  for (std::size_t start = 0; start < code.size();) {
    const std::size_t line_end = code.find('\n', start);
    text += "  " + code.substr(start, line_end - start + 1);
    start = line_end + 1;
  }
  return text;
}

}  // namespace

bool RowKernel::depends_on_row(int id) const {
  const Instance& item = at(id);
  if (item.kind == Instance::Kind::reduction || item.kind == Instance::Kind::tile) return true;
  if (!item.address.coefficients.empty())
    for (int axis : layout_.outer_axes)
      if (item.address.coefficients[static_cast<std::size_t>(axis)] != 0) return true;
  return std::any_of(item.operands.begin(), item.operands.end(), [&](int operand) { return depends_on_row(operand); });
}

bool RowKernel::chooses_row_groups() const {
  if (kernel_.kind != KernelKind::reduction || reductions_.size() != 1 || across_lanes_ || chunked_ ||
      split_reduction_ || !strips_.empty() || !cached_.empty() || !hoisted_.empty() || !layout_.middle_sizes.empty() ||
      layout_.outer_sizes.empty() || !only_reduction_outputs())
    return false;
  if (layout_.rows() < group_min_rows * 2 || partials_of(0) != 4) return false;
  const int reduction = reductions_[0];
  if (!varying(at(reduction).operands[0])) return false;  // an invariant reduction reads no row
  // Padded loads and picks keep their per-row conditions and checks: their rows stay one at a time.
  for (int id = 0; id < emitter_.instance_count(); ++id)
    if (at(id).kind == Instance::Kind::gather || !at(id).bounds.empty()) return false;
  bool shares_a_load = false;
  for (int id : phase_elements_[0]) {
    const Instance& item = at(id);
    if (item.kind == Instance::Kind::load && !depends_on_row(id)) shares_a_load = true;
    // A row value the steps read must be the group's: the steps have no row of their own.
    for (int operand : item.operands)
      if (!varying(operand) && depends_on_row(operand)) return false;
  }
  return shares_a_load;
}

std::string RowKernel::group_walk() const {
  const int reduction_id = reductions_[0];
  const Instance& reduction = at(reduction_id);
  const ir::Node& node = emitter_.graph().node(reduction.value);
  const ReductionInfo info = reduction_info(node.op, node.type.dtype);
  const std::string type = vector_type(emitter_, reduction.value);
  std::set<int> shared, per_row;
  for (int id : phase_elements_[0]) (depends_on_row(id) ? per_row : shared).insert(id);

  std::string text = "  // Whole groups of rows first: each step loads what every row reads alike once for the group\n";
  text += group_rows_declaration;
  text += "  const int64_t groups = (end - begin) / group_rows;\n";
  text += "  for (int64_t walked = 0; walked < groups; ++walked) {\n";
  text += "    const int64_t first_row = begin + (backward ? groups - 1 - walked : walked) * group_rows;\n";
  // The loads: a pointer per row into arrays for the rows' own, one pointer for the shared ones.
  std::string per_row_pointers, group_pointers, step_pointers;
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    const Instance& item = at(id);
    if (item.kind != Instance::Kind::load) continue;
    const std::string element = emitter_.storage_type(kernel_.inputs[static_cast<std::size_t>(item.buffer)]);
    const std::string address =
        "state." + emitter_.input_name(item.buffer) + " + (" + emitter_.row_offset(item.address, layout_) + ")";
    if (!depends_on_row(id)) {
      group_pointers += "    const " + element + "* " + pointer(item) + " = " + address + ";\n";
      continue;
    }
    if (!per_row.count(id)) continue;  // read after the reduction, by the row's own code
    group_pointers += "    const " + element + "* group_" + pointer(item) + "[group_rows];\n";
    per_row_pointers += "      group_" + pointer(item) + "[g] = " + address + ";\n";
    step_pointers += "          const " + element + "* " + pointer(item) + " = group_" + pointer(item) + "[g];\n";
  }
  text += group_pointers;
  text += "    for (int g = 0; g < group_rows; ++g) {\n      const int64_t row = first_row + g;\n" +
          digits(layout_.outer_sizes, "row", "c", "      ") + per_row_pointers + "    }\n";
  text += row_values(0, true);
  text += "    " + emitter_.describe(reduction.value) + ", each row of the group in its own partial sums\n";
  text += "    " + type + " partials[group_rows][4];\n";
  text +=
      "    for (int g = 0; g < group_rows; ++g)\n      for (int p = 0; p < 4; ++p) partials[g][p] = " + info.identity +
      ";\n";
  std::string body = element_values(shared, 0);
  body += "        #pragma GCC unroll 4\n        for (int g = 0; g < group_rows; ++g) {\n" + step_pointers;
  body += indented(element_values(per_row, 0));
  body += "          partials[g][partial] = " + info.combine + "(partials[g][partial], first_lanes(" +
          at(reduction.operands[0]).name + ", " + info.identity + ", count));\n        }\n";
  text += "    {\n" + group_vector_loop(body) + "    }\n";
  // Each row's results, as a row alone finishes them.
  text += "    for (int g = 0; g < group_rows; ++g) {\n      const int64_t row = first_row + g;\n";
  std::string finish = row_setup() + row_values(0);
  finish += "    const " + type + " accumulator0 = " + info.combine + "(" + info.combine +
            "(partials[g][0], partials[g][1]), " + info.combine + "(partials[g][2], partials[g][3]));\n";
  finish += "    const " + type + " " + reduction.name + " = " + finish_reduction(0, "accumulator0") + ";\n";
  finish += reciprocal(reduction_id) + row_values(1) + row_outputs();
  text += indented(finish) + "    }\n  }\n";
  text += "  begin += groups * group_rows;  // the rows left over, one at a time\n";
  return text;
}

std::string RowKernel::group_vector_loop(const std::string& body) const {
  const std::string end = std::to_string(layout_.inner_size);
  std::string loop = "      auto step = [&](int64_t j, int count, int partial) __attribute__((always_inline)) {\n" +
                     body + "      };\n      int64_t j = 0;\n";
  loop += "      #pragma GCC unroll 1\n      for (; j + 4 * lanes <= " + end + "; j += 4 * lanes) {\n";
  for (int p = 0; p < 4; ++p)
    loop += "        step(j" + (p == 0 ? std::string() : " + " + std::to_string(p) + " * lanes") + ", lanes, " +
            std::to_string(p) + ");\n";
  loop +=
      "      }\n      #pragma GCC unroll 1\n      for (; j + lanes <= " + end + "; j += lanes) step(j, lanes, 0);\n";
  if (whole_vectors_)
    loop += "      // no partial vector: every range is a multiple of " + std::to_string(widest_lanes) + " elements\n";
  else
    loop += "      if (j < " + end + ") step(j, static_cast<int>(" + end + " - j), 0);\n";
  return loop;
}

}  // namespace kiln::compiler::cpu
