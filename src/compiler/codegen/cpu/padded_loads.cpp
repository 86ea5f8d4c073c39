// Loads of padded inputs read in place (padding_fusion.h): a loop kernel reads the value under the padding, and the
// padding's constant wherever the load's index map falls outside it. A bound along a row axis is checked once per
// row (the row then loads nothing, or loads as any row does); a bound along the inner loop limits the elements of
// each row that are loaded to a window computed here, lane by lane only in the vectors that straddle its ends.
// The layout never merges a bounded axis with the axis before it (padding_axes): it starts its row axis or the
// inner loop, and its coordinate is that one's divided by the sizes of the axes merged after it (the channels of
// an image row whose width is padded).

#include "compiler/codegen/cpu/row_kernel.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler::cpu {
namespace {

// floor(a / b) and ceil(a / b) for b != 0.
std::int64_t floor_divide(std::int64_t a, std::int64_t b) {
  const std::int64_t quotient = a / b;
  return quotient * b != a && ((a < 0) != (b < 0)) ? quotient - 1 : quotient;
}
std::int64_t ceil_divide(std::int64_t a, std::int64_t b) { return -floor_divide(-a, b); }

}  // namespace

std::vector<Linear> RowKernel::padding_axes() const {
  const Shape& space = kernel_.space;
  std::vector<Linear> axes;
  for (int id = 0; id < emitter_.instance_count(); ++id)
    for (const Bound& bound : at(id).bounds) {
      const int axis = bound.coordinate.source;
      if (axis < 0 || space[axis] == 1) continue;  // a constant coordinate
      // Dense row-major strides from this axis inward, 0 before it: every merge holds for it but that of the axis
      // with the one before, so the axis starts its group and its coordinate is the group's divided by the sizes
      // of the axes after it in the group.
      Linear strides;
      strides.coefficients.assign(static_cast<std::size_t>(space.rank()), 0);
      std::int64_t stride = 1;
      for (int inner = space.rank() - 1; inner >= axis; --inner) {
        strides.coefficients[static_cast<std::size_t>(inner)] = stride;
        stride *= space[inner];
      }
      axes.push_back(std::move(strides));
    }
  return axes;
}

RowKernel::BoundedAxis RowKernel::bounded_axis(const Instance& item, int axis) const {
  auto divisor = [&](int last) {
    std::int64_t product = 1;
    for (int inner = axis + 1; inner <= last; ++inner) product *= kernel_.space[inner];
    return product;
  };
  for (std::size_t t = 0; t < layout_.outer_axes.size(); ++t)
    if (layout_.outer_axes[t] >= axis) return {static_cast<int>(t), divisor(layout_.outer_axes[t])};
  if (layout_.inner_axis >= axis) return {-1, divisor(layout_.inner_axis)};
  throw CompileError("concat", "padding read in place along an axis the kernel loops over within a row",
                     emitter_.graph().node(item.value).location);
}

std::string RowKernel::row_inside(const Instance& item) const {
  std::string condition;
  for (const Bound& bound : item.bounds) {
    const AxisMap& coordinate = bound.coordinate;
    std::string text = std::to_string(coordinate.offset);
    if (coordinate.source >= 0 && kernel_.space[coordinate.source] != 1) {
      const BoundedAxis where = bounded_axis(item, coordinate.source);
      if (where.row_axis < 0) continue;  // inner_window's
      std::string row = "c" + std::to_string(where.row_axis);
      if (where.divisor != 1) row = "(" + row + " / " + std::to_string(where.divisor) + ")";
      const std::string scaled = coordinate.scale == 1 ? row : std::to_string(coordinate.scale) + " * " + row;
      text = coordinate.offset == 0  ? scaled
             : coordinate.offset > 0 ? scaled + " + " + std::to_string(coordinate.offset)
                                     : scaled + " - " + std::to_string(-coordinate.offset);
    }
    condition +=
        (condition.empty() ? "" : " && ") + std::string("inside(") + text + ", " + std::to_string(bound.size) + ")";
  }
  return condition;
}

std::pair<std::int64_t, std::int64_t> RowKernel::inner_window(const Instance& item) const {
  std::int64_t begin = 0, end = layout_.inner_size;
  for (const Bound& bound : item.bounds) {
    const AxisMap& coordinate = bound.coordinate;
    if (coordinate.source < 0 || kernel_.space[coordinate.source] == 1) continue;
    const BoundedAxis where = bounded_axis(item, coordinate.source);
    if (where.row_axis >= 0) continue;  // row_inside's
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

std::string RowKernel::padding_fill(const Instance& item) const {
  const std::string type = emitter_.storage_type(item.value);
  return "splat<" + type + ">(static_cast<" + type + ">(" + literal(emitter_.graph().node(item.padding)) + "))";
}

std::string RowKernel::padded_row_setup(const Instance& item) const {
  const std::string type = emitter_.storage_type(item.value);
  const std::string condition = row_inside(item);
  const auto [begin, end] = inner_window(item);
  const std::int64_t step = emitter_.inner_coefficient(item.address, layout_);
  std::string text = "    // " + describe(emitter_.graph(), item.value) + ": " +
                     describe(emitter_.graph(), kernel_.inputs[static_cast<std::size_t>(item.buffer)]) +
                     " read in place, the padding where it falls outside";
  if (end == begin)
    text += " (everywhere)";
  else if (begin > 0 || end < layout_.inner_size)
    text += " (elements " + std::to_string(begin) + " to " + std::to_string(end - 1) + " of a row read it)";
  text += "\n";
  Linear first = item.address;  // the row's element `begin`
  first.offset += begin * step;
  std::string offset = end == begin ? "0" : emitter_.row_offset(first, layout_);  // "0": nothing is read
  if (!condition.empty()) {
    text += "    const bool inside_" + item.name + " = " + condition + ";\n";
    offset = "inside_" + item.name + " ? " + offset + " : 0";
  }
  return text + "    const " + type + "* " + pointer(item) + " = state." + emitter_.input_name(item.buffer) + " + (" +
         offset + ");\n";
}

std::string RowKernel::padded_value(const Instance& item, const std::string& loaded) const {
  const std::string type = emitter_.storage_type(item.value), fill = padding_fill(item);
  const auto [begin, end] = inner_window(item);
  std::string value = loaded;
  if (end == begin) return fill;
  if (begin > 0 || end < layout_.inner_size)
    value = "load_window<" + type + ">(" + pointer(item) + ", j - " + std::to_string(begin) + ", " +
            std::to_string(emitter_.inner_coefficient(item.address, layout_)) + ", count, " +
            std::to_string(end - begin) + ", static_cast<" + type + ">(" +
            literal(emitter_.graph().node(item.padding)) + "))";
  return row_inside(item).empty() ? value : "inside_" + item.name + " ? " + value + " : " + fill;
}

}  // namespace kiln::compiler::cpu
