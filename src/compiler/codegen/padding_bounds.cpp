// Padding read in place (compiler/fusion.h: padding read in place), what the CPU and CUDA generators share: a load of a
// padded input carries bounds (Bound: a coordinate of its source that must lie inside it); the layout never merges a
// bounded axis with the axis before it, so the axis starts a row axis or the inner loop, and its coordinate is
// that one's divided by the sizes of the axes merged after it (the channels of an image row whose width is
// padded). The CPU's row walk checks row bounds once per row and turns inner ones into a window of the row
// (cpu/padded_loads.cpp); a CUDA thread checks every bound for its element.

#include "compiler/codegen/kernel_emitter.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler::codegen {

std::vector<Linear> KernelEmitter::padding_axes() const {
  const Shape& space = kernel_.space;
  std::vector<Linear> axes;
  for (const Instance& item : instances_)
    for (const Bound& bound : item.bounds) {
      const int axis = bound.coordinate.source;
      if (axis < 0 || space[axis] == 1) continue;  // a constant coordinate
      // Dense row-major strides from this axis inward, 0 before it: every merge holds for it but that of the axis
      // with the one before.
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

KernelEmitter::BoundedAxis KernelEmitter::bounded_axis(const Layout& layout, int axis) const {
  auto divisor = [&](int last) {
    std::int64_t product = 1;
    for (int inner = axis + 1; inner <= last; ++inner) product *= kernel_.space[inner];
    return product;
  };
  // Row axes, middle loops and the inner loop follow one another outward in; each names its innermost axis.
  for (std::size_t t = 0; t < layout.outer_axes.size(); ++t)
    if (layout.outer_axes[t] >= axis) return {static_cast<int>(t), -1, divisor(layout.outer_axes[t])};
  for (std::size_t t = 0; t < layout.middle_axes.size(); ++t)
    if (layout.middle_axes[t] >= axis) return {-1, static_cast<int>(t), divisor(layout.middle_axes[t])};
  return {-1, -1, divisor(layout.inner_axis)};
}

namespace {

// "inside(scale * (along / divisor) + offset, size)" for one bound.
std::string inside_text(const Bound& bound, std::string along, std::int64_t divisor) {
  const AxisMap& coordinate = bound.coordinate;
  if (divisor != 1) along = "(" + along + " / " + std::to_string(divisor) + ")";
  const std::string scaled = coordinate.scale == 1 ? along : std::to_string(coordinate.scale) + " * " + along;
  const std::string text = coordinate.offset == 0  ? scaled
                           : coordinate.offset > 0 ? scaled + " + " + std::to_string(coordinate.offset)
                                                   : scaled + " - " + std::to_string(-coordinate.offset);
  return "inside(" + text + ", " + std::to_string(bound.size) + ")";
}

std::string conjunction(const std::string& left, const std::string& right) {
  return left.empty() ? right : left + " && " + right;
}

}  // namespace

std::string KernelEmitter::inside_condition(const Instance& item, const Layout& layout, const std::string& inner,
                                            bool middle_apart) const {
  std::string condition;
  for (const Bound& bound : item.bounds) {
    const AxisMap& coordinate = bound.coordinate;
    if (coordinate.source < 0 || kernel_.space[coordinate.source] == 1) {  // a constant coordinate
      condition = conjunction(condition,
                              "inside(" + std::to_string(coordinate.offset) + ", " + std::to_string(bound.size) + ")");
      continue;
    }
    const BoundedAxis where = bounded_axis(layout, coordinate.source);
    if (where.middle_axis >= 0) {
      if (middle_apart) continue;
      throw CompileError("concat", "padding read in place along an axis the kernel loops over within a row",
                         graph_.node(item.value).location);
    }
    if (where.row_axis < 0 && inner.empty()) continue;
    condition = conjunction(
        condition,
        inside_text(bound, where.row_axis < 0 ? inner : "c" + std::to_string(where.row_axis), where.divisor));
  }
  return condition;
}

std::string KernelEmitter::middle_condition(const Instance& item, const Layout& layout) const {
  std::string condition;
  for (const Bound& bound : item.bounds) {
    const AxisMap& coordinate = bound.coordinate;
    if (coordinate.source < 0 || kernel_.space[coordinate.source] == 1) continue;
    const BoundedAxis where = bounded_axis(layout, coordinate.source);
    if (where.middle_axis >= 0)
      condition = conjunction(condition, inside_text(bound, "d" + std::to_string(where.middle_axis), where.divisor));
  }
  return condition;
}

}  // namespace kiln::compiler::codegen
