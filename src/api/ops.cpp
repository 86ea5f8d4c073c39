// The public ops: argument normalization and dtype promotion, then
// detail::apply. Shape inference and type checks live in ir/type_rules.cpp.

#include "api/dispatch.h"
#include "api/tensor_impl.h"
#include "ir/type_rules.h"

#include <kiln/error.h>
#include <kiln/ops.h>

#include <algorithm>
#include <limits>

namespace kiln {
namespace {

using detail::apply;
using detail::cast_to;
using detail::checked_rank;
using detail::normalize_axes;
using detail::normalize_axis;
using ir::Op;

// ---- elementwise ------------------------------------------------------------

// The dtype an elementwise op computes in, from its type rule (ir::operand_promotion): the operands' common dtype;
// float for ops defined on floats only (integers and bools compute in f32, as NumPy's true_divide and sin); bool
// for the logical ops.
DType operand_dtype(Op op, DType a, DType b) {
  switch (ir::operand_promotion(op)) {
    case ir::OperandPromotion::floating:
      return floating_result(promote_types(a, b));
    case ir::OperandPromotion::logical:
      return DType::boolean;
    case ir::OperandPromotion::common:
      break;
  }
  return promote_types(a, b);
}

Tensor unary(Op op, const Tensor& x, const Location& location) {
  if (ir::operand_promotion(op) == ir::OperandPromotion::common) return apply(op, {x}, {}, location);
  checked_rank(x, std::string(ir::name(op)).c_str(), location);
  return apply(op, {cast_to(x, operand_dtype(op, x.dtype(), x.dtype()), location)}, {}, location);
}

Tensor binary(Op op, const Tensor& a, const Tensor& b, const Location& location) {
  std::string name(ir::name(op));
  checked_rank(a, name.c_str(), location);
  checked_rank(b, name.c_str(), location);
  DType dtype = operand_dtype(op, a.dtype(), b.dtype());
  return apply(op, {cast_to(a, dtype, location), cast_to(b, dtype, location)}, {}, location);
}

Tensor binary(Op op, const Tensor& a, Scalar b, const Location& location) {
  checked_rank(a, std::string(ir::name(op)).c_str(), location);
  DType dtype = operand_dtype(op, a.dtype(), detail::scalar_dtype(a.dtype(), b));
  return apply(op, {cast_to(a, dtype, location), detail::scalar_constant(b, dtype, a.device(), location)}, {},
               location);
}

Tensor binary(Op op, Scalar a, const Tensor& b, const Location& location) {
  checked_rank(b, std::string(ir::name(op)).c_str(), location);
  DType dtype = operand_dtype(op, detail::scalar_dtype(b.dtype(), a), b.dtype());
  return apply(op, {detail::scalar_constant(a, dtype, b.device(), location), cast_to(b, dtype, location)}, {},
               location);
}

// ---- reductions ---------------------------------------------------------------

Tensor reduce(Op op, const Tensor& x, const Axes& axes, bool keepdims, const Location& location) {
  std::string name(ir::name(op));
  int rank = checked_rank(x, name.c_str(), location);
  ir::Attributes attributes;
  attributes.axes = normalize_axes(axes, rank, name.c_str(), location);
  attributes.keepdims = keepdims;
  DType dtype = x.dtype();
  if ((op == Op::reduce_sum || op == Op::reduce_prod) && dtype == DType::boolean) dtype = DType::i32;
  if (op == Op::reduce_mean) dtype = floating_result(dtype);
  return apply(op, {cast_to(x, dtype, location)}, attributes, location);
}

}  // namespace

// ---- elementwise ------------------------------------------------------------------
// The public function of every unary and binary elementwise op of the op table (ir/ops.def) that is a function of
// its elements (meaning scalar or math; where and cast take other arguments): neg(x), add(a, b), add(a, 2), ...
// declared in kiln/ops.h.
#define KILN_DEFINE_ARITY_1(name) \
  Tensor name(const Tensor& x, Location location) { return unary(Op::name, x, location); }
#define KILN_DEFINE_ARITY_2(name)                                                                               \
  Tensor name(const Tensor& a, const Tensor& b, Location location) { return binary(Op::name, a, b, location); } \
  Tensor name(const Tensor& a, Scalar b, Location location) { return binary(Op::name, a, b, location); }        \
  Tensor name(Scalar a, const Tensor& b, Location location) { return binary(Op::name, a, b, location); }
#define KILN_DEFINE_scalar(name, arity) KILN_DEFINE_ARITY_##arity(name)
#define KILN_DEFINE_math(name, arity) KILN_DEFINE_ARITY_##arity(name)
#define KILN_DEFINE_own(name, arity)
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) \
  KILN_DEFINE_##meaning(name, arity)
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_DEFINE_own
#undef KILN_DEFINE_math
#undef KILN_DEFINE_scalar
#undef KILN_DEFINE_ARITY_2
#undef KILN_DEFINE_ARITY_1

Tensor cast(const Tensor& x, DType dtype, Location location) { return cast_to(x, dtype, location); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Location location) {
  checked_rank(cond, "where", location);
  checked_rank(a, "where", location);
  checked_rank(b, "where", location);
  DType dtype = promote_types(a.dtype(), b.dtype());
  return apply(Op::where,
               {cast_to(cond, DType::boolean, location), cast_to(a, dtype, location), cast_to(b, dtype, location)},
               {}, location);
}

Tensor where(const Tensor& cond, const Tensor& a, Scalar b, Location location) {
  checked_rank(a, "where", location);
  DType dtype = promote_types(a.dtype(), detail::scalar_dtype(a.dtype(), b));
  return where(cond, cast_to(a, dtype, location), detail::scalar_constant(b, dtype, a.device(), location), location);
}

Tensor where(const Tensor& cond, Scalar a, const Tensor& b, Location location) {
  checked_rank(b, "where", location);
  DType dtype = promote_types(b.dtype(), detail::scalar_dtype(b.dtype(), a));
  return where(cond, detail::scalar_constant(a, dtype, b.device(), location), cast_to(b, dtype, location), location);
}

// ---- operators -----------------------------------------------------------------
#define KILN_DEFINE_OPERATOR(symbol, function)                                                                   \
  Tensor operator symbol(const Operand& a, const Tensor& b) { return function(a.tensor, b, a.location); }       \
  Tensor operator symbol(const Operand& a, Scalar b) { return function(a.tensor, b, a.location); }              \
  Tensor operator symbol(Scalar a, const Operand& b) { return function(a, b.tensor, b.location); }
KILN_DEFINE_OPERATOR(+, add)
KILN_DEFINE_OPERATOR(-, sub)
KILN_DEFINE_OPERATOR(*, mul)
KILN_DEFINE_OPERATOR(/, div)
KILN_DEFINE_OPERATOR(%, remainder)
KILN_DEFINE_OPERATOR(&, bitwise_and)
KILN_DEFINE_OPERATOR(|, bitwise_or)
KILN_DEFINE_OPERATOR(^, bitwise_xor)
KILN_DEFINE_OPERATOR(<<, left_shift)
KILN_DEFINE_OPERATOR(>>, right_shift)
KILN_DEFINE_OPERATOR(==, eq)
KILN_DEFINE_OPERATOR(!=, ne)
KILN_DEFINE_OPERATOR(<, lt)
KILN_DEFINE_OPERATOR(<=, le)
KILN_DEFINE_OPERATOR(>, gt)
KILN_DEFINE_OPERATOR(>=, ge)
KILN_DEFINE_OPERATOR(&&, logical_and)
KILN_DEFINE_OPERATOR(||, logical_or)
#undef KILN_DEFINE_OPERATOR
Tensor operator-(const Operand& x) { return neg(x.tensor, x.location); }
Tensor operator!(const Operand& x) { return logical_not(x.tensor, x.location); }
Tensor operator~(const Operand& x) { return bitwise_not(x.tensor, x.location); }

// ---- reductions ----------------------------------------------------------------
Tensor reduce_sum(const Tensor& x, Axes axes, bool keepdims, Location location) {
  return reduce(Op::reduce_sum, x, axes, keepdims, location);
}
Tensor reduce_mean(const Tensor& x, Axes axes, bool keepdims, Location location) {
  return reduce(Op::reduce_mean, x, axes, keepdims, location);
}
Tensor reduce_max(const Tensor& x, Axes axes, bool keepdims, Location location) {
  return reduce(Op::reduce_max, x, axes, keepdims, location);
}
Tensor reduce_min(const Tensor& x, Axes axes, bool keepdims, Location location) {
  return reduce(Op::reduce_min, x, axes, keepdims, location);
}
Tensor reduce_prod(const Tensor& x, Axes axes, bool keepdims, Location location) {
  return reduce(Op::reduce_prod, x, axes, keepdims, location);
}

namespace {
Tensor arg_reduction(Op op, const Tensor& x, std::int64_t axis, bool keepdims, const Location& location) {
  const std::string name(ir::name(op));
  int rank = checked_rank(x, name.c_str(), location);
  ir::Attributes attributes;
  attributes.axis = normalize_axis(axis, rank, name.c_str(), location);
  attributes.keepdims = keepdims;
  return apply(op, {x}, attributes, location);
}
}  // namespace

Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdims, Location location) {
  return arg_reduction(Op::argmax, x, axis, keepdims, location);
}

Tensor argmin(const Tensor& x, std::int64_t axis, bool keepdims, Location location) {
  return arg_reduction(Op::argmin, x, axis, keepdims, location);
}

// ---- sorting -------------------------------------------------------------------
namespace {
Tensor ordering(Op op, const Tensor& x, std::int64_t axis, bool descending, const Location& location) {
  const std::string name(ir::name(op));
  const int rank = checked_rank(x, name.c_str(), location);
  if (rank == 0) throw ShapeError(name, "needs an axis to order along; the operand is a scalar (rank 0)", location);
  ir::Attributes attributes;
  attributes.axis = normalize_axis(axis, rank, name.c_str(), location);
  attributes.descending = descending;
  return apply(op, {x}, attributes, location);
}
}  // namespace

Tensor sort(const Tensor& x, std::int64_t axis, bool descending, Location location) {
  return ordering(Op::sort, x, axis, descending, location);
}
Tensor argsort(const Tensor& x, std::int64_t axis, bool descending, Location location) {
  return ordering(Op::argsort, x, axis, descending, location);
}

// A primitive for the indices (a partial selection, not a whole sort) and take_along_axis for the values: the IR
// has one result per node, and the indices determine the values.
TopK top_k(const Tensor& x, std::int64_t k, Location location) {
  const int rank = checked_rank(x, "top_k", location);
  if (rank == 0) throw ShapeError("top_k", "needs an axis to pick from; the operand is a scalar (rank 0)", location);
  const std::int64_t size = x.shape()[rank - 1];
  if (k < 0 || (size != Shape::dynamic && k > size))
    throw ShapeError("top_k",
                     "k = " + std::to_string(k) + " is outside [0, " + std::to_string(size) +
                         "], the size of the last axis of " + x.shape().to_string(),
                     location);
  ir::Attributes attributes;
  attributes.k = k;
  Tensor indices = apply(Op::top_k, {x}, attributes, location);
  return {take_along_axis(x, indices, -1, location), indices};
}

// ---- scans ---------------------------------------------------------------------
namespace {
Tensor scan(Op op, const Tensor& x, std::int64_t axis, ScanOptions options, const Location& location) {
  const std::string name(ir::name(op));
  const int rank = checked_rank(x, name.c_str(), location);
  if (rank == 0) throw ShapeError(name, "needs an axis to run along; the operand is a scalar (rank 0)", location);
  ir::Attributes attributes;
  attributes.axis = normalize_axis(axis, rank, name.c_str(), location);
  attributes.exclusive = options.exclusive;
  attributes.reverse = options.reverse;
  const bool counts = (op == Op::cumsum || op == Op::cumprod) && x.dtype() == DType::boolean;
  return apply(op, {cast_to(x, counts ? DType::i32 : x.dtype(), location)}, attributes, location);
}
}  // namespace

Tensor cumsum(const Tensor& x, std::int64_t axis, ScanOptions options, Location location) {
  return scan(Op::cumsum, x, axis, options, location);
}
Tensor cumprod(const Tensor& x, std::int64_t axis, ScanOptions options, Location location) {
  return scan(Op::cumprod, x, axis, options, location);
}
Tensor cummax(const Tensor& x, std::int64_t axis, ScanOptions options, Location location) {
  return scan(Op::cummax, x, axis, options, location);
}
Tensor cummin(const Tensor& x, std::int64_t axis, ScanOptions options, Location location) {
  return scan(Op::cummin, x, axis, options, location);
}

// ---- matmul --------------------------------------------------------------------
Tensor matmul(const Tensor& a, const Tensor& b, MatmulOptions options, Location location) {
  int rank_a = checked_rank(a, "matmul", location);
  int rank_b = checked_rank(b, "matmul", location);
  if (rank_a == 0 || rank_b == 0)
    throw ShapeError("matmul",
                     "operands must have rank >= 1 (operands: " + std::string(to_string(a.dtype())) +
                         a.shape().to_string() + ", " + std::string(to_string(b.dtype())) + b.shape().to_string() +
                         ")",
                     location);
  // Vectors, as in NumPy: a becomes a row, b a column, and that axis is
  // dropped from the result.
  Tensor left = rank_a == 1 ? expand_dims(a, 0, location) : a;
  Tensor right = rank_b == 1 ? expand_dims(b, 1, location) : b;
  ir::Attributes attributes;
  attributes.transpose_a = rank_a > 1 && options.transpose_a;
  attributes.transpose_b = rank_b > 1 && options.transpose_b;
  DType dtype = promote_types(a.dtype(), b.dtype());
  Tensor result = apply(Op::matmul, {cast_to(left, dtype, location), cast_to(right, dtype, location)}, attributes,
                        location);
  if (rank_b == 1) result = squeeze(result, {-1}, location);
  if (rank_a == 1) result = squeeze(result, {-1 - (rank_b == 1 ? 0 : 1)}, location);
  return result;
}

// ---- shape ops -----------------------------------------------------------------
Tensor reshape(const Tensor& x, std::vector<std::int64_t> shape, Location location) {
  checked_rank(x, "reshape", location);
  std::int64_t known = 1;
  int inferred = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) throw ShapeError("reshape", "only one dimension can be -1", location);
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw ShapeError("reshape", "dimension " + std::to_string(shape[i]) + " is negative", location);
    } else {
      known *= shape[i];
    }
  }
  std::int64_t count = x.numel();
  if (inferred >= 0) {
    if (known == 0 || count % known != 0)
      throw ShapeError("reshape",
                       "cannot infer the -1 dimension: " + std::to_string(count) + " elements of " +
                           std::string(to_string(x.dtype())) + x.shape().to_string() + " do not divide by " +
                           std::to_string(known),
                       location);
    shape[static_cast<std::size_t>(inferred)] = count / known;
  }
  if (shape.size() > static_cast<std::size_t>(Shape::max_rank))
    throw ShapeError("reshape", "rank " + std::to_string(shape.size()) + " exceeds the maximum rank 8", location);
  Shape target(shape);
  if (target == x.shape()) return x;
  return apply(Op::reshape, {x}, {}, location, ir::Type{x.dtype(), target});
}

Tensor transpose(const Tensor& x, std::vector<std::int64_t> permutation, Location location) {
  int rank = checked_rank(x, "transpose", location);
  if (permutation.empty())
    for (int axis = rank - 1; axis >= 0; --axis) permutation.push_back(axis);
  if (static_cast<int>(permutation.size()) == rank)
    for (std::int64_t& axis : permutation) axis = normalize_axis(axis, rank, "transpose", location);
  ir::Attributes attributes;
  attributes.axes = std::move(permutation);
  return apply(Op::transpose, {x}, attributes, location);
}

Tensor broadcast_to(const Tensor& x, const Shape& shape, Location location) {
  checked_rank(x, "broadcast_to", location);
  if (x.shape() == shape) return x;
  return apply(Op::broadcast_to, {x}, {}, location, ir::Type{x.dtype(), shape});
}

Tensor slice(const Tensor& x, SliceOptions options, Location location) {
  int rank = checked_rank(x, "slice", location);
  if (options.start.size() > static_cast<std::size_t>(rank) || options.stop.size() > static_cast<std::size_t>(rank) ||
      options.step.size() > static_cast<std::size_t>(rank))
    throw ShapeError("slice", "more start/stop/step entries than the " + std::to_string(rank) + " axes of " +
                                  x.shape().to_string(), location);
  if (!x.shape().is_static()) throw ShapeError("slice", "cannot slice a value whose shape depends on data", location);
  ir::Attributes attributes;
  std::vector<std::int64_t> dims;
  for (int axis = 0; axis < rank; ++axis) {
    auto index = static_cast<std::size_t>(axis);
    std::int64_t size = x.shape()[axis];
    std::int64_t step = index < options.step.size() ? options.step[index] : 1;
    if (step == 0) throw ShapeError("slice", "step is 0 on axis " + std::to_string(axis), location);
    // NumPy's rules: negative indices count from the end, then clamp.
    auto normalize = [&](std::int64_t value, std::int64_t low, std::int64_t high) {
      if (value < 0) value = value < -size ? low : value + size;
      return std::clamp(value, low, high);
    };
    std::int64_t start, stop, count;
    if (step > 0) {
      start = index < options.start.size() ? normalize(options.start[index], 0, size) : 0;
      stop = index < options.stop.size() ? normalize(options.stop[index], 0, size) : size;
      count = stop > start ? (stop - start + step - 1) / step : 0;
    } else {
      start = index < options.start.size() ? normalize(options.start[index], -1, size - 1) : size - 1;
      stop = index < options.stop.size() ? normalize(options.stop[index], -1, size - 1) : -1;
      count = start > stop ? (start - stop + (-step) - 1) / (-step) : 0;
    }
    attributes.start.push_back(count > 0 ? start : 0);
    attributes.step.push_back(step);
    dims.push_back(count);
  }
  return apply(Op::slice, {x}, attributes, location, ir::Type{x.dtype(), Shape(dims)});
}

Tensor concat(const std::vector<Tensor>& tensors, std::int64_t axis, Location location) {
  if (tensors.empty()) throw ValueError("concat", "needs at least one tensor", location);
  int rank = checked_rank(tensors[0], "concat", location);
  DType dtype = tensors[0].dtype();
  for (const Tensor& tensor : tensors) {
    checked_rank(tensor, "concat", location);
    dtype = promote_types(dtype, tensor.dtype());
  }
  if (rank == 0) throw ShapeError("concat", "cannot concatenate rank-0 tensors", location);
  ir::Attributes attributes;
  attributes.axis = normalize_axis(axis, rank, "concat", location);
  std::vector<Tensor> operands;
  for (const Tensor& tensor : tensors) operands.push_back(cast_to(tensor, dtype, location));
  if (operands.size() == 1) return operands[0];
  return apply(Op::concat, operands, attributes, location);
}

Tensor gather(const Tensor& params, const Tensor& indices, std::int64_t axis, Location location) {
  int rank = checked_rank(params, "gather", location);
  if (rank == 0) throw ShapeError("gather", "cannot gather from a rank-0 tensor", location);
  ir::Attributes attributes;
  attributes.axis = normalize_axis(axis, rank, "gather", location);
  return apply(Op::gather, {params, indices}, attributes, location);
}

Tensor scatter_add(const Tensor& operand, const Tensor& indices, const Tensor& updates, std::int64_t axis,
                   Location location) {
  const int rank = checked_rank(operand, "scatter_add", location);
  checked_rank(indices, "scatter_add", location);
  checked_rank(updates, "scatter_add", location);
  if (rank == 0) throw ShapeError("scatter_add", "cannot add rows into a rank-0 tensor", location);
  ir::Attributes attributes;
  attributes.axis = normalize_axis(axis, rank, "scatter_add", location);
  return apply(Op::scatter_add, {operand, indices, cast_to(updates, operand.dtype(), location)}, attributes, location);
}

Tensor take_along_axis(const Tensor& values, const Tensor& indices, std::int64_t axis, Location location) {
  const int rank = checked_rank(values, "take_along_axis", location);
  checked_rank(indices, "take_along_axis", location);
  if (rank == 0) throw ShapeError("take_along_axis", "cannot pick from a rank-0 tensor", location);
  if (indices.shape().rank() != rank)
    throw ShapeError("take_along_axis",
                     "indices " + indices.shape().to_string() + " must have the rank of values " +
                         values.shape().to_string(),
                     location);
  if (indices.dtype() != DType::i32 && indices.dtype() != DType::i64)
    throw DTypeError("take_along_axis",
                     "indices must be i32 or i64, got " + std::string(to_string(indices.dtype())), location);
  ir::Attributes attributes;
  attributes.axis = normalize_axis(axis, rank, "take_along_axis", location);
  // Off the axis the two broadcast against each other; on it each keeps its own size.
  std::vector<std::int64_t> value_dims(values.shape().dims().begin(), values.shape().dims().end());
  std::vector<std::int64_t> index_dims(indices.shape().dims().begin(), indices.shape().dims().end());
  for (int d = 0; d < rank; ++d) {
    if (d == attributes.axis) continue;
    const auto at = static_cast<std::size_t>(d);
    if (value_dims[at] != index_dims[at] && value_dims[at] != 1 && index_dims[at] != 1)
      throw ShapeError("take_along_axis",
                       "values " + values.shape().to_string() + " and indices " + indices.shape().to_string() +
                           " cannot be broadcast off axis " + std::to_string(attributes.axis),
                       location);
    value_dims[at] = index_dims[at] = std::max(value_dims[at], index_dims[at]);
  }
  const Tensor spread_values = Shape(value_dims) == values.shape() ? values : broadcast_to(values, Shape(value_dims), location);
  const Tensor spread_indices =
      Shape(index_dims) == indices.shape() ? indices : broadcast_to(indices, Shape(index_dims), location);
  return apply(Op::take_along_axis, {spread_values, spread_indices}, attributes, location);
}

Tensor expand_dims(const Tensor& x, std::int64_t axis, Location location) {
  int rank = checked_rank(x, "expand_dims", location);
  ir::Attributes attributes;
  attributes.axis = normalize_axis(axis, rank + 1, "expand_dims", location);
  return apply(Op::expand_dims, {x}, attributes, location);
}

Tensor squeeze(const Tensor& x, Axes axes, Location location) {
  int rank = checked_rank(x, "squeeze", location);
  ir::Attributes attributes;
  if (axes.all()) {
    for (int axis = 0; axis < rank; ++axis)
      if (x.shape()[axis] == 1) attributes.axes.push_back(axis);
  } else {
    attributes.axes = normalize_axes(axes, rank, "squeeze", location);
  }
  if (attributes.axes.empty()) return x;
  return apply(Op::squeeze, {x}, attributes, location);
}

}  // namespace kiln
