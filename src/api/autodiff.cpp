// The autodiff transformations' non-template part (include/kiln/autodiff.h). Each runs in a trace: the trace of
// the kiln::function being traced, where the derivative becomes part of its graph, or -- called on concrete
// tensors -- a trace of its own, whose graph runs on the standard executor at once. In the trace, the function is
// called on fresh values of the arguments, and src/autodiff linearizes what it added to the graph and transposes
// (reverse mode) or replays (forward mode) that linearization into more nodes.

#include "api/tensor_impl.h"
#include "api/tracing.h"
#include "autodiff/differentiate.h"
#include "autodiff/emitter.h"
#include "exec/standard_executor.h"

#include <kiln/autodiff.h>
#include <kiln/error.h>

#include <optional>

namespace kiln {
namespace detail {
namespace {

std::string describe(DType dtype, const Shape& shape) { return std::string(to_string(dtype)) + shape.to_string(); }
std::string describe(const Tensor& tensor) { return describe(tensor.dtype(), tensor.shape()); }

// The value standing for `tensor` in `context`'s graph: its own if it was traced there, a capture if concrete.
ir::ValueId value_in(trace::TraceContext& context, const Tensor& tensor, const std::string& api,
                     const std::string& what, const Location& location) {
  if (!tensor.defined()) throw ValueError(api, what + " is an undefined (default-constructed) Tensor", location);
  const ir::ValueId value = context.finished() ? -1 : value_in_trace(context, tensor);
  if (value < 0)
    throw ValueError(api, what + " is a traced tensor of another trace (it escaped its kiln::function)", location);
  return value;
}

Tensor traced(const std::shared_ptr<trace::TraceContext>& context, ir::ValueId value) {
  return make_traced_tensor(context, value, context->device());
}

std::vector<Tensor> traced(const std::shared_ptr<trace::TraceContext>& context,
                           const std::vector<ir::ValueId>& values) {
  std::vector<Tensor> tensors;
  for (ir::ValueId value : values) tensors.push_back(traced(context, value));
  return tensors;
}

// A new value equal to `value`. Differentiation tells what it differentiates with respect to by value, so each
// argument gets one that nothing else uses (the same tensor passed twice, or also captured, stays two inputs). A
// reshape to its own shape: a view in the standard executor, removed by the JIT's simplify.
ir::ValueId fresh_copy(trace::TraceContext& context, ir::ValueId value, const std::string& location) {
  ir::Node node;
  node.op = ir::Op::reshape;
  node.type = context.graph().type(value);
  node.operands = {value};
  node.location = location;
  return context.add_node(std::move(node));
}

// Checks `argnums`, positions among all the call's arguments (the tensor `arguments` and the static values
// `statics`), and returns them as indices into `arguments`.
std::vector<int> checked_argnums(const std::vector<Tensor>& arguments, const std::vector<StaticValue>& statics,
                                 const std::vector<int>& argnums, const char* api, const Location& location) {
  const std::size_t count = arguments.size() + statics.size();
  std::vector<bool> chosen(count, false);
  std::vector<int> tensor_argnums;
  for (int argnum : argnums) {
    const std::string name = "argument " + std::to_string(argnum);
    if (argnum < 0 || static_cast<std::size_t>(argnum) >= count)
      throw ValueError(
          api, "argnums names " + name + ", but the function was called with " + std::to_string(count) + " arguments",
          location);
    if (chosen[static_cast<std::size_t>(argnum)]) throw ValueError(api, "argnums names " + name + " twice", location);
    chosen[static_cast<std::size_t>(argnum)] = true;
    int statics_before = 0;
    for (const StaticValue& value : statics) {
      if (value.position == argnum)
        throw ValueError(api,
                         "argnums names " + name + ", the static argument " + value.type + " " + value.text +
                             ": derivatives are taken with respect to tensor arguments only",
                         location);
      if (value.position < argnum) ++statics_before;
    }
    const Tensor& argument = arguments[static_cast<std::size_t>(argnum - statics_before)];
    if (!argument.defined()) throw ValueError(api, name + " is an undefined (default-constructed) Tensor", location);
    if (!is_floating(argument.dtype()))
      throw DTypeError(api,
                       name + " is " + describe(argument) +
                           ": derivatives are taken with respect to float arguments only (leave integer and bool "
                           "arguments out of argnums, or cast them to a float type)",
                       location);
    tensor_argnums.push_back(argnum - statics_before);
  }
  return tensor_argnums;
}

void check_argnums(const std::vector<Tensor>& arguments, const std::vector<int>& argnums, const char* api,
                   const Location& location) {
  checked_argnums(arguments, {}, argnums, api, location);
}

std::vector<int> every_argument(std::size_t count) {
  std::vector<int> argnums;
  for (std::size_t argument = 0; argument < count; ++argument) argnums.push_back(static_cast<int>(argument));
  return argnums;
}

// The outputs of a call in the current trace and their linearization at its arguments.
struct Linearized {
  std::shared_ptr<trace::TraceContext> context;
  std::vector<ir::ValueId> outputs;
  autodiff::Linearization linearization;
};

// Calls `body` on `arguments` in the current trace, those at `argnums` (checked) as fresh values, and linearizes
// its outputs with respect to them.
Linearized linearize_call(const TraceBody& body, const std::vector<Tensor>& arguments, const std::vector<int>& argnums,
                          const char* api, const Location& location) {
  check_argnums(arguments, argnums, api, location);
  std::shared_ptr<trace::TraceContext> context = current_context();
  const std::string line = to_string(location);
  const ir::ValueId begin = context->graph().size();
  std::vector<Tensor> inputs = arguments;
  std::vector<ir::ValueId> input_values;
  for (int argnum : argnums) {
    const auto position = static_cast<std::size_t>(argnum);
    const ir::ValueId value =
        value_in(*context, arguments[position], api, "argument " + std::to_string(argnum), location);
    input_values.push_back(fresh_copy(*context, value, line));
    inputs[position] = traced(context, input_values.back());
  }
  const std::vector<Tensor> results = body(inputs);
  std::vector<ir::ValueId> outputs;
  for (std::size_t output = 0; output < results.size(); ++output)
    outputs.push_back(value_in(*context, results[output], api, "output " + std::to_string(output), location));
  const autodiff::Region region{begin, &context->differentiation_marks(), api, line};
  autodiff::Linearization linearization = autodiff::linearize(context->graph(), region, input_values, outputs);
  return {std::move(context), std::move(outputs), std::move(linearization)};
}

// Each of `tensors` must have the type of `types`' element: a cotangent or tangent for a value of that type.
void check_types(const std::vector<Tensor>& tensors, const std::vector<ir::Type>& types, const char* api,
                 const std::string& what, const std::string& of, const Location& location) {
  if (tensors.size() != types.size())
    throw ValueError(api,
                     "takes " + std::to_string(types.size()) + " " + what + "s (one per " + of + "), got " +
                         std::to_string(tensors.size()),
                     location);
  for (std::size_t index = 0; index < tensors.size(); ++index) {
    const Tensor& tensor = tensors[index];
    const std::string name = what + " " + std::to_string(index);
    if (!tensor.defined()) throw ValueError(api, name + " is an undefined (default-constructed) Tensor", location);
    const std::string detail = name + " is " + describe(tensor) + " for " + of + " " + std::to_string(index) + " of " +
                               types[index].to_string() + ": it must have that dtype and shape";
    if (!(tensor.shape() == types[index].shape)) throw ShapeError(api, detail, location);
    if (tensor.dtype() != types[index].dtype) throw DTypeError(api, detail, location);
  }
}

}  // namespace

std::vector<Tensor> value_and_gradients(const TraceBody& body, const std::vector<Tensor>& arguments,
                                        const std::vector<StaticValue>& statics, const std::vector<int>& argnums,
                                        const char* api, const Location& location) {
  const std::vector<int> tensor_argnums = checked_argnums(arguments, statics, argnums, api, location);
  return run_in_trace(arguments, api, location, [&](const std::vector<Tensor>& traced_arguments) {
    Linearized linearized = linearize_call(body, traced_arguments, tensor_argnums, api, location);
    ir::Graph& graph = linearized.context->graph();
    if (linearized.outputs.size() != 1)
      throw ValueError(api,
                       "the function returned " + std::to_string(linearized.outputs.size()) +
                           " tensors; a gradient needs one scalar",
                       location);
    const ir::ValueId output = linearized.outputs[0];
    const ir::Type type = graph.type(output);
    if (!is_floating(type.dtype))
      throw DTypeError(api, "the function returned " + type.to_string() + ": a gradient needs a float output",
                       location);
    if (type.shape.rank() != 0)
      throw ShapeError(api,
                       "the function returned " + type.to_string() +
                           ", not a scalar: a gradient is of a scalar (rank-0) output. Reduce it first (reduce_sum, "
                           "reduce_mean), or use kiln::vjp and give the cotangent of the whole output",
                       location);
    autodiff::Emitter emitter(graph);
    emitter.set_location(to_string(location));
    const ir::ValueId seed = emitter.constant(1, type.dtype);
    std::vector<ir::ValueId> values{output};
    for (ir::ValueId gradient : autodiff::transpose(graph, linearized.linearization, {&seed, 1}))
      values.push_back(gradient);
    return traced(linearized.context, values);
  });
}

std::vector<Tensor> jvp_call(const TraceBody& body, const std::vector<Tensor>& primals,
                             const std::vector<Tensor>& tangents, const Location& location) {
  const std::vector<int> argnums = every_argument(primals.size());
  check_argnums(primals, argnums, "jvp", location);
  std::vector<ir::Type> primal_types;
  for (const Tensor& primal : primals) primal_types.push_back({primal.dtype(), primal.shape()});
  check_types(tangents, primal_types, "jvp", "tangent", "primal", location);
  std::vector<Tensor> inputs = primals;
  inputs.insert(inputs.end(), tangents.begin(), tangents.end());
  return run_in_trace(inputs, "jvp", location, [&](const std::vector<Tensor>& traced_inputs) {
    const auto count = static_cast<std::ptrdiff_t>(primals.size());
    Linearized linearized =
        linearize_call(body, {traced_inputs.begin(), traced_inputs.begin() + count}, argnums, "jvp", location);
    std::vector<ir::ValueId> tangent_values;
    for (std::size_t index = 0; index < primals.size(); ++index)
      tangent_values.push_back(value_in(*linearized.context, traced_inputs[primals.size() + index], "jvp",
                                        "tangent " + std::to_string(index), location));
    std::vector<ir::ValueId> values = linearized.outputs;
    for (ir::ValueId tangent :
         autodiff::apply_tangents(linearized.context->graph(), linearized.linearization, tangent_values))
      values.push_back(tangent);
    return traced(linearized.context, values);
  });
}

// A vjp's pullback. Made in a trace, it holds the linearization, and transposes it into that trace's graph; made on
// concrete tensors, it holds the function and its primals, and differentiates again when called (the function is
// computed again: no values are kept from the first run).
class PullbackCore {
 public:
  std::vector<ir::Type> output_types;
  Location location;
  // Made in a trace.
  std::shared_ptr<trace::TraceContext> context;
  std::optional<autodiff::Linearization> linearization;
  // Made on concrete tensors.
  TraceBody body;
  std::vector<Tensor> primals;
};

VjpResult vjp_call(const TraceBody& body, const std::vector<Tensor>& primals, const Location& location) {
  const std::vector<int> argnums = every_argument(primals.size());
  check_argnums(primals, argnums, "vjp", location);
  auto core = std::make_shared<PullbackCore>();
  core->location = location;
  VjpResult result;
  if (trace::TraceContext::current()) {
    Linearized linearized = linearize_call(body, primals, argnums, "vjp", location);
    result.outputs = traced(linearized.context, linearized.outputs);
    core->context = std::move(linearized.context);
    core->linearization.emplace(std::move(linearized.linearization));
  } else {
    result.outputs = run_in_trace(primals, "vjp", location, body);
    core->body = body;
    core->primals = primals;
  }
  for (const Tensor& output : result.outputs) {
    if (!is_floating(output.dtype()))
      throw DTypeError("vjp", "the function returned " + describe(output) + ": a derivative needs float outputs",
                       location);
    core->output_types.push_back({output.dtype(), output.shape()});
  }
  result.pullback = std::move(core);
  return result;
}

std::vector<Tensor> pull_back(const PullbackCore& pullback, const std::vector<Tensor>& cotangents,
                              const Location& location) {
  const char* api = "vjp's pullback";
  check_types(cotangents, pullback.output_types, api, "cotangent", "output", location);
  if (pullback.linearization) {
    const std::shared_ptr<trace::TraceContext> context = current_context();
    if (context != pullback.context || context->finished())
      throw ValueError(api,
                       "was made in the trace of a kiln::function and can be called only there: call it inside that "
                       "function, or return what you need from it",
                       location);
    std::vector<ir::ValueId> values;
    for (std::size_t index = 0; index < cotangents.size(); ++index)
      values.push_back(value_in(*context, cotangents[index], api, "cotangent " + std::to_string(index), location));
    return traced(context, autodiff::transpose(context->graph(), *pullback.linearization, values));
  }
  std::vector<Tensor> inputs = pullback.primals;
  inputs.insert(inputs.end(), cotangents.begin(), cotangents.end());
  return run_in_trace(inputs, "vjp", location, [&](const std::vector<Tensor>& traced_inputs) {
    const auto count = static_cast<std::ptrdiff_t>(pullback.primals.size());
    Linearized linearized = linearize_call(pullback.body, {traced_inputs.begin(), traced_inputs.begin() + count},
                                           every_argument(pullback.primals.size()), "vjp", pullback.location);
    std::vector<ir::ValueId> values;
    for (std::size_t index = 0; index < cotangents.size(); ++index)
      values.push_back(value_in(*linearized.context, traced_inputs[pullback.primals.size() + index], api,
                                "cotangent " + std::to_string(index), location));
    return traced(linearized.context,
                  autodiff::transpose(linearized.context->graph(), linearized.linearization, values));
  });
}

std::vector<Tensor> call_custom_vjp(const CustomForward& forward, const CustomBackwardBody& backward,
                                    const std::vector<Tensor>& arguments, const Location& location) {
  const std::shared_ptr<trace::TraceContext> context = current_context();
  if (!context) return forward(arguments).first;  // nothing differentiates concrete tensors afterwards
  const std::string line = to_string(location);
  trace::DifferentiationMarks& marks = context->differentiation_marks();
  // The forward computation runs on copies whose derivative is stopped: the call's derivative is the backward
  // function's alone.
  std::vector<ir::ValueId> inputs;
  std::vector<ir::Type> input_types;
  std::vector<Tensor> copies;
  for (std::size_t index = 0; index < arguments.size(); ++index) {
    inputs.push_back(value_in(*context, arguments[index], "custom_vjp", "argument " + std::to_string(index), location));
    input_types.push_back(context->graph().type(inputs.back()));
    const ir::ValueId copy = fresh_copy(*context, inputs.back(), line);
    marks.stopped.insert(copy);
    copies.push_back(traced(context, copy));
  }
  const auto [results, residuals] = forward(copies);
  std::vector<ir::ValueId> outputs, residual_values;
  for (std::size_t index = 0; index < results.size(); ++index)
    outputs.push_back(fresh_copy(
        *context, value_in(*context, results[index], "custom_vjp", "output " + std::to_string(index), location), line));
  for (std::size_t index = 0; index < residuals.size(); ++index)
    residual_values.push_back(
        value_in(*context, residuals[index], "custom_vjp", "residual " + std::to_string(index), location));

  // Holds values, not tensors: a tensor would hold the trace that holds this function.
  trace::CustomBackward call_backward = [backward, residual_values, input_types,
                                         location](std::span<const ir::ValueId> output_cotangents) {
    const std::shared_ptr<trace::TraceContext> active = current_context();
    std::vector<Tensor> cotangents = traced(active, {output_cotangents.begin(), output_cotangents.end()});
    const std::vector<Tensor> results = backward(traced(active, residual_values), cotangents);
    if (results.size() != input_types.size())
      throw ValueError("custom_vjp",
                       "the backward function returned " + std::to_string(results.size()) + " cotangents for " +
                           std::to_string(input_types.size()) + " arguments",
                       location);
    std::vector<ir::ValueId> values;
    for (std::size_t index = 0; index < results.size(); ++index) {
      const Tensor& result = results[index];
      const std::string name = "the backward function's cotangent " + std::to_string(index);
      const ir::Type& type = input_types[index];
      if (!result.defined()) throw ValueError("custom_vjp", name + " is an undefined Tensor", location);
      const std::string detail = name + " is " + describe(result) + " for argument " + std::to_string(index) + " of " +
                                 type.to_string() + ": it must have that dtype and shape";
      if (is_floating(type.dtype) && !(result.shape() == type.shape)) throw ShapeError("custom_vjp", detail, location);
      if (is_floating(type.dtype) && result.dtype() != type.dtype) throw DTypeError("custom_vjp", detail, location);
      values.push_back(value_in(*active, result, "custom_vjp", name, location));
    }
    return values;
  };
  marks.add_custom({inputs, outputs, std::move(call_backward)});
  return traced(context, outputs);
}

}  // namespace detail

Tensor stop_gradient(const Tensor& x, Location location) {
  const std::shared_ptr<trace::TraceContext> context = detail::current_context();
  if (!x.defined())
    throw ValueError("stop_gradient", "operand 0 is an undefined (default-constructed) Tensor", location);
  if (!context) return x;  // nothing differentiates concrete tensors afterwards
  const ir::ValueId copy = detail::fresh_copy(
      *context, detail::value_in(*context, x, "stop_gradient", "operand 0", location), to_string(location));
  context->differentiation_marks().stopped.insert(copy);
  return detail::traced(context, copy);
}

}  // namespace kiln
