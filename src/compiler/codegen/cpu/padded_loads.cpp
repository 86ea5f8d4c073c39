// Loads of padded inputs read in place (fusion.h: padding read in place): a loop kernel reads the value under the
// padding, and the padding's constant wherever the load's index map falls outside it. A bound along a row axis is
// checked once per row: a row on the padding reads a row of the constant instead of its source (or, where no such row
// fits, its loads are the constant by a condition each); a bound along the inner loop limits the elements of each row
// that are loaded to a window computed here, lane by lane only in the vectors that straddle its ends. What the CUDA
// generator shares (the layout's handling of bounded axes, the conditions) is in padding_bounds.cpp.

#include "compiler/codegen/cpu/row_kernel.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler::cpu {
namespace {

// The longest padding row (padding_row_length): a depthwise 3x3 convolution's rows are one image position (64
// channels, 256 bytes); a max pool's merge the width and the channels (112 x 64 floats, 28 KiB).
constexpr std::int64_t kMaxPaddingRowBytes = 32 * 1024;

// floor(a / b) and ceil(a / b) for b != 0.
std::int64_t floor_divide(std::int64_t a, std::int64_t b) {
  const std::int64_t quotient = a / b;
  return quotient * b != a && ((a < 0) != (b < 0)) ? quotient - 1 : quotient;
}
std::int64_t ceil_divide(std::int64_t a, std::int64_t b) { return -floor_divide(-a, b); }

}  // namespace

std::string RowKernel::row_inside(const Instance& item) const {
  return emitter_.inside_condition(item, layout_, "", true);
}

std::string RowKernel::middle_inside(const Instance& item) const { return emitter_.middle_condition(item, layout_); }

std::pair<std::int64_t, std::int64_t> RowKernel::inner_window(const Instance& item) const {
  std::int64_t begin = 0, end = layout_.inner_size;
  for (const Bound& bound : item.bounds) {
    const AxisMap& coordinate = bound.coordinate;
    if (coordinate.source < 0 || kernel_.space[coordinate.source] == 1) continue;
    const KernelEmitter::BoundedAxis where = emitter_.bounded_axis(layout_, coordinate.source);
    if (where.row_axis >= 0 || where.middle_axis >= 0) continue;  // row_inside's or middle_inside's
    // The axis's coordinate q = j / divisor: offset + scale * q in [0, size - 1] for q in [first, last], so j in
    // [first * divisor, (last + 1) * divisor).
    const std::int64_t offset = coordinate.offset, scale = coordinate.scale, top = bound.size - 1;
    const std::int64_t first = scale > 0 ? ceil_divide(-offset, scale) : ceil_divide(top - offset, scale);
    const std::int64_t last = scale > 0 ? floor_divide(top - offset, scale) : floor_divide(-offset, scale);
    begin = std::max(begin, first * where.divisor);
    end = std::min(end, (last + 1) * where.divisor);
  }
  return {begin, std::max(begin, end)};
}

std::string RowKernel::padding_scalar(const Instance& item) const {
  return "static_cast<" + emitter_.storage_type(item.value) + ">(" + literal(emitter_.graph().node(item.padding)) + ")";
}

std::int64_t RowKernel::padding_row_length(const Instance& item) const {
  if (across_lanes_ || (row_inside(item).empty() && middle_inside(item).empty())) return 0;
  const auto [begin, end] = inner_window(item);
  if (begin != 0 || end != layout_.inner_size) return 0;
  // The last element a row's loads reach: the inner loop's and every middle loop's last step.
  const std::int64_t step = emitter_.inner_coefficient(item.address, layout_);
  if (step < 0) return 0;
  std::int64_t last = step * (layout_.inner_size - 1);
  for (std::size_t t = 0; t < layout_.middle_axes.size(); ++t) {
    const std::int64_t coefficient = item.address.coefficients.empty()
                                         ? 0
                                         : item.address.coefficients[static_cast<std::size_t>(layout_.middle_axes[t])];
    if (coefficient < 0) return 0;
    last += coefficient * (layout_.middle_sizes[t] - 1);
  }
  const std::int64_t bytes = (last + 1) * static_cast<std::int64_t>(size_of(emitter_.graph().type(item.value).dtype));
  return bytes <= kMaxPaddingRowBytes ? last + 1 : 0;
}

std::string RowKernel::padding_row_type(const Instance& item, std::int64_t length) const {
  return "constant_row<" + emitter_.storage_type(item.value) + ", " + std::to_string(length) + ">";
}

std::string RowKernel::padding_row(const Instance& item) const {
  const std::int64_t length = padding_row_length(item);
  if (length == 0) return "";
  const auto found = padding_rows_.find(padding_row_type(item, length) + padding_scalar(item));
  // padded_row_setup declares it in the items function before any load is written; reading without it would read
  // outside the source.
  if (found == padding_rows_.end())
    throw CompileError("concat", "internal: a padded load's row of the constant was not declared",
                       emitter_.graph().node(item.value).location);
  return found->second + ".values";
}

std::string RowKernel::padded_row_setup(const Instance& item) const {
  const std::string type = emitter_.storage_type(item.value);
  const std::string condition = row_inside(item);
  const auto [begin, end] = inner_window(item);
  const std::int64_t step = emitter_.inner_coefficient(item.address, layout_);
  const std::int64_t padding_length = padding_row_length(item);
  std::string text = "    // " + describe(emitter_.graph(), item.value) + ": " +
                     describe(emitter_.graph(), kernel_.inputs[static_cast<std::size_t>(item.buffer)]) +
                     " read in place, " + (padding_length > 0 ? "a row of " : "") +
                     "the padding where it falls outside";
  if (end == begin)
    text += " (everywhere)";
  else if (begin > 0 || end < layout_.inner_size)
    text += " (elements " + std::to_string(begin) + " to " + std::to_string(end - 1) + " of a row read it)";
  text += "\n";
  Linear first = item.address;  // the row's element `begin`
  first.offset += begin * step;
  std::string offset = end == begin ? "0" : emitter_.row_offset(first, layout_);  // "0": nothing is read
  const std::string source = "state." + emitter_.input_name(item.buffer) + " + (" + offset + ")";
  const std::string declaration = "    const " + type + "* " + pointer(item) + " = ";
  if (padding_length > 0) {
    // Loads sharing a type, a constant and a length share one row.
    const std::string row_type = padding_row_type(item, padding_length);
    const auto [row, added] = padding_rows_.try_emplace(row_type + padding_scalar(item),
                                                        "padding_row_" + std::to_string(padding_rows_.size()));
    if (added)
      text += "    static constexpr " + row_type + " " + row->second + " = fill_row<" + type + ", " +
              std::to_string(padding_length) + ">(" + padding_scalar(item) + ");\n";
  }
  if (condition.empty()) return text + declaration + source + ";\n";
  text += "    const bool inside_" + item.name + " = " + condition + ";\n";
  if (padding_length > 0)
    return text + declaration + "inside_" + item.name + " ? " + source + " : " + padding_row(item) + ";\n";
  return text + declaration + "state." + emitter_.input_name(item.buffer) + " + (inside_" + item.name + " ? " + offset +
         " : 0);\n";
}

std::string RowKernel::padded_base(const Instance& item, const std::string& base) const {
  const std::string condition = middle_inside(item);
  if (condition.empty()) return base;
  const std::string row = padding_row(item);
  return row.empty() ? base : "(" + condition + " ? " + base + " : " + row + ")";  // no row: padded_value's condition
}

std::string RowKernel::padded_value(const Instance& item, const std::string& loaded, const std::string& base) const {
  const std::string type = emitter_.storage_type(item.value),
                    fill = "splat<" + type + ">(" + padding_scalar(item) + ")";
  const auto [begin, end] = inner_window(item);
  std::string value = loaded;
  if (end == begin) return fill;
  if (begin > 0 || end < layout_.inner_size)
    value = "load_window<" + type + ">(" + base + ", j - " + std::to_string(begin) + ", " +
            std::to_string(emitter_.inner_coefficient(item.address, layout_)) + ", count, " +
            std::to_string(end - begin) + ", " + padding_scalar(item) + ")";
  if (padding_row_length(item) > 0) return value;  // the row's pointer (and padded_base) chose
  std::string condition = row_inside(item).empty() ? "" : "inside_" + item.name;
  if (const std::string middle = middle_inside(item); !middle.empty())
    condition = condition.empty() ? middle : condition + " && " + middle;
  return condition.empty() ? value : "(" + condition + ") ? " + value + " : " + fill;
}

}  // namespace kiln::compiler::cpu
