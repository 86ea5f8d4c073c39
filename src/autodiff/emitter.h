#pragma once
// Appends nodes to a graph being differentiated, each typed by the op table's type rule (ir::infer_type) and
// located at the line of the forward op whose derivative it computes. Every node added may move the graph's node
// list, which type() and shape() return references into: copy them before adding nodes, also where another
// argument of the same call adds one (emit.reshape(emit.multiply(a, b), emit.shape(c)) may read c's shape after
// the multiply moved the list). The helpers take shapes and types by value, so that none reads a caller's reference
// after adding a node of its own (sum_to_shape reshapes to `shape` after adding the reduction). The derivative rules write their
// computations through it; the helpers keep the graph free of no-op nodes (a broadcast or reshape to the shape a
// value has already), so the rules can apply them unconditionally.

#include "ir/graph.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln::autodiff {

using ir::ValueId;

class Emitter {
 public:
  explicit Emitter(ir::Graph& graph) : graph_(graph) {}

  ir::Graph& graph() { return graph_; }
  const ir::Type& type(ValueId value) const { return graph_.type(value); }
  const Shape& shape(ValueId value) const { return graph_.type(value).shape; }
  DType dtype(ValueId value) const { return graph_.type(value).dtype; }
  // Where the next nodes come from ("file:line").
  void set_location(std::string location) { location_ = std::move(location); }
  const std::string& location() const { return location_; }

  // The node `op` of `operands`; `declared` is the result type of ops that take one (ir::has_declared_type).
  ValueId apply(ir::Op op, std::vector<ValueId> operands, const ir::Attributes& attributes = {},
                ir::Type declared = {});

  // A constant of `shape` (a scalar by default, which elementwise ops broadcast).
  ValueId constant(double value, DType dtype, Shape shape = {});
  ValueId zeros(ir::Type type) { return constant(0, type.dtype, std::move(type.shape)); }
  // i64 positions along `axis` of `shape`.
  ValueId iota(Shape shape, std::int64_t axis, DType dtype = DType::i64);

  ValueId unary(ir::Op op, ValueId x) { return apply(op, {x}); }
  ValueId binary(ir::Op op, ValueId a, ValueId b) { return apply(op, {a, b}); }
  ValueId add(ValueId a, ValueId b) { return binary(ir::Op::add, a, b); }
  ValueId subtract(ValueId a, ValueId b) { return binary(ir::Op::sub, a, b); }
  ValueId multiply(ValueId a, ValueId b) { return binary(ir::Op::mul, a, b); }
  ValueId divide(ValueId a, ValueId b) { return binary(ir::Op::div, a, b); }
  ValueId negate(ValueId x) { return unary(ir::Op::neg, x); }
  // a `op` b as 0 or 1 in `dtype` (a comparison made a factor).
  ValueId indicator(ir::Op comparison, ValueId a, ValueId b, DType dtype);
  // `value` times the scalar `factor`.
  ValueId scale(ValueId value, double factor) { return multiply(value, constant(factor, dtype(value))); }
  ValueId cast(ValueId x, DType dtype);
  ValueId select(ValueId condition, ValueId when_true, ValueId when_false) {
    return apply(ir::Op::where, {condition, when_true, when_false});
  }

  ValueId reshape(ValueId x, Shape shape);
  ValueId broadcast_to(ValueId x, Shape shape);
  ValueId transpose(ValueId x, std::vector<std::int64_t> permutation);
  ValueId slice(ValueId x, std::vector<std::int64_t> start, std::vector<std::int64_t> step, Shape shape);
  // The elements [begin, begin + count) of `axis`.
  ValueId slice_axis(ValueId x, int axis, std::int64_t begin, std::int64_t count);
  ValueId concat(std::vector<ValueId> values, int axis);
  ValueId reduce_sum(ValueId x, std::vector<std::int64_t> axes, bool keepdims);
  // A scan of `op` (cumsum, cumprod, cummax, cummin) along `axis`.
  ValueId scan(ir::Op op, ValueId x, std::int64_t axis, bool exclusive, bool reverse);
  ValueId matmul(ValueId a, ValueId b, bool transpose_a, bool transpose_b);
  ValueId gather(ValueId params, ValueId indices, std::int64_t axis);
  ValueId scatter_add(ValueId operand, ValueId indices, ValueId updates, std::int64_t axis);

  // `x` summed down to `shape`, which broadcasts to x's shape (NumPy's rules): the adjoint of broadcasting.
  ValueId sum_to_shape(ValueId x, Shape shape);
  // A reduction's result as the reduced operand's rank (the reduced axes kept as 1), from its `axes` and `keepdims`.
  ValueId keep_reduced_axes(ValueId reduced, Shape operand, const std::vector<std::int64_t>& axes,
                            bool keepdims);

 private:
  ir::Graph& graph_;
  std::string location_;
};

// `shape` with the `axes` (sorted) of a reduction kept as 1.
Shape shape_with_reduced_axes_kept(const Shape& shape, const std::vector<std::int64_t>& axes);
// The permutation that undoes `permutation`.
std::vector<std::int64_t> inverse_permutation(const std::vector<std::int64_t>& permutation);

}  // namespace kiln::autodiff
