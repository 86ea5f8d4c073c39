// Loop kernels over an input whose rows are the kernel's columns (transpose(x) + y, a transpose that moves the
// innermost axis). Each work item takes a group of `lanes` rows and a block of columns; it first transposes the
// block of each such input into a strip of rows on the stack, a lanes x lanes tile at a time through registers
// (prelude: transpose_into_strip), and then walks its rows as any loop kernel does, loading those inputs from
// their strips. The input is read in whole cache lines, as the standard transpose kernel reads it, and the
// kernel writes nothing but its outputs.

#include "compiler/codegen/cpu/row_kernel.h"

#include <algorithm>
#include <cstdlib>

namespace kiln::compiler::cpu {
namespace {

// A load whose consecutive elements along a row lie at least this many bytes apart reads them through a
// strip: from 64 bytes on each element of a gathered vector is on a cache line of its own. Swapping the last
// two axes of [64, 2048, k] floats times 2 (Emerald Rapids, 2 threads), gathers -> strips: k = 16 0.97 -> 0.72
// ms, 32 3.3 -> 1.0, 64 8.9 -> 2.2, 128 18.4 -> 5.8; at k = 8 (32 bytes) strips were no faster.
constexpr std::int64_t strip_stride_bytes = 64;
// The strips of one item, all inputs together, take at most this many bytes of the stack (L1-resident), and
// a column block at most max_strip_columns columns.
constexpr std::int64_t strip_bytes = 64 << 10;
constexpr std::int64_t max_strip_columns = 256;

std::string indented(const std::string& text) {
  std::string result;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size() - 1;
    if (end > start) result += "  ";
    result += text.substr(start, end - start + 1);
    start = end + 1;
  }
  return result;
}

}  // namespace

std::vector<int> RowKernel::strip_loads() const {
  if (kernel_.kind != KernelKind::loop || across_lanes_ || layout_.outer_sizes.empty() || layout_.inner_axis < 0 ||
      !layout_.middle_sizes.empty() || layout_.inner_size < widest_lanes || layout_.outer_sizes.back() < widest_lanes)
    return {};  // (a last row axis shorter than a tile would fill every strip element by element)
  const auto row_axis = static_cast<std::size_t>(layout_.outer_axes.back());
  std::vector<int> loads;
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    const Instance& item = at(id);
    if (item.kind != Instance::Kind::load || !item.bounds.empty()) continue;
    const DType dtype = emitter_.graph().type(kernel_.inputs[static_cast<std::size_t>(item.buffer)]).dtype;
    const auto element_bytes = static_cast<std::int64_t>(size_of(dtype));
    if (dtype == DType::boolean || item.address.coefficients[row_axis] != 1) continue;
    if (std::abs(emitter_.inner_coefficient(item.address, layout_)) * element_bytes >= strip_stride_bytes)
      loads.push_back(id);
  }
  return loads;
}

bool RowKernel::reads_strip(int id) const { return std::find(strips_.begin(), strips_.end(), id) != strips_.end(); }

std::int64_t RowKernel::strip_columns() const {
  std::int64_t row_bytes = 0;  // one column of every strip, for the widest vectors
  for (int id : strips_)
    row_bytes += widest_lanes * static_cast<std::int64_t>(size_of(emitter_.graph().type(at(id).value).dtype));
  const std::int64_t fitting =
      std::max<std::int64_t>(widest_lanes, strip_bytes / row_bytes / widest_lanes * widest_lanes);
  const std::int64_t needed = (layout_.inner_size + widest_lanes - 1) / widest_lanes * widest_lanes;
  return std::min({fitting, max_strip_columns, needed});
}

std::string RowKernel::strip_items() const {
  const std::string rows = std::to_string(layout_.rows()), inner = std::to_string(layout_.inner_size);
  const std::string columns = std::to_string(strip_columns());
  const std::string blocks = std::to_string((layout_.inner_size + strip_columns() - 1) / strip_columns());
  std::string text = "void " + emitter_.prefix() + "_items(void* context, int64_t begin, int64_t end) {\n";
  text += state_from_context();
  for (int id : strips_)
    text += "  alignas(64) " + emitter_.storage_type(at(id).value) + " " + strip_name(at(id)) + "[lanes * " + columns +
            "];  // %" + std::to_string(at(id).value) + " by rows\n";
  text += allocate_row_caches();
  text += "  for (int64_t item = begin; item < end; ++item) {\n";
  text += "    // rows [first_row, first_row + group_rows), columns [column_begin, column_end)\n";
  const bool one_block = blocks == "1";
  if (!one_block) text += "    constexpr int64_t row_groups = (" + rows + " + lanes - 1) / lanes;\n";
  text += "    const int64_t first_row = item" + std::string(one_block ? "" : " % row_groups") + " * lanes;\n";
  text += "    const int group_rows = first_row + lanes <= " + rows + " ? lanes : static_cast<int>(" + rows +
          " - first_row);\n";
  if (one_block) {
    text += "    const int64_t column_begin = 0, column_end = " + inner + ";\n";
  } else {
    text += "    const int64_t column_begin = item / row_groups * " + columns + ";\n";
    text += "    const int64_t column_end = column_begin + " + columns + " < " + inner + " ? column_begin + " +
            columns + " : " + inner + ";\n";
  }
  text += fill_strips();
  text += "    for (int64_t row = first_row; row < first_row + group_rows; ++row) {\n";
  text += indented(row_setup() + row_values(0) + element_pass("column_begin", "column_end") + row_outputs());
  text += "    }\n  }\n";
  if (!streamed_.empty()) text += "  end_streaming();\n";
  return text + release_row_caches() + "}\n\n";
}

std::string RowKernel::fill_strips() const {
  const std::string columns = std::to_string(strip_columns());
  const std::size_t last = layout_.outer_sizes.size() - 1;
  std::string whole, ragged;
  for (int id : strips_) {
    const Instance& item = at(id);
    const std::string type = emitter_.storage_type(item.value);
    const std::string source =
        "state." + emitter_.input_name(item.buffer) + " + (" + emitter_.row_offset(item.address, layout_) + ")";
    const std::string stride = std::to_string(emitter_.inner_coefficient(item.address, layout_));
    whole += "      transpose_into_strip<" + type + ">(" + strip_name(item) + ", " + columns + ", " + source + ", " +
             stride + ", column_begin, column_end);\n";
    ragged += "          const " + type + "* source_" + item.name + " = " + source + ";\n";
    ragged += "          for (int64_t j = column_begin; j < column_end; ++j) " + strip_name(item) + "[t * " + columns +
              " + (j - column_begin)] = source_" + item.name + "[j * " + stride + "];\n";
  }
  std::string text = "    {  // the transposed inputs' blocks, as rows\n      const int64_t row = first_row;\n" +
                     digits(layout_.outer_sizes, "row", "c", "      ");
  // Groups of rows are whole tiles unless the rows end within one or the last row axis wraps within one.
  const std::int64_t last_size = layout_.outer_sizes[last];
  if (layout_.rows() % widest_lanes == 0 && last_size % widest_lanes == 0) return text + whole + "    }\n";
  text += "      if (group_rows == lanes && c" + std::to_string(last) + " + lanes <= " + std::to_string(last_size) +
          ") {\n" + indented(whole) + "      } else {  // element by element, each row from its own coordinates\n";
  text += "        for (int t = 0; t < group_rows; ++t) {\n          const int64_t row = first_row + t;\n" +
          digits(layout_.outer_sizes, "row", "c", "          ") + ragged + "        }\n      }\n    }\n";
  return text;
}

}  // namespace kiln::compiler::cpu
