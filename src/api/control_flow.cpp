// The control-flow constructs' non-template part (include/kiln/control_flow.h). Each traces its branches or body as
// regions -- graphs of their own in a trace nested in the current one, where whatever they use of the traces around
// them becomes a parameter -- and adds one control node (ir/graph.h) to the current trace. Called on concrete
// tensors, it does so in a trace of its own that then runs on the standard executor (run_in_trace).

#include "api/dispatch.h"
#include "api/tensor_impl.h"
#include "api/tracing.h"
#include "ir/type_rules.h"

#include <kiln/control_flow.h>
#include <kiln/error.h>

#include <algorithm>
#include <limits>

namespace kiln::detail {
namespace {

std::string describe(const ir::Type& type) { return type.to_string(); }

std::vector<ir::Type> types_of(const std::vector<Tensor>& tensors) {
  std::vector<ir::Type> types;
  for (const Tensor& tensor : tensors) types.push_back({tensor.dtype(), tensor.shape()});
  return types;
}

void check_defined(const std::vector<Tensor>& tensors, const char* api, const std::string& what,
                   const Location& location) {
  for (std::size_t index = 0; index < tensors.size(); ++index)
    if (!tensors[index].defined())
      throw ValueError(api, what + " " + std::to_string(index) + " is an undefined (default-constructed) Tensor",
                       location);
}

// A traced region: its graph (canonical: its arguments, then what it captured) and, per captured parameter, the
// value of the enclosing graph it stands for.
struct Region {
  ir::Graph graph;
  std::vector<ir::ValueId> outer_values;
  // Whether it was traced with stop_gradient or custom_vjp marks, which the graph does not keep (a derivative
  // through the node refuses it rather than ignore them).
  bool marked = false;
};

// Traces `body` on fresh arguments of `types` as a region of `parent`'s trace.
Region trace_region(const std::shared_ptr<trace::TraceContext>& parent, const std::string& name,
                    const std::vector<ir::Type>& types, const TraceBody& body, const char* api, const std::string& what,
                    const Location& location) {
  auto context = std::make_shared<trace::TraceContext>(parent->graph().name + "." + name, parent);
  struct FinishOnExit {
    trace::TraceContext& context;
    ~FinishOnExit() { context.finish(); }
  } finish_on_exit{*context};
  std::vector<Tensor> arguments;
  for (const ir::Type& type : types)
    arguments.push_back(make_traced_tensor(context, context->add_argument(type), context->device()));
  std::vector<Tensor> outputs;
  {
    ContextActivation activation(context);
    outputs = body(arguments);
  }
  for (std::size_t index = 0; index < outputs.size(); ++index) {
    const Tensor& output = outputs[index];
    const std::string name_of_output = what + " output " + std::to_string(index);
    if (!output.defined())
      throw ValueError(api, name_of_output + " is an undefined (default-constructed) Tensor", location);
    if (!output.is_traced() && output.device() != context->device())
      throw DeviceError(api, name_of_output + " is on " + output.device().to_string(), location);
    const ir::ValueId value = value_in_trace(*context, output);
    if (value < 0) throw ValueError(api, name_of_output + " is a traced tensor of another function's trace", location);
    context->graph().outputs.push_back(value);
  }
  Region region{std::move(context->graph()), context->outer_values(), !context->differentiation_marks().empty()};
  ir::canonicalize(region.graph);
  return region;
}

// Gives every region the same captured parameters -- all that any of them captured, in one order -- after its
// `arguments`, and returns the enclosing graph's values for them: the control node's last operands.
std::vector<ir::ValueId> share_captures(std::vector<Region>& regions, std::size_t arguments,
                                        const ir::Graph& enclosing) {
  std::vector<ir::ValueId> shared;
  for (const Region& region : regions)
    for (ir::ValueId value : region.outer_values)
      if (std::find(shared.begin(), shared.end(), value) == shared.end()) shared.push_back(value);
  for (Region& region : regions) {
    std::vector<ir::ValueId> parameters(region.graph.parameters.begin(),
                                        region.graph.parameters.begin() + static_cast<std::ptrdiff_t>(arguments));
    for (ir::ValueId value : shared) {
      const auto found = std::find(region.outer_values.begin(), region.outer_values.end(), value);
      parameters.push_back(
          found != region.outer_values.end()
              ? region.graph.parameters[arguments + static_cast<std::size_t>(found - region.outer_values.begin())]
              : region.graph.add_parameter(enclosing.type(value)));
    }
    region.graph.parameters = std::move(parameters);
    ir::canonicalize(region.graph);
    region.outer_values = shared;
  }
  return shared;
}

std::vector<ir::Type> output_types(const ir::Graph& graph) {
  std::vector<ir::Type> types;
  for (ir::ValueId output : graph.outputs) types.push_back(graph.type(output));
  return types;
}

// The control node with `operands` (those before the captures), the shared captures and `regions`, added to the
// current trace; returns its results as tensors.
std::vector<Tensor> add_control_node(ir::Op op, std::vector<ir::ValueId> operands, std::vector<Region> regions,
                                     std::size_t arguments, const ir::Attributes& attributes,
                                     const Location& location) {
  const std::shared_ptr<trace::TraceContext> context = current_context();
  ir::Graph& graph = context->graph();
  for (ir::ValueId value : share_captures(regions, arguments, graph)) operands.push_back(value);
  ir::Node node;
  node.op = op;
  node.operands = std::move(operands);
  node.attributes = attributes;
  node.location = to_string(location);
  const bool marked = std::any_of(regions.begin(), regions.end(), [](const Region& region) { return region.marked; });
  for (Region& region : regions) node.regions.push_back(std::move(region.graph));
  const std::vector<ir::ValueId> results = ir::add_control_node(graph, std::move(node));
  if (marked) context->differentiation_marks().marked_controls.insert(results.at(0));
  std::vector<Tensor> tensors;
  for (ir::ValueId result : results) tensors.push_back(make_traced_tensor(context, result, context->device()));
  return tensors;
}

ir::ValueId value_of(const Tensor& tensor) { return value_in_trace(*current_context(), tensor); }

std::vector<ir::ValueId> values_of(const std::vector<Tensor>& tensors) {
  std::vector<ir::ValueId> values;
  for (const Tensor& tensor : tensors) values.push_back(value_of(tensor));
  return values;
}

// `outputs` (what a body returned) must have the carries' dtypes and shapes, one for one.
void check_carries(const std::vector<ir::Type>& outputs, const std::vector<ir::Type>& carries, const char* api,
                   const std::string& what, const Location& location) {
  if (outputs.size() < carries.size())
    throw ValueError(api,
                     what + " returned " + std::to_string(outputs.size()) + " tensors for " +
                         std::to_string(carries.size()) + " carries",
                     location);
  for (std::size_t index = 0; index < carries.size(); ++index) {
    if (outputs[index] == carries[index]) continue;
    const std::string detail = what + " returned " + describe(outputs[index]) + " for carry " + std::to_string(index) +
                               " of " + describe(carries[index]) +
                               ": each step must keep every carry's dtype and shape (cast it, or broadcast it, "
                               "to the initial value's)";
    if (outputs[index].dtype != carries[index].dtype) throw DTypeError(api, detail, location);
    throw ShapeError(api, detail, location);
  }
}

// A scalar selecting a branch or bounding a loop: defined, rank 0, of an accepted dtype.
void check_scalar(const Tensor& tensor, const char* api, const std::string& what, bool bool_allowed,
                  const Location& location) {
  if (!tensor.defined()) throw ValueError(api, what + " is an undefined (default-constructed) Tensor", location);
  const ir::Type type{tensor.dtype(), tensor.shape()};
  const bool integer = tensor.dtype() == DType::i32 || tensor.dtype() == DType::i64;
  if (!(integer || (bool_allowed && tensor.dtype() == DType::boolean)))
    throw DTypeError(api,
                     what + " is " + describe(type) + ": it must be " +
                         (bool_allowed ? "a bool or integer scalar" : "an integer scalar (i32 or i64)"),
                     location);
  if (tensor.rank() != 0)
    throw ShapeError(api, what + " is " + describe(type) + ": it must be a scalar (rank 0)", location);
}

}  // namespace

std::vector<Tensor> switch_case(const Tensor& index, bool is_predicate, const std::vector<TraceBody>& branches,
                                const std::vector<Tensor>& operands, const Location& location) {
  const char* api = is_predicate ? "cond" : "switch_case";
  check_scalar(index, api, is_predicate ? "the predicate" : "the index", is_predicate, location);
  check_defined(operands, api, "operand", location);
  if (branches.empty()) throw ValueError(api, "needs at least one branch", location);
  std::vector<Tensor> arguments{index};
  arguments.insert(arguments.end(), operands.begin(), operands.end());
  return run_in_trace(arguments, api, location, [&](const std::vector<Tensor>& traced) {
    // The branch to run, as the i32 the node takes: a predicate's 0 (false) or 1; an index clamped first (an i64
    // index past 2^31 must pick the last branch, not wrap).
    Tensor selector = traced[0];
    if (is_predicate) {
      if (selector.dtype() != DType::boolean) selector = ne(selector, 0, location);
    } else {
      selector = minimum(maximum(selector, 0, location), static_cast<std::int64_t>(branches.size()) - 1, location);
    }
    selector = cast_to(selector, DType::i32, location);
    const std::vector<Tensor> inputs(traced.begin() + 1, traced.end());
    const std::vector<ir::Type> types = types_of(inputs);
    std::vector<Region> regions;
    for (std::size_t branch = 0; branch < branches.size(); ++branch) {
      const std::string name =
          is_predicate ? (branch ? "true_branch" : "false_branch") : "branch" + std::to_string(branch);
      regions.push_back(trace_region(current_context(), name, types, branches[branch], api, "the " + name, location));
    }
    const std::vector<ir::Type> first = output_types(regions[0].graph);
    if (first.empty()) throw ValueError(api, "the branches return no tensors", location);
    for (std::size_t branch = 1; branch < regions.size(); ++branch) {
      const std::vector<ir::Type> other = output_types(regions[branch].graph);
      if (other == first) continue;
      const std::string names = is_predicate
                                    ? std::string("the true branch returns (") + ir::describe_types(other) +
                                          "), the false branch (" + ir::describe_types(first) + ")"
                                    : "branch " + std::to_string(branch) + " returns (" + ir::describe_types(other) +
                                          "), branch 0 (" + ir::describe_types(first) + ")";
      const std::string detail = names + ": every branch must return the same dtypes and shapes";
      bool dtypes_differ = other.size() != first.size();
      for (std::size_t output = 0; !dtypes_differ && output < other.size(); ++output)
        dtypes_differ = other[output].dtype != first[output].dtype;
      if (dtypes_differ && other.size() == first.size()) throw DTypeError(api, detail, location);
      if (other.size() != first.size()) throw ValueError(api, detail, location);
      throw ShapeError(api, detail, location);
    }
    std::vector<ir::ValueId> node_operands{value_of(selector)};
    for (ir::ValueId value : values_of(inputs)) node_operands.push_back(value);
    ir::Attributes attributes;
    attributes.carry_count = static_cast<std::int64_t>(inputs.size());
    return add_control_node(ir::Op::cond, std::move(node_operands), std::move(regions), inputs.size(), attributes,
                            location);
  });
}

std::vector<Tensor> while_loop(const TraceBody& condition, const TraceBody& body, const std::vector<Tensor>& init,
                               const Location& location) {
  const char* api = "while_loop";
  check_defined(init, api, "initial carry", location);
  if (init.empty()) throw ValueError(api, "needs at least one carry", location);
  return run_in_trace(init, api, location, [&](const std::vector<Tensor>& carries) {
    const std::vector<ir::Type> types = types_of(carries);
    std::vector<Region> regions;
    regions.push_back(trace_region(current_context(), "condition", types, condition, api, "the condition", location));
    const std::vector<ir::Type> tested = output_types(regions[0].graph);
    const std::string returned_condition =
        "the condition returned (" + ir::describe_types(tested) + "): it must return one bool scalar";
    if (tested.size() != 1) throw ValueError(api, returned_condition, location);
    if (tested[0].dtype != DType::boolean) throw DTypeError(api, returned_condition, location);
    if (tested[0].shape.rank() != 0) throw ShapeError(api, returned_condition, location);
    regions.push_back(trace_region(current_context(), "body", types, body, api, "the body", location));
    const std::vector<ir::Type> returned = output_types(regions[1].graph);
    check_carries(returned, types, api, "the body", location);
    if (returned.size() != types.size())
      throw ValueError(api,
                       "the body returned " + std::to_string(returned.size()) + " tensors for " +
                           std::to_string(types.size()) + " carries",
                       location);
    ir::Attributes attributes;
    attributes.carry_count = static_cast<std::int64_t>(carries.size());
    return add_control_node(ir::Op::while_loop, values_of(carries), std::move(regions), carries.size(), attributes,
                            location);
  });
}

std::vector<Tensor> scan(const TraceBody& body, const std::vector<Tensor>& carries,
                         const std::vector<Tensor>& sequences, const ScanLoopOptions& options,
                         const Location& location) {
  const char* api = "scan";
  check_defined(carries, api, "initial carry", location);
  check_defined(sequences, api, "sequence", location);
  std::int64_t length = options.length;
  for (std::size_t index = 0; index < sequences.size(); ++index) {
    const Tensor& sequence = sequences[index];
    const std::string name =
        "sequence " + std::to_string(index) + " (" + describe(ir::Type{sequence.dtype(), sequence.shape()}) + ")";
    if (sequence.rank() == 0)
      throw ShapeError(api, name + " is a scalar: a sequence is stepped through along its leading axis", location);
    if (length >= 0 && sequence.shape()[0] != length)
      throw ShapeError(api,
                       name + " has " + std::to_string(sequence.shape()[0]) + " elements along its leading axis, " +
                           (options.length >= 0 ? "but options.length is " : "but sequence 0 has ") +
                           std::to_string(length),
                       location);
    length = sequence.shape()[0];
  }
  if (length < 0) throw ValueError(api, "scans no sequences: give the number of steps as options.length", location);
  std::vector<Tensor> arguments = carries;
  arguments.insert(arguments.end(), sequences.begin(), sequences.end());
  return run_in_trace(arguments, api, location, [&](const std::vector<Tensor>& traced) {
    std::vector<ir::Type> types = types_of(traced);
    const std::vector<ir::Type> carried(types.begin(), types.begin() + static_cast<std::ptrdiff_t>(carries.size()));
    for (std::size_t index = carries.size(); index < types.size(); ++index)
      types[index].shape = Shape(types[index].shape.dims().subspan(1));
    std::vector<Region> regions;
    regions.push_back(trace_region(current_context(), "step", types, body, api, "the step", location));
    check_carries(output_types(regions[0].graph), carried, api, "the step", location);
    if (regions[0].graph.outputs.empty())
      throw ValueError(api, "has neither carries nor per-step outputs: it computes nothing", location);
    ir::Attributes attributes;
    attributes.carry_count = static_cast<std::int64_t>(carries.size());
    attributes.sequence_count = static_cast<std::int64_t>(sequences.size());
    attributes.length = length;
    attributes.reverse = options.reverse;
    return add_control_node(ir::Op::scan_loop, values_of(traced), std::move(regions), traced.size(), attributes,
                            location);
  });
}

Tensor index_bound(std::int64_t bound, const Location& location) {
  const bool fits =
      bound >= std::numeric_limits<std::int32_t>::min() && bound <= std::numeric_limits<std::int32_t>::max();
  const Device device = trace::TraceContext::current() ? trace::TraceContext::current()->device() : Device::cpu();
  return scalar_constant(bound, fits ? DType::i32 : DType::i64, device, location);
}

std::vector<Tensor> fori_loop(std::int64_t lower, std::int64_t upper, const TraceBody& body,
                              const std::vector<Tensor>& init, const Location& location) {
  check_defined(init, "fori_loop", "initial carry", location);
  // A loop of known length: a scan over no sequences, the index its first carry (as JAX lowers fori_loop).
  const bool fits =
      lower >= std::numeric_limits<std::int32_t>::min() && upper <= std::numeric_limits<std::int32_t>::max();
  const DType index_dtype = fits ? DType::i32 : DType::i64;
  const Device device = init.empty() ? Device::cpu() : init[0].device();
  std::vector<Tensor> carries{scalar_constant(lower, index_dtype, device, location)};
  carries.insert(carries.end(), init.begin(), init.end());
  const TraceBody step = [&](const std::vector<Tensor>& inputs) {
    std::vector<Tensor> outputs{add(inputs[0], 1, location)};
    for (Tensor& output : body(inputs)) outputs.push_back(std::move(output));
    return outputs;
  };
  std::vector<Tensor> results = scan(step, carries, {}, {.length = std::max<std::int64_t>(upper - lower, 0)}, location);
  results.erase(results.begin());
  return results;
}

std::vector<Tensor> fori_loop(const Tensor& lower, const Tensor& upper, const TraceBody& body,
                              const std::vector<Tensor>& init, const Location& location) {
  check_scalar(lower, "fori_loop", "the lower bound", false, location);
  check_scalar(upper, "fori_loop", "the upper bound", false, location);
  check_defined(init, "fori_loop", "initial carry", location);
  // The index in the bounds' common dtype, the upper bound captured by the condition.
  const DType index_dtype = lower.dtype() == DType::i64 || upper.dtype() == DType::i64 ? DType::i64 : DType::i32;
  std::vector<Tensor> arguments{lower, upper};
  arguments.insert(arguments.end(), init.begin(), init.end());
  return run_in_trace(arguments, "fori_loop", location, [&](const std::vector<Tensor>& traced) {
    const Tensor end = cast_to(traced[1], index_dtype, location);
    std::vector<Tensor> carries{cast_to(traced[0], index_dtype, location)};
    carries.insert(carries.end(), traced.begin() + 2, traced.end());
    const TraceBody condition = [&](const std::vector<Tensor>& state) {
      return std::vector<Tensor>{lt(state[0], end, location)};
    };
    const TraceBody step = [&](const std::vector<Tensor>& state) {
      std::vector<Tensor> outputs{add(state[0], 1, location)};
      for (Tensor& output : body(state)) outputs.push_back(std::move(output));
      return outputs;
    };
    std::vector<Tensor> results = while_loop(condition, step, carries, location);
    results.erase(results.begin());
    return results;
  });
}

}  // namespace kiln::detail
