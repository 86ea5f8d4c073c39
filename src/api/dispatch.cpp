#include "api/dispatch.h"

#include "api/tensor_impl.h"
#include "ir/type_rules.h"
#include "kernels/kernels.h"

#include <kiln/error.h>

#include <algorithm>
#include <limits>

namespace kiln::detail {
namespace {

// All operands must be on one device; a traced tensor must belong to the
// trace that is active now.
Device check_operands(ir::Op op, const std::vector<Tensor>& inputs, trace::TraceContext* context,
                      const std::string& location) {
  std::string op_name(ir::name(op));
  Device device = context ? context->device() : Device::cpu();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.defined())
      throw ValueError(op_name, "operand " + std::to_string(i) + " is an undefined (default-constructed) Tensor",
                       location);
    if (input.is_traced()) {
      const TensorImpl& impl = input.impl();
      if (!context || !context->is_within(impl.context.get()) || impl.context->finished())
        throw ValueError(op_name,
                         "operand " + std::to_string(i) +
                             " is a traced tensor of another kiln::function's trace (it escaped its function, e.g. "
                             "through a global or a captured reference); return it from that function instead",
                         location);
    }
    if (i == 0 && !context) device = input.device();
    if (input.device() != device)
      throw DeviceError(op_name,
                        "operands are on different devices (" + device.to_string() + " and " +
                            input.device().to_string() + "); copy them with .to(device) first",
                        location);
  }
  return device;
}

// A float scalar given for an integer constant: truncated, saturated, NaN 0.
std::int64_t saturating_integer(double value) {
  if (value != value) return 0;
  if (value <= -9.2233720368547758e18) return std::numeric_limits<std::int64_t>::lowest();
  if (value >= 9.2233720368547758e18) return std::numeric_limits<std::int64_t>::max();
  return static_cast<std::int64_t>(value);
}

}  // namespace

Tensor apply(ir::Op op, const std::vector<Tensor>& inputs, const ir::Attributes& attributes, const Location& location,
             const ir::Type& declared) {
  std::string where = to_string(location);
  trace::TraceContext* context = trace::TraceContext::current();
  Device device = check_operands(op, inputs, context, where);

  std::vector<ir::Type> types;
  types.reserve(inputs.size());
  for (const Tensor& input : inputs) types.push_back({input.dtype(), input.shape()});
  ir::Node node;
  node.op = op;
  node.attributes = attributes;
  node.location = where;
  node.type = ir::infer_type(op, attributes, types, declared, where);

  if (context) {
    for (const Tensor& input : inputs) node.operands.push_back(value_in_trace(*context, input));
    ir::ValueId value = context->add_node(std::move(node));
    return make_traced_tensor(current_context(), value, device);
  }

  std::vector<runtime::Array> arrays;
  arrays.reserve(inputs.size());
  for (const Tensor& input : inputs) arrays.push_back(input.impl().array);
  return make_tensor(kernels::run(node, arrays, device));
}

DType scalar_dtype(DType tensor_dtype, const Scalar& scalar) {
  if (scalar.kind() == DType::f64 && !is_floating(tensor_dtype)) return DType::f32;
  if (scalar.kind() == DType::i64 && tensor_dtype == DType::boolean) return DType::i32;
  return tensor_dtype;
}

void check_created_on_trace_device(Device device, const char* op, const char* what, const Location& location) {
  const trace::TraceContext* context = trace::TraceContext::current();
  if (context && device != context->device() && !device.is_cpu())
    throw DeviceError(op,
                      std::string("cannot create ") + what + " on " + device.to_string() +
                          " inside a function traced for " + context->device().to_string(),
                      location);
}

Tensor constant(Scalar value, DType dtype, const Shape& shape, Device device, const Location& location) {
  if (!shape.is_static()) throw ShapeError("constant", "shape " + shape.to_string() + " is not static", location);
  ir::Attributes attributes;
  if (is_floating(dtype)) attributes.float_value = value.as_double();
  else if (dtype == DType::boolean) attributes.int_value = value.as_double() != 0 ? 1 : 0;
  else attributes.int_value = value.kind() == DType::f64 ? saturating_integer(value.as_double()) : value.as_int();
  ir::Node node;
  node.op = ir::Op::constant;
  node.type = ir::Type{dtype, shape};
  node.attributes = attributes;
  node.location = to_string(location);
  if (trace::TraceContext* context = trace::TraceContext::current()) {
    // A constant in a traced function is part of its graph and lives on the
    // function's device, as in tf.function and jax.jit: `full({}, 3)` (on the
    // CPU by default) inside a function traced for a GPU is a GPU constant.
    // Asking for another GPU is a mistake worth reporting.
    check_created_on_trace_device(device, "constant", "a constant", location);
    ir::ValueId value_id = context->add_node(std::move(node));
    return make_traced_tensor(current_context(), value_id, context->device());
  }
  return make_tensor(kernels::run(node, {}, device));
}

Tensor scalar_constant(Scalar value, DType dtype, Device device, const Location& location) {
  return constant(value, dtype, Shape(), device, location);
}

Tensor cast_to(const Tensor& x, DType dtype, const Location& location) {
  if (x.defined() && x.dtype() == dtype) return x;
  if (!x.defined()) throw ValueError("cast", "operand 0 is an undefined (default-constructed) Tensor", location);
  return apply(ir::Op::cast, {x}, {}, location, ir::Type{dtype, x.shape()});
}

int checked_rank(const Tensor& x, const char* op, const Location& location) {
  if (!x.defined()) throw ValueError(op, "operand 0 is an undefined (default-constructed) Tensor", location);
  return x.rank();
}

std::int64_t normalize_axis(std::int64_t axis, int rank, const char* op, const Location& location) {
  std::int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank)
    throw ShapeError(op, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank),
                     location);
  return normalized;
}

std::vector<std::int64_t> normalize_axes(const Axes& axes, int rank, const char* op, const Location& location) {
  std::vector<std::int64_t> result;
  if (axes.all()) {
    for (int axis = 0; axis < rank; ++axis) result.push_back(axis);
    return result;
  }
  for (std::int64_t axis : axes.list()) result.push_back(normalize_axis(axis, rank, op, location));
  std::sort(result.begin(), result.end());
  if (std::adjacent_find(result.begin(), result.end()) != result.end())
    throw ShapeError(op, "an axis is repeated", location);
  return result;
}

}  // namespace kiln::detail
