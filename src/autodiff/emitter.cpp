#include "autodiff/emitter.h"

#include "ir/type_rules.h"

#include <algorithm>

namespace kiln::autodiff {

ValueId Emitter::apply(ir::Op op, std::vector<ValueId> operands, const ir::Attributes& attributes,
                       ir::Type declared) {
  std::vector<ir::Type> types;
  types.reserve(operands.size());
  for (ValueId operand : operands) types.push_back(graph_.type(operand));
  ir::Node node;
  node.op = op;
  node.attributes = attributes;
  node.location = location_;
  node.type = ir::infer_type(op, attributes, types, declared, location_);
  node.operands = std::move(operands);
  return graph_.add(std::move(node));
}

ValueId Emitter::constant(double value, DType dtype, Shape shape) {
  ir::Attributes attributes;
  if (is_floating(dtype))
    attributes.float_value = value;
  else
    attributes.int_value = static_cast<std::int64_t>(value);
  return apply(ir::Op::constant, {}, attributes, ir::Type{dtype, shape});
}

ValueId Emitter::iota(Shape shape, std::int64_t axis, DType dtype) {
  ir::Attributes attributes;
  attributes.axis = axis;
  return apply(ir::Op::iota, {}, attributes, ir::Type{dtype, shape});
}

ValueId Emitter::indicator(ir::Op comparison, ValueId a, ValueId b, DType dtype) {
  return cast(binary(comparison, a, b), dtype);
}

ValueId Emitter::cast(ValueId x, DType dtype) {
  if (this->dtype(x) == dtype) return x;
  return apply(ir::Op::cast, {x}, {}, ir::Type{dtype, shape(x)});
}

ValueId Emitter::reshape(ValueId x, Shape shape) {
  if (this->shape(x) == shape) return x;
  return apply(ir::Op::reshape, {x}, {}, ir::Type{dtype(x), shape});
}

ValueId Emitter::broadcast_to(ValueId x, Shape shape) {
  if (this->shape(x) == shape) return x;
  return apply(ir::Op::broadcast_to, {x}, {}, ir::Type{dtype(x), shape});
}

ValueId Emitter::transpose(ValueId x, std::vector<std::int64_t> permutation) {
  bool identity = true;
  for (std::size_t axis = 0; axis < permutation.size(); ++axis)
    identity = identity && permutation[axis] == static_cast<std::int64_t>(axis);
  if (identity) return x;
  ir::Attributes attributes;
  attributes.axes = std::move(permutation);
  return apply(ir::Op::transpose, {x}, attributes);
}

ValueId Emitter::slice(ValueId x, std::vector<std::int64_t> start, std::vector<std::int64_t> step, Shape shape) {
  ir::Attributes attributes;
  attributes.start = std::move(start);
  attributes.step = std::move(step);
  return apply(ir::Op::slice, {x}, attributes, ir::Type{dtype(x), shape});
}

ValueId Emitter::slice_axis(ValueId x, int axis, std::int64_t begin, std::int64_t count) {
  const Shape& input = shape(x);
  if (begin == 0 && count == input[axis]) return x;
  std::vector<std::int64_t> start(static_cast<std::size_t>(input.rank()), 0);
  std::vector<std::int64_t> step(static_cast<std::size_t>(input.rank()), 1);
  start[static_cast<std::size_t>(axis)] = count > 0 ? begin : 0;
  Shape result = input;
  result[axis] = count;
  return slice(x, std::move(start), std::move(step), result);
}

ValueId Emitter::concat(std::vector<ValueId> values, int axis) {
  std::erase_if(values, [&](ValueId value) { return shape(value)[axis] == 0; });
  if (values.size() == 1) return values[0];
  ir::Attributes attributes;
  attributes.axis = axis;
  return apply(ir::Op::concat, std::move(values), attributes);
}

ValueId Emitter::reduce_sum(ValueId x, std::vector<std::int64_t> axes, bool keepdims) {
  if (axes.empty()) return x;
  ir::Attributes attributes;
  attributes.axes = std::move(axes);
  attributes.keepdims = keepdims;
  return apply(ir::Op::reduce_sum, {x}, attributes);
}

ValueId Emitter::scan(ir::Op op, ValueId x, std::int64_t axis, bool exclusive, bool reverse) {
  ir::Attributes attributes;
  attributes.axis = axis;
  attributes.exclusive = exclusive;
  attributes.reverse = reverse;
  return apply(op, {x}, attributes);
}

ValueId Emitter::matmul(ValueId a, ValueId b, bool transpose_a, bool transpose_b) {
  ir::Attributes attributes;
  attributes.transpose_a = transpose_a;
  attributes.transpose_b = transpose_b;
  return apply(ir::Op::matmul, {a, b}, attributes);
}

ValueId Emitter::gather(ValueId params, ValueId indices, std::int64_t axis) {
  ir::Attributes attributes;
  attributes.axis = axis;
  return apply(ir::Op::gather, {params, indices}, attributes);
}

ValueId Emitter::scatter_add(ValueId operand, ValueId indices, ValueId updates, std::int64_t axis) {
  ir::Attributes attributes;
  attributes.axis = axis;
  return apply(ir::Op::scatter_add, {operand, indices, updates}, attributes);
}

ValueId Emitter::sum_to_shape(ValueId x, Shape shape) {
  const Shape from = this->shape(x);
  if (from == shape) return x;
  const int extra = from.rank() - shape.rank();
  // The summed axes, numbered without x's axes of size 1 (none is summed): those go first, by a reshape that only
  // drops them, so that the reduction's kept axes are one run. A depthwise convolution's weights [channels, 1] under
  // [batch, height, width, channels, 1] summed over {0, 1, 2} kept (channels, 1), which no column kernel takes (it
  // keeps one axis innermost): nine reductions in the standard executor, where [.., channels] over {0, 1, 2} is one.
  std::vector<std::int64_t> axes, squeezed;
  for (int axis = 0; axis < from.rank(); ++axis) {
    if (from[axis] == 1) continue;
    if (axis < extra || shape[axis - extra] == 1) axes.push_back(static_cast<std::int64_t>(squeezed.size()));
    squeezed.push_back(from[axis]);
  }
  return reshape(reduce_sum(reshape(x, Shape(squeezed)), std::move(axes), false), shape);
}

ValueId Emitter::keep_reduced_axes(ValueId reduced, Shape operand, const std::vector<std::int64_t>& axes,
                                   bool keepdims) {
  if (keepdims) return reduced;
  return reshape(reduced, shape_with_reduced_axes_kept(operand, axes));
}

Shape shape_with_reduced_axes_kept(const Shape& shape, const std::vector<std::int64_t>& axes) {
  Shape kept = shape;
  for (std::int64_t axis : axes) kept[static_cast<int>(axis)] = 1;
  return kept;
}

std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& permutation) {
  std::vector<std::int64_t> inverse(permutation.size());
  for (std::size_t axis = 0; axis < permutation.size(); ++axis)
    inverse[static_cast<std::size_t>(permutation[axis])] = static_cast<std::int64_t>(axis);
  return inverse;
}

}  // namespace kiln::autodiff
