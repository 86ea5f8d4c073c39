// Derivatives of reductions, scans and orderings, as JAX defines them: reduce_max and reduce_min share the
// tangent equally among the elements that tie for the extreme; reduce_prod multiplies each tangent by the product
// of the other elements (exclusive products from both ends: exact where elements are 0, without dividing); the
// scans' tangents come from their own linear ops (cumsum), a log-depth product scan (cumprod: Hillis and Steele's,
// as JAX differentiates its associative_scan) or the index each running extreme came from (cummax, cummin).

#include "autodiff/rules.h"

#include <algorithm>

namespace kiln::autodiff {
namespace {

using ir::Op;

// ---- reductions ------------------------------------------------------------------------------------------------

Tangent jvp_linear_reduction(JvpContext& context) { return context.same_op(context.tangent(0)); }

// The tangents of the elements equal to the extreme, averaged: d max = sum(dx [x = max]) / count(x = max). Over
// reduced axes of no elements the extreme is the identity (-inf for max), which nothing moves: tangent zero, where
// the average would be 0 / 0 (NaN in JAX; kiln-fuzz --gradients seed 2 graph 1436: erfc of an empty max).
Tangent jvp_extreme_reduction(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ir::Attributes& attributes = context.attributes();
  const ValueId x = context.operand(0);
  for (std::int64_t axis : attributes.axes)
    if (emit.shape(x)[static_cast<int>(axis)] == 0) return Tangent{};
  const ValueId extreme = emit.keep_reduced_axes(context.result(), emit.shape(x), attributes.axes, attributes.keepdims);
  const ValueId chosen = emit.indicator(Op::eq, x, extreme, context.dtype());
  const ValueId count = emit.reduce_sum(chosen, attributes.axes, attributes.keepdims);
  const Tangent picked = context.scale(context.tangent(0), chosen);
  return context.divide(context.linear(Op::reduce_sum, {LinearOperand::of(picked)}, attributes), count);
}

// The product of every element but one, for each: the exclusive products from the front and from the back of the
// reduced axes (laid out as one last axis), multiplied.
ValueId products_of_the_others(Emitter& emit, ValueId x, const std::vector<std::int64_t>& axes) {
  const Shape& shape = emit.shape(x);
  std::vector<std::int64_t> permutation, kept_dims;
  for (int axis = 0; axis < shape.rank(); ++axis)
    if (std::find(axes.begin(), axes.end(), axis) == axes.end()) {
      permutation.push_back(axis);
      kept_dims.push_back(shape[axis]);
    }
  std::int64_t count = 1;
  for (std::int64_t axis : axes) {
    permutation.push_back(axis);
    count *= shape[static_cast<int>(axis)];
  }
  const ValueId moved = emit.transpose(x, permutation);
  std::vector<std::int64_t> line_dims = kept_dims;
  line_dims.push_back(count);
  const ValueId lines = emit.reshape(moved, Shape(line_dims));
  const auto last = static_cast<std::int64_t>(line_dims.size()) - 1;
  const ValueId before = emit.scan(Op::cumprod, lines, last, true, false);
  const ValueId after = emit.scan(Op::cumprod, lines, last, true, true);
  const Shape moved_shape = emit.shape(moved);  // a copy: the multiply may move the graph's node list
  const ValueId others = emit.reshape(emit.multiply(before, after), moved_shape);
  return emit.transpose(others, inverse_permutation(permutation));
}

Tangent jvp_reduce_prod(JvpContext& context) {
  const ValueId others = products_of_the_others(context.emitter(), context.operand(0), context.attributes().axes);
  const Tangent scaled = context.scale(context.tangent(0), others);
  return context.linear(Op::reduce_sum, {LinearOperand::of(scaled)}, context.attributes());
}

// reduce_sum's adjoint broadcasts the cotangent back; reduce_mean's also divides by the count.
void transpose_reduction(TransposeContext& context) {
  Emitter& emit = context.emitter();
  const ir::Attributes& attributes = context.attributes();
  const Shape& operand = context.operand_type(0).shape;
  ValueId spread = emit.broadcast_to(
      emit.keep_reduced_axes(context.cotangent(), operand, attributes.axes, attributes.keepdims), operand);
  if (context.node().op == Op::reduce_mean) {
    double count = 1;
    for (std::int64_t axis : attributes.axes) count *= static_cast<double>(operand[static_cast<int>(axis)]);
    spread = emit.scale(spread, 1 / count);
  }
  context.contribute(0, spread);
}

// ---- scans -----------------------------------------------------------------------------------------------------

Tangent jvp_cumsum(JvpContext& context) { return context.same_op(context.tangent(0)); }

// A running sum's adjoint is the running sum from the other end.
void transpose_cumsum(TransposeContext& context) {
  const ir::Attributes& attributes = context.attributes();
  context.contribute(0, context.emitter().scan(Op::cumsum, context.cotangent(), attributes.axis, attributes.exclusive,
                                               !attributes.reverse));
}

// `x` moved `distance` places along `axis` in the scan's direction, `fill` (a scalar) coming in: element i takes
// element i - distance (i + distance for a reverse scan).
ValueId shifted(Emitter& emit, ValueId x, int axis, std::int64_t distance, bool reverse, ValueId fill) {
  const std::int64_t size = emit.shape(x)[axis];
  Shape fill_shape = emit.shape(x);
  fill_shape[axis] = distance;
  const ValueId filler = emit.broadcast_to(fill, fill_shape);
  if (reverse) return emit.concat({emit.slice_axis(x, axis, distance, size - distance), filler}, axis);
  return emit.concat({filler, emit.slice_axis(x, axis, 0, size - distance)}, axis);
}

// The same shift of a tangent, as linear ops (slice, concat with zeros).
Tangent shifted(JvpContext& context, Tangent tangent, int axis, std::int64_t distance, bool reverse) {
  Emitter& emit = context.emitter();
  const Shape& shape = context.node().type.shape;
  const std::int64_t size = shape[axis];
  Shape fill_shape = shape;
  fill_shape[axis] = distance;
  const ValueId zeros = emit.constant(0, context.dtype(), fill_shape);
  std::vector<std::int64_t> start(static_cast<std::size_t>(shape.rank()), 0), step(start.size(), 1);
  start[static_cast<std::size_t>(axis)] = reverse ? distance : 0;
  Shape kept = shape;
  kept[axis] = size - distance;
  ir::Attributes slice;
  slice.start = start;
  slice.step = step;
  const Tangent part = context.linear(Op::slice, {LinearOperand::of(tangent)}, slice, ir::Type{context.dtype(), kept});
  ir::Attributes concat;
  concat.axis = axis;
  if (reverse) return context.linear(Op::concat, {LinearOperand::of(part), LinearOperand::of(zeros)}, concat);
  return context.linear(Op::concat, {LinearOperand::of(zeros), LinearOperand::of(part)}, concat);
}

// Hillis and Steele's scan: after the step of distance d each element holds the product of the 2d elements up to
// it, so log2(n) steps of y <- y * shift(y, d) give the running product, and differentiating the steps gives its
// tangent, exact where elements are 0. An exclusive scan is the inclusive one shifted by one.
Tangent jvp_cumprod(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ir::Attributes& attributes = context.attributes();
  const auto axis = static_cast<int>(attributes.axis);
  const std::int64_t size = context.node().type.shape[axis];
  ValueId product = context.operand(0);
  Tangent tangent = context.tangent(0);
  for (std::int64_t distance = 1; distance < size; distance *= 2) {
    const ValueId earlier = shifted(emit, product, axis, distance, attributes.reverse, context.constant(1));
    const Tangent earlier_tangent = shifted(context, tangent, axis, distance, attributes.reverse);
    tangent = context.add(context.scale(tangent, earlier), context.scale(earlier_tangent, product));
    product = emit.multiply(product, earlier);
  }
  if (attributes.exclusive && size > 0) tangent = shifted(context, tangent, axis, 1, attributes.reverse);
  return tangent;
}

// Each running extreme is the element it came from: the last position up to i (the first from i on, for a
// reverse scan) where the element equals the inclusive scan's value there. Its tangent is picked there
// (take_along_axis, whose adjoint adds into that position); ties go to that one element.
Tangent jvp_running_extreme(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ir::Attributes& attributes = context.attributes();
  const auto axis = static_cast<int>(attributes.axis);
  const ValueId x = context.operand(0);
  const Shape shape = emit.shape(x);  // a copy: the exclusive scan below may move the graph's node list
  const std::int64_t size = shape[axis];
  const ValueId inclusive =
      attributes.exclusive ? emit.scan(context.node().op, x, axis, false, attributes.reverse) : context.result();
  const ValueId positions = emit.iota(shape, axis);
  const ValueId reached = emit.binary(Op::eq, x, inclusive);
  ValueId source;
  if (!attributes.reverse) {
    const ValueId marks = emit.select(reached, positions, emit.constant(-1, DType::i64));
    source = emit.binary(Op::maximum, emit.scan(Op::cummax, marks, axis, false, false), emit.constant(0, DType::i64));
  } else {
    const ValueId marks = emit.select(reached, positions, emit.constant(static_cast<double>(size), DType::i64));
    source = emit.binary(Op::minimum, emit.scan(Op::cummin, marks, axis, false, true),
                         emit.constant(static_cast<double>(size - 1), DType::i64));
  }
  ir::Attributes along;
  along.axis = axis;
  Tangent tangent =
      context.linear(Op::take_along_axis, {LinearOperand::of(context.tangent(0)), LinearOperand::of(source)}, along);
  if (attributes.exclusive && size > 0) tangent = shifted(context, tangent, axis, 1, attributes.reverse);
  return tangent;
}

// ---- orderings -------------------------------------------------------------------------------------------------

// The sorted values are the operand taken at argsort's positions (stable, so the same permutation).
Tangent jvp_sort(JvpContext& context) {
  Emitter& emit = context.emitter();
  const ValueId order = emit.apply(Op::argsort, {context.operand(0)}, context.attributes());
  ir::Attributes along;
  along.axis = context.attributes().axis;
  return context.linear(Op::take_along_axis, {LinearOperand::of(context.tangent(0)), LinearOperand::of(order)}, along);
}

constexpr Derivative rule = Derivative::rule;
constexpr Derivative none = Derivative::none;

const OpRule rules[] = {
    {Op::reduce_sum, rule, jvp_linear_reduction, transpose_reduction},
    {Op::reduce_mean, rule, jvp_linear_reduction, transpose_reduction},
    {Op::reduce_max, rule, jvp_extreme_reduction},
    {Op::reduce_min, rule, jvp_extreme_reduction},
    {Op::reduce_prod, rule, jvp_reduce_prod},
    {Op::argmax, none},
    {Op::argmin, none},
    {Op::cumsum, rule, jvp_cumsum, transpose_cumsum},
    {Op::cumprod, rule, jvp_cumprod},
    {Op::cummax, rule, jvp_running_extreme},
    {Op::cummin, rule, jvp_running_extreme},
    {Op::sort, rule, jvp_sort},
    {Op::argsort, none},
    {Op::top_k, none},
};

}  // namespace

std::span<const OpRule> reduction_rules() { return rules; }

}  // namespace kiln::autodiff
