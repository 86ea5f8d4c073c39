#include "ir/type_rules.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::ir {
namespace {

// What a rule needs, and how it reports a problem.
struct RuleContext {
  Op op;
  const Attributes& attributes;
  std::span<const Type> operands;
  const Type& declared;
  const std::string& location;

  [[noreturn]] void shape_error(const std::string& detail) const {
    throw ShapeError(std::string(name(op)), detail + " (operands: " + describe_types(operands) + ")", location);
  }
  [[noreturn]] void dtype_error(const std::string& detail) const {
    throw DTypeError(std::string(name(op)), detail + " (operands: " + describe_types(operands) + ")", location);
  }
  const Type& operand(std::size_t index) const { return operands[index]; }
  void require_not_bool(std::size_t index) const {
    if (operand(index).dtype == DType::boolean) dtype_error("does not accept bool operands");
  }
  void require_floating(std::size_t index) const {
    if (!is_floating(operand(index).dtype))
      dtype_error("needs a float operand, got " + std::string(to_string(operand(index).dtype)));
  }
  void require_bool(std::size_t index) const {
    if (operand(index).dtype != DType::boolean)
      dtype_error("needs a bool operand, got " + std::string(to_string(operand(index).dtype)));
  }
  void require_integer_or_bool(std::size_t index) const {
    if (is_floating(operand(index).dtype))
      dtype_error("needs integer or bool operands, got " + std::string(to_string(operand(index).dtype)));
  }
  void require_same_dtypes() const {
    for (const Type& type : operands)
      if (type.dtype != operands.back().dtype) dtype_error("operands must have one dtype");
  }
  Shape broadcast_all(std::size_t first) const {
    Shape result = operand(first).shape;
    for (std::size_t i = first + 1; i < operands.size(); ++i)
      if (!broadcast_shapes(result, operand(i).shape, &result)) shape_error("shapes cannot be broadcast together");
    return result;
  }
  void check_axis(std::int64_t axis, int rank) const {
    if (axis < 0 || axis >= rank)
      shape_error("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  void check_sorted_axes(const std::vector<std::int64_t>& axes, int rank) const {
    for (std::size_t i = 0; i < axes.size(); ++i) {
      check_axis(axes[i], rank);
      if (i > 0 && axes[i] <= axes[i - 1]) shape_error("axes must be sorted and unique");
    }
  }
};

using Rule = Type (*)(const RuleContext&);

Type rule_given(const RuleContext& context) { return context.declared; }

Type rule_iota(const RuleContext& context) {
  const Type& result = context.declared;
  if (result.dtype == DType::boolean) context.dtype_error("iota cannot produce bool");
  context.check_axis(context.attributes.axis, result.shape.rank());
  return result;
}

Type rule_unary_signed(const RuleContext& context) {
  context.require_not_bool(0);
  return context.operand(0);
}
Type rule_unary_numeric(const RuleContext& context) {
  context.require_not_bool(0);
  return context.operand(0);
}
Type rule_unary_float(const RuleContext& context) {
  context.require_floating(0);
  return context.operand(0);
}
Type rule_unary_bitwise(const RuleContext& context) {
  context.require_integer_or_bool(0);
  return context.operand(0);
}
Type rule_unary_logical(const RuleContext& context) {
  context.require_bool(0);
  return context.operand(0);
}
Type rule_cast(const RuleContext& context) {
  if (!(context.declared.shape == context.operand(0).shape)) context.shape_error("cast cannot change the shape");
  return context.declared;
}

Type binary(const RuleContext& context, DType result_dtype) {
  context.require_same_dtypes();
  return {result_dtype, context.broadcast_all(0)};
}
Type rule_binary_arithmetic(const RuleContext& context) {
  context.require_not_bool(0);
  return binary(context, context.operand(0).dtype);
}
Type rule_binary_float(const RuleContext& context) {
  context.require_floating(0);
  return binary(context, context.operand(0).dtype);
}
Type rule_binary_bitwise(const RuleContext& context) {
  context.require_integer_or_bool(0);
  return binary(context, context.operand(0).dtype);
}
Type rule_binary_shift(const RuleContext& context) {
  const DType dtype = context.operand(0).dtype;
  if (is_floating(dtype) || dtype == DType::boolean)
    context.dtype_error("needs integer operands, got " + std::string(to_string(dtype)));
  return binary(context, dtype);
}
Type rule_random_bits(const RuleContext& context) {
  for (int operand = 0; operand < 2; ++operand)
    if (context.operand(operand).dtype != DType::i64)
      context.dtype_error("takes an i64 key and i64 counters, got " +
                          std::string(to_string(context.operand(operand).dtype)));
  return binary(context, DType::i64);
}
Type rule_binary_any(const RuleContext& context) { return binary(context, context.operand(0).dtype); }
Type rule_compare(const RuleContext& context) { return binary(context, DType::boolean); }
Type rule_binary_logical(const RuleContext& context) {
  context.require_bool(0);
  return binary(context, DType::boolean);
}

Type rule_select(const RuleContext& context) {
  context.require_bool(0);
  if (context.operand(1).dtype != context.operand(2).dtype) context.dtype_error("both branches must have one dtype");
  return {context.operand(1).dtype, context.broadcast_all(0)};
}

Shape reduced_shape(const RuleContext& context, const Shape& input, const std::vector<std::int64_t>& axes) {
  std::vector<std::int64_t> dims;
  for (int axis = 0; axis < input.rank(); ++axis) {
    bool reduced = std::find(axes.begin(), axes.end(), axis) != axes.end();
    if (!reduced) dims.push_back(input[axis]);
    else if (context.attributes.keepdims) dims.push_back(1);
  }
  return Shape(dims);
}

Type rule_reduce(const RuleContext& context) {
  const Type& input = context.operand(0);
  context.check_sorted_axes(context.attributes.axes, input.shape.rank());
  if (context.op == Op::reduce_sum || context.op == Op::reduce_prod) context.require_not_bool(0);
  return {input.dtype, reduced_shape(context, input.shape, context.attributes.axes)};
}
Type rule_reduce_float(const RuleContext& context) {
  context.require_floating(0);
  return rule_reduce(context);
}
Type rule_argmax(const RuleContext& context) {
  const Type& input = context.operand(0);
  context.check_axis(context.attributes.axis, input.shape.rank());
  if (input.shape[static_cast<int>(context.attributes.axis)] == 0) context.shape_error(std::string(name(context.op)) + " of an empty axis");
  return {DType::i64, reduced_shape(context, input.shape, {context.attributes.axis})};
}

// Scans keep the operand's dtype and shape; sums and products of bools are not defined (the api layer casts).
Type rule_scan(const RuleContext& context) {
  const Type& input = context.operand(0);
  context.check_axis(context.attributes.axis, input.shape.rank());
  if (context.op == Op::cumsum || context.op == Op::cumprod) context.require_not_bool(0);
  return input;
}

// sort keeps the operand's type, argsort gives i64 indices of its shape; like TensorFlow's sort, both need an axis
// (rank >= 1).
Type rule_sort(const RuleContext& context) {
  const Type& input = context.operand(0);
  if (input.shape.rank() == 0) context.shape_error("needs an axis to order along; the operand is a scalar (rank 0)");
  context.check_axis(context.attributes.axis, input.shape.rank());
  return {context.op == Op::argsort ? DType::i64 : input.dtype, input.shape};
}

// top_k: i64 indices of the operand's shape with the last axis k long, k in [0, the last axis's size]
// (tf.math.top_k).
Type rule_top_k(const RuleContext& context) {
  const Type& input = context.operand(0);
  const int rank = input.shape.rank();
  if (rank == 0) context.shape_error("needs an axis to pick from; the operand is a scalar (rank 0)");
  const std::int64_t k = context.attributes.k, size = input.shape[rank - 1];
  if (k < 0 || (size != Shape::dynamic && k > size))
    context.shape_error("k = " + std::to_string(k) + " is outside [0, " + std::to_string(size) +
                        "], the size of the last axis");
  std::vector<std::int64_t> dims(input.shape.dims().begin(), input.shape.dims().end());
  dims.back() = k;
  return {DType::i64, Shape(dims)};
}

Type rule_matmul(const RuleContext& context) {
  const Type& a = context.operand(0);
  const Type& b = context.operand(1);
  context.require_same_dtypes();
  context.require_not_bool(0);
  if (a.shape.rank() < 2 || b.shape.rank() < 2) context.shape_error("operands must have rank >= 2");
  int rank_a = a.shape.rank(), rank_b = b.shape.rank();
  std::int64_t m = context.attributes.transpose_a ? a.shape[rank_a - 1] : a.shape[rank_a - 2];
  std::int64_t k_a = context.attributes.transpose_a ? a.shape[rank_a - 2] : a.shape[rank_a - 1];
  std::int64_t k_b = context.attributes.transpose_b ? b.shape[rank_b - 1] : b.shape[rank_b - 2];
  std::int64_t n = context.attributes.transpose_b ? b.shape[rank_b - 2] : b.shape[rank_b - 1];
  if (k_a != k_b && k_a != Shape::dynamic && k_b != Shape::dynamic)
    context.shape_error("contracting dimensions differ (" + std::to_string(k_a) + " vs " + std::to_string(k_b) + ")");
  Shape batch_a(a.shape.dims().first(static_cast<std::size_t>(rank_a - 2)));
  Shape batch_b(b.shape.dims().first(static_cast<std::size_t>(rank_b - 2)));
  Shape batch;
  if (!broadcast_shapes(batch_a, batch_b, &batch)) context.shape_error("batch dimensions cannot be broadcast");
  std::vector<std::int64_t> dims(batch.dims().begin(), batch.dims().end());
  dims.push_back(m);
  dims.push_back(n);
  return {a.dtype, Shape(dims)};
}

Type rule_reshape(const RuleContext& context) {
  const Type& input = context.operand(0);
  if (!input.shape.is_static()) context.shape_error("cannot reshape a value whose shape depends on data");
  if (input.shape.numel() != context.declared.shape.numel())
    context.shape_error("cannot reshape " + std::to_string(input.shape.numel()) + " elements into " +
                        context.declared.shape.to_string());
  if (input.dtype != context.declared.dtype) context.dtype_error("reshape cannot change the dtype");
  return context.declared;
}

Type rule_transpose(const RuleContext& context) {
  const Type& input = context.operand(0);
  const auto& permutation = context.attributes.axes;
  int rank = input.shape.rank();
  if (static_cast<int>(permutation.size()) != rank)
    context.shape_error("permutation has " + std::to_string(permutation.size()) + " entries for rank " +
                        std::to_string(rank));
  std::vector<bool> seen(static_cast<std::size_t>(rank), false);
  std::vector<std::int64_t> dims;
  for (std::int64_t axis : permutation) {
    context.check_axis(axis, rank);
    if (seen[static_cast<std::size_t>(axis)]) context.shape_error("permutation repeats axis " + std::to_string(axis));
    seen[static_cast<std::size_t>(axis)] = true;
    dims.push_back(input.shape[static_cast<int>(axis)]);
  }
  return {input.dtype, Shape(dims)};
}

Type rule_broadcast_to(const RuleContext& context) {
  const Type& input = context.operand(0);
  Shape result;
  if (input.dtype != context.declared.dtype) context.dtype_error("broadcast_to cannot change the dtype");
  if (input.shape.rank() > context.declared.shape.rank() ||
      !broadcast_shapes(input.shape, context.declared.shape, &result) || !(result == context.declared.shape))
    context.shape_error("cannot broadcast to " + context.declared.shape.to_string());
  return context.declared;
}

Type rule_slice(const RuleContext& context) {
  const Type& input = context.operand(0);
  const Shape& result = context.declared.shape;
  const auto& start = context.attributes.start;
  const auto& step = context.attributes.step;
  int rank = input.shape.rank();
  if (static_cast<int>(start.size()) != rank || static_cast<int>(step.size()) != rank || result.rank() != rank)
    context.shape_error("slice needs a start and a step for each of the " + std::to_string(rank) + " axes");
  if (input.dtype != context.declared.dtype) context.dtype_error("slice cannot change the dtype");
  for (int axis = 0; axis < rank; ++axis) {
    auto index = static_cast<std::size_t>(axis);
    if (step[index] == 0) context.shape_error("slice step is 0 on axis " + std::to_string(axis));
    if (result[axis] == 0) continue;
    std::int64_t last = start[index] + (result[axis] - 1) * step[index];
    if (start[index] < 0 || start[index] >= input.shape[axis] || last < 0 || last >= input.shape[axis])
      context.shape_error("slice reads outside axis " + std::to_string(axis) + " of size " +
                          std::to_string(input.shape[axis]));
  }
  return context.declared;
}

Type rule_concat(const RuleContext& context) {
  if (context.operands.empty()) context.shape_error("concat needs at least one operand");
  context.require_same_dtypes();
  const Type& first = context.operand(0);
  int rank = first.shape.rank();
  context.check_axis(context.attributes.axis, rank);
  auto axis = static_cast<int>(context.attributes.axis);
  Shape result = first.shape;
  for (std::size_t i = 1; i < context.operands.size(); ++i) {
    const Shape& shape = context.operand(i).shape;
    if (shape.rank() != rank) context.shape_error("operands must have one rank");
    for (int d = 0; d < rank; ++d)
      if (d != axis && shape[d] != result[d]) context.shape_error("sizes differ on axis " + std::to_string(d));
    result[axis] = (result[axis] == Shape::dynamic || shape[axis] == Shape::dynamic) ? Shape::dynamic
                                                                                    : result[axis] + shape[axis];
  }
  return {first.dtype, result};
}

// params [..., n (axis), ...] and indices of any shape: params' axis replaced by the indices' axes.
Type rule_gather(const RuleContext& context) {
  const Type& params = context.operand(0);
  const Type& indices = context.operand(1);
  if (indices.dtype != DType::i32 && indices.dtype != DType::i64)
    context.dtype_error("indices must be i32 or i64, got " + std::string(to_string(indices.dtype)));
  int rank = params.shape.rank();
  context.check_axis(context.attributes.axis, rank);
  if (rank - 1 + indices.shape.rank() > Shape::max_rank) context.shape_error("result would exceed rank 8");
  auto axis = static_cast<std::size_t>(context.attributes.axis);
  std::vector<std::int64_t> dims(params.shape.dims().begin(), params.shape.dims().begin() + axis);
  dims.insert(dims.end(), indices.shape.dims().begin(), indices.shape.dims().end());
  dims.insert(dims.end(), params.shape.dims().begin() + axis + 1, params.shape.dims().end());
  return {params.dtype, Shape(dims)};
}

Type rule_take_along_axis(const RuleContext& context) {
  const Type& values = context.operand(0);
  const Type& indices = context.operand(1);
  if (indices.dtype != DType::i32 && indices.dtype != DType::i64)
    context.dtype_error("indices must be i32 or i64, got " + std::string(to_string(indices.dtype)));
  const int rank = values.shape.rank();
  context.check_axis(context.attributes.axis, rank);
  if (indices.shape.rank() != rank) context.shape_error("indices must have the values' rank");
  for (int axis = 0; axis < rank; ++axis)
    if (axis != context.attributes.axis && indices.shape[axis] != values.shape[axis])
      context.shape_error("indices and values must have one size on every axis but " +
                          std::to_string(context.attributes.axis));
  return {values.dtype, indices.shape};
}

// operand [..., n (axis), ...], integer indices of any shape, updates of gather(operand, indices)'s shape: the
// operand's type.
Type rule_scatter_add(const RuleContext& context) {
  const Type& operand = context.operand(0);
  const Type& indices = context.operand(1);
  const Type& updates = context.operand(2);
  if (indices.dtype != DType::i32 && indices.dtype != DType::i64)
    context.dtype_error("indices must be i32 or i64, got " + std::string(to_string(indices.dtype)));
  context.require_not_bool(0);
  if (updates.dtype != operand.dtype) context.dtype_error("the updates must have the operand's dtype");
  const int rank = operand.shape.rank();
  context.check_axis(context.attributes.axis, rank);
  if (rank - 1 + indices.shape.rank() > Shape::max_rank) context.shape_error("the updates would exceed rank 8");
  const auto axis = static_cast<std::size_t>(context.attributes.axis);
  std::vector<std::int64_t> dims(operand.shape.dims().begin(), operand.shape.dims().begin() + axis);
  dims.insert(dims.end(), indices.shape.dims().begin(), indices.shape.dims().end());
  dims.insert(dims.end(), operand.shape.dims().begin() + axis + 1, operand.shape.dims().end());
  if (!(Shape(dims) == updates.shape))
    context.shape_error("the updates must have the shape " + Shape(dims).to_string() +
                        " (the operand's, with the indexed axis replaced by the indices' shape)");
  return operand;
}

Type rule_expand_dims(const RuleContext& context) {
  const Type& input = context.operand(0);
  int rank = input.shape.rank();
  if (rank >= Shape::max_rank) context.shape_error("result would exceed rank 8");
  context.check_axis(context.attributes.axis, rank + 1);
  std::vector<std::int64_t> dims(input.shape.dims().begin(), input.shape.dims().end());
  dims.insert(dims.begin() + context.attributes.axis, 1);
  return {input.dtype, Shape(dims)};
}

Type rule_squeeze(const RuleContext& context) {
  const Type& input = context.operand(0);
  const auto& axes = context.attributes.axes;
  context.check_sorted_axes(axes, input.shape.rank());
  std::vector<std::int64_t> dims;
  for (int axis = 0; axis < input.shape.rank(); ++axis) {
    bool squeezed = std::find(axes.begin(), axes.end(), axis) != axes.end();
    if (squeezed && input.shape[axis] != 1)
      context.shape_error("cannot squeeze axis " + std::to_string(axis) + " of size " +
                          std::to_string(input.shape[axis]));
    if (!squeezed) dims.push_back(input.shape[axis]);
  }
  return {input.dtype, Shape(dims)};
}

Type rule_nonzero(const RuleContext& context) {
  return {DType::i64, Shape({Shape::dynamic, context.operand(0).shape.rank()})};
}

Rule rule_for(Op op) {
  switch (op) {
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) \
  case Op::name:                                                                       \
    return rule_##type_rule;
#include "ir/ops.def"
#undef KILN_OP
  }
  return rule_given;
}

}  // namespace

bool has_declared_type(Op op) {
  switch (op) {
    case Op::parameter:
    case Op::constant:
    case Op::iota:
    case Op::cast:
    case Op::reshape:
    case Op::broadcast_to:
    case Op::slice:
    case Op::host_call:
    case Op::cond:
    case Op::while_loop:
    case Op::scan_loop:
    case Op::result:
      return true;
    default: return false;
  }
}

OperandPromotion operand_promotion(Op op) {
  const Rule rule = rule_for(op);
  if (rule == rule_unary_float || rule == rule_binary_float) return OperandPromotion::floating;
  if (rule == rule_unary_logical || rule == rule_binary_logical) return OperandPromotion::logical;
  return OperandPromotion::common;
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* result) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    int axis_a = a.rank() - rank + i, axis_b = b.rank() - rank + i;
    std::int64_t dim_a = axis_a >= 0 ? a[axis_a] : 1;
    std::int64_t dim_b = axis_b >= 0 ? b[axis_b] : 1;
    std::int64_t dim;
    if (dim_a == dim_b) dim = dim_a;
    else if (dim_a == 1) dim = dim_b;
    else if (dim_b == 1) dim = dim_a;
    // A data-dependent size is checked when the graph runs.
    else if (dim_a == Shape::dynamic) dim = dim_b;
    else if (dim_b == Shape::dynamic) dim = dim_a;
    else return false;
    dims[static_cast<std::size_t>(i)] = dim;
  }
  *result = Shape(dims);
  return true;
}

std::string describe_types(std::span<const Type> types) {
  std::string text;
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (i) text += ", ";
    text += types[i].to_string();
  }
  return text;
}

Type infer_type(Op op, const Attributes& attributes, std::span<const Type> operands, const Type& declared,
                const std::string& location) {
  const OpInfo& op_info = info(op);
  RuleContext context{op, attributes, operands, declared, location};
  if (op_info.arity >= 0 && static_cast<int>(operands.size()) != op_info.arity)
    context.shape_error("expects " + std::to_string(op_info.arity) + " operands, got " +
                        std::to_string(operands.size()));
  return rule_for(op)(context);
}

ValueError gather_index_error(const Node& node, std::int64_t value, std::int64_t position, std::int64_t size) {
  return ValueError(std::string(name(node.op)),
                    "index " + std::to_string(value) + " (element " + std::to_string(position) +
                        " of the indices) is out of range for axis " + std::to_string(node.attributes.axis) +
                        " of size " + std::to_string(size),
                    node.location);
}

}  // namespace kiln::ir
