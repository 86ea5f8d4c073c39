#include "derivative_graph.h"

#include "autodiff/differentiate.h"
#include "autodiff/emitter.h"
#include "ir/verifier.h"
#include "random_source.h"
#include "reference/reference_evaluator.h"

#include <algorithm>
#include <cmath>

namespace kiln::fuzz {
namespace {

// Fixed streams (see RandomSource(seed, index)): the weights of output k, the direction of parameter i.
constexpr std::uint64_t weight_stream = 0x7765696768747321ULL;
constexpr std::uint64_t direction_stream = 0x6469726563746e21ULL;

void store_float(runtime::Array& array, std::int64_t index, double value) {
  if (array.dtype == DType::f32)
    array.mutable_data<float>()[index] = static_cast<float>(value);
  else
    array.mutable_data<double>()[index] = value;
}

runtime::Array random_weights(const ir::Type& type, std::size_t output) {
  RandomSource random(weight_stream, output);
  runtime::Array weights = runtime::allocate_array(type.dtype, type.shape);
  for (std::int64_t i = 0; i < type.shape.numel(); ++i) store_float(weights, i, random.normal());
  return weights;
}

// Normal values, each scaled to its element's size clamped to [0.1, 1]: a step along the direction moves a small
// input by a fixed fraction of it, and a large one by no more than a small one, because the scale on which f
// curves is absolute for periodic and saturating ops (cos(53117) moved by 1e-4 of its size is cos of another
// number altogether).
runtime::Array random_direction(const runtime::Array& input, std::size_t parameter) {
  RandomSource random(direction_stream, parameter);
  runtime::Array direction = runtime::allocate_array(input.dtype, input.shape);
  for (std::int64_t i = 0; i < input.shape.numel(); ++i) {
    const double size = std::fabs(element(input, i));
    const double scale = std::isfinite(size) ? std::clamp(size, 0.1, 1.0) : 1.0;
    store_float(direction, i, random.normal() * scale);
  }
  return direction;
}

}  // namespace

ir::ValueId DerivativeCase::primal_value(ir::ValueId value) const {
  const auto primal_parameters = static_cast<ir::ValueId>(fuzz_case.graph.parameters.size()) - body_offset;
  if (value < primal_parameters) return value;
  if (value < primal_parameters + body_offset || value >= primal_end) return -1;
  return value - body_offset;
}

const runtime::Array& DerivativeCase::direction(std::size_t i) const {
  return fuzz_case.inputs[fuzz_case.inputs.size() - differentiated.size() + i];
}

bool has_float_path(const FuzzCase& primal) {
  bool float_parameter = false, float_output = false;
  for (ir::ValueId parameter : primal.graph.parameters)
    float_parameter = float_parameter || is_floating(primal.graph.type(parameter).dtype);
  for (ir::ValueId output : primal.graph.outputs)
    float_output = float_output || is_floating(primal.graph.type(output).dtype);
  return float_parameter && float_output;
}

DerivativeCase build_derivative_case(const FuzzCase& primal) {
  const ir::Graph& source = primal.graph;
  DerivativeCase result;
  ir::Graph& graph = result.fuzz_case.graph;
  std::vector<runtime::Array>& inputs = result.fuzz_case.inputs;
  graph.name = source.name;
  graph.host_functions = source.host_functions;

  std::vector<ir::ValueId> new_id(static_cast<std::size_t>(source.size()), -1);
  for (std::size_t position = 0; position < source.parameters.size(); ++position) {
    const ir::ValueId parameter = source.parameters[position];
    new_id[static_cast<std::size_t>(parameter)] = graph.add_parameter(source.type(parameter));
    inputs.push_back(primal.inputs[position]);
    if (is_floating(source.type(parameter).dtype)) result.differentiated.push_back(position);
  }
  std::vector<std::pair<ir::ValueId, ir::ValueId>> weighted;  // (primal output, its weight)
  for (std::size_t output = 0; output < source.outputs.size(); ++output) {
    const ir::Type& type = source.type(source.outputs[output]);
    if (!is_floating(type.dtype)) continue;
    weighted.emplace_back(source.outputs[output], graph.add_parameter(type));
    inputs.push_back(random_weights(type, output));
  }
  std::vector<ir::ValueId> directions;
  for (std::size_t position : result.differentiated) {
    directions.push_back(graph.add_parameter(source.type(source.parameters[position])));
    inputs.push_back(random_direction(primal.inputs[position], position));
  }
  result.body_offset = static_cast<ir::ValueId>(weighted.size() + directions.size());
  for (ir::ValueId id = 0; id < source.size(); ++id) {
    if (source.node(id).op == ir::Op::parameter) continue;
    ir::Node node = source.node(id);
    for (ir::ValueId& operand : node.operands) operand = new_id[static_cast<std::size_t>(operand)];
    new_id[static_cast<std::size_t>(id)] = graph.add(std::move(node));
  }
  result.primal_end = graph.size();

  autodiff::Emitter emitter(graph);
  ir::ValueId function = -1;
  for (const auto& [output, weight] : weighted) {
    const ir::ValueId product = emitter.multiply(new_id[static_cast<std::size_t>(output)], weight);
    std::vector<std::int64_t> axes;
    for (int axis = 0; axis < emitter.shape(product).rank(); ++axis) axes.push_back(axis);
    const ir::ValueId term = emitter.cast(emitter.reduce_sum(product, axes, false), DType::f64);
    function = function < 0 ? term : emitter.add(function, term);
  }
  if (function < 0) function = emitter.constant(0, DType::f64);
  result.function_value = function;

  std::vector<ir::ValueId> differentiated;
  for (std::size_t position : result.differentiated)
    differentiated.push_back(new_id[static_cast<std::size_t>(source.parameters[position])]);
  // Region from 0: every value depends on the parameters only through the nodes that use them, and the weights
  // and directions (parameters that are not differentiated) are constants of the derivative.
  const autodiff::Region region{0, nullptr, "kiln-fuzz --gradients", source.name};
  const autodiff::Linearization linearization = autodiff::linearize(graph, region, differentiated, {&function, 1});
  const ir::ValueId seed = emitter.constant(1, DType::f64);
  const std::vector<ir::ValueId> gradients = autodiff::transpose(graph, linearization, {&seed, 1});
  const std::vector<ir::ValueId> jvp = autodiff::apply_tangents(graph, linearization, directions);
  graph.outputs = {function, jvp.at(0)};
  graph.outputs.insert(graph.outputs.end(), gradients.begin(), gradients.end());
  ir::verify(graph);
  return result;
}

namespace {

// Every f32 value of `graph` and of its regions (a control node's parameters and results with them) made f64.
void promote_values(ir::Graph& graph) {
  for (ir::Node& node : graph.nodes) {
    if (node.type.dtype == DType::f32) node.type.dtype = DType::f64;
    for (ir::Graph& region : node.regions) promote_values(region);
  }
}

}  // namespace

FuzzCase promote_to_f64(const FuzzCase& primal) {
  FuzzCase result = primal;
  promote_values(result.graph);
  for (runtime::Array& input : result.inputs) {
    if (input.dtype != DType::f32) continue;
    runtime::Array wide = runtime::allocate_array(DType::f64, input.shape);
    for (std::int64_t i = 0; i < input.shape.numel(); ++i) wide.mutable_data<double>()[i] = element(input, i);
    input = std::move(wide);
  }
  ir::verify(result.graph);
  return result;
}

FuzzCase function_case(const DerivativeCase& derivative) {
  FuzzCase result = derivative.fuzz_case;
  result.graph.nodes.resize(static_cast<std::size_t>(derivative.function_value) + 1);
  result.graph.outputs.clear();
  for (ir::ValueId id = 0; id <= derivative.function_value; ++id) result.graph.outputs.push_back(id);
  return result;
}

std::vector<runtime::Array> inputs_at(const DerivativeCase& derivative, double t) {
  std::vector<runtime::Array> inputs = derivative.fuzz_case.inputs;
  for (std::size_t i = 0; i < derivative.differentiated.size(); ++i) {
    const runtime::Array& point = derivative.fuzz_case.inputs[derivative.differentiated[i]];
    const runtime::Array& direction = derivative.direction(i);
    runtime::Array moved = runtime::allocate_array(point.dtype, point.shape);
    for (std::int64_t k = 0; k < point.shape.numel(); ++k)
      store_float(moved, k, element(point, k) + t * element(direction, k));
    inputs[derivative.differentiated[i]] = std::move(moved);
  }
  return inputs;
}

DifferenceQuotients difference_quotients(const DerivativeCase& derivative) {
  const FuzzCase function = function_case(derivative);
  double scale = 0;
  auto f = [&](double t) {
    const std::vector<reference::Value> values = reference::evaluate(function.graph, inputs_at(derivative, t));
    const reference::Value& value = values.at(static_cast<std::size_t>(derivative.function_value));
    scale = std::max(scale, std::fabs(value.values.at(0)) + value.magnitude(0));
    return value.values.at(0);
  };
  DifferenceQuotients quotients;
  quotients.long_quotient = (f(long_step) - f(-long_step)) / (2 * long_step);
  quotients.short_quotient = (f(short_step) - f(-short_step)) / (2 * short_step);
  quotients.rounding = 16 * 0x1p-52 * scale / short_step;
  return quotients;
}

}  // namespace kiln::fuzz
