#include "autodiff/control_rules.h"

#include "autodiff/emitter.h"

#include <kiln/error.h>

#include <algorithm>
#include <array>
#include <optional>

namespace kiln::autodiff {
namespace {

std::size_t at(std::int64_t index) { return static_cast<std::size_t>(index); }

// A region being differentiated: a copy of it, to which the derivative adds parameters (tangents, cotangents) and
// nodes, finished as a region of the new control node once its parameters are put in the node's operand order.
class RegionCopy {
 public:
  RegionCopy(const ir::Graph& region, const char* suffix)
      : graph_(region), parameters_(region.parameters), outputs_(region.outputs) {
    graph_.name += suffix;
  }

  ir::Graph& graph() { return graph_; }
  // The original region's parameters and outputs, as values of the copy.
  ValueId parameter(std::size_t index) const { return parameters_.at(index); }
  const std::vector<ValueId>& parameters() const { return parameters_; }
  ValueId output(std::size_t index) const { return outputs_.at(index); }
  const std::vector<ValueId>& outputs() const { return outputs_; }
  const ir::Type& type(ValueId value) const { return graph_.type(value); }

  // A parameter of `type` added at the end of the copy (put in place by finish()).
  ValueId add_parameter(const ir::Type& type) { return graph_.add_parameter(type); }

  // The region: `parameters` (every parameter of the copy, in the new node's order) returning `outputs`, with what
  // no output needs removed.
  ir::Graph finish(std::vector<ValueId> parameters, std::vector<ValueId> outputs) && {
    if (parameters.size() != graph_.parameters.size())
      throw InternalError("autodiff", "a differentiated region lost a parameter", std::string());
    graph_.parameters = std::move(parameters);
    graph_.outputs = std::move(outputs);
    ir::canonicalize(graph_);
    ir::remove_dead_nodes(graph_);
    return std::move(graph_);
  }

 private:
  ir::Graph graph_;
  std::vector<ValueId> parameters_;
  std::vector<ValueId> outputs_;
};

// The derivative of a region's `outputs` with respect to its parameters `inputs`, linearized inside the copy (the
// same rules as for any graph; a region has no stop_gradient or custom_vjp marks: linearize_control refuses those).
Linearization linearize_region(RegionCopy& copy, const std::vector<ValueId>& inputs,
                               const std::vector<ValueId>& outputs, const std::string& api,
                               const std::string& location) {
  const Region region{0, nullptr, api, location};
  return linearize(copy.graph(), region, inputs, outputs);
}

// Parameters (or operands) `base`, split into consecutive groups ending at `ends` (carries, sequences, captures),
// with `extra[j]` (a tangent or cotangent of base[positions[j]]) appended to the group of base[positions[j]]: a
// derivative's node keeps each tangent in the group of its primal, as the node's layout requires.
std::vector<ValueId> grouped(const std::vector<ValueId>& base, const std::vector<std::size_t>& ends,
                             const std::vector<int>& positions, const std::vector<ValueId>& extra) {
  std::vector<ValueId> result;
  std::size_t begin = 0;
  for (std::size_t end : ends) {
    result.insert(result.end(), base.begin() + static_cast<std::ptrdiff_t>(begin),
                  base.begin() + static_cast<std::ptrdiff_t>(end));
    for (std::size_t j = 0; j < positions.size(); ++j)
      if (at(positions[j]) >= begin && at(positions[j]) < end) result.push_back(extra[j]);
    begin = end;
  }
  return result;
}

// A control node added to `graph`, typed by its regions; its results (the node, then a `result` node per other).
std::vector<ValueId> add_control(ir::Graph& graph, ir::Op op, std::vector<ValueId> operands,
                                 const ir::Attributes& attributes, std::vector<ir::Graph> regions,
                                 const std::string& location) {
  ir::Node node;
  node.op = op;
  node.operands = std::move(operands);
  node.attributes = attributes;
  node.location = location;
  node.regions = std::move(regions);
  return ir::add_control_node(graph, std::move(node));
}

// The region parameters of a node's operands: a cond's index has none.
int leading_operands(const ir::Node& node) { return node.op == ir::Op::cond ? 1 : 0; }

// The ends of the operand groups of a node's regions' parameters (carries, sequences, captures; a cond's are one).
std::vector<std::size_t> parameter_groups(const ir::Node& node, std::size_t parameters) {
  if (node.op == ir::Op::cond) return {parameters};
  const auto carries = at(node.attributes.carry_count), sequences = at(node.attributes.sequence_count);
  if (node.op == ir::Op::while_loop) return {carries, parameters};
  return {carries, carries + sequences, parameters};
}

// The call's tangent operands as positions among the regions' parameters.
std::vector<int> parameter_positions(const ir::Node& node, const ControlCall& call) {
  std::vector<int> positions;
  for (int operand : call.tangent_operands) positions.push_back(operand - leading_operands(node));
  return positions;
}

// One parameter per value of `of` (in `copy`), of its type: the tangents or cotangents the derivative reads.
std::vector<ValueId> parameters_like(RegionCopy& copy, const std::vector<ValueId>& of) {
  std::vector<ValueId> added;
  for (ValueId value : of) {
    const ir::Type type = copy.type(value);
    added.push_back(copy.add_parameter(type));
  }
  return added;
}

std::vector<ValueId> pick(const std::vector<ValueId>& values, const std::vector<int>& positions) {
  std::vector<ValueId> picked;
  for (int position : positions) picked.push_back(values.at(at(position)));
  return picked;
}

}  // namespace

// ---- Forward mode ----

// The JVP of a control node: the same node over regions that also take the tangents of the tangent operands and
// return (after what the node's layout needs of the originals: a loop's carries) the tangents of its tangent
// results. A loop carries each tangent beside its carry; a cond returns the tangents alone.
std::vector<ValueId> control_tangents(ir::Graph& graph, const ControlCall& call, const std::string& api,
                                      std::span<const ValueId> operand_tangents) {
  const ir::Node node = graph.node(call.node);  // a copy: adding nodes moves the list
  const std::vector<int> positions = parameter_positions(node, call);
  const std::vector<ValueId> tangents(operand_tangents.begin(), operand_tangents.end());
  const auto carries = static_cast<std::size_t>(node.attributes.carry_count);
  const bool loop = node.op != ir::Op::cond;

  std::vector<ir::Graph> regions;
  for (std::size_t index = 0; index < node.regions.size(); ++index) {
    RegionCopy copy(node.regions[index], ".jvp");
    const std::vector<ValueId> inputs = pick(copy.parameters(), positions);
    const std::vector<ValueId> tangent_parameters = parameters_like(copy, inputs);
    const std::vector<ValueId> parameters =
        grouped(copy.parameters(), parameter_groups(node, copy.parameters().size()), positions, tangent_parameters);
    if (node.op == ir::Op::while_loop && index == 0) {  // the condition: reads the carries only
      regions.push_back(std::move(copy).finish(parameters, copy.outputs()));
      continue;
    }
    const std::vector<ValueId> outputs = pick(copy.outputs(), call.tangent_results);
    const Linearization linearization = linearize_region(copy, inputs, outputs, api, call.location);
    std::vector<ValueId> new_outputs;
    if (loop) new_outputs.assign(copy.outputs().begin(), copy.outputs().begin() + static_cast<std::ptrdiff_t>(carries));
    for (ValueId tangent : apply_tangents(copy.graph(), linearization, tangent_parameters))
      new_outputs.push_back(tangent);
    regions.push_back(std::move(copy).finish(parameters, new_outputs));
  }

  std::vector<ValueId> operands(node.operands.begin() + leading_operands(node), node.operands.end());
  operands = grouped(operands, parameter_groups(node, operands.size()), positions, tangents);
  if (node.op == ir::Op::cond) operands.insert(operands.begin(), node.operands[0]);
  ir::Attributes attributes = node.attributes;
  const auto tangent_count = [&](std::size_t begin, std::size_t end) {
    return static_cast<std::int64_t>(std::count_if(
        positions.begin(), positions.end(), [&](int position) { return at(position) >= begin && at(position) < end; }));
  };
  if (loop) {
    attributes.carry_count += tangent_count(0, carries);
    attributes.sequence_count += tangent_count(carries, carries + at(node.attributes.sequence_count));
  }
  const std::vector<ValueId> results =
      add_control(graph, node.op, std::move(operands), attributes, std::move(regions), call.location);
  // A loop's results: its carries, the tangent carries, then (a scan's) stacked tangent outputs.
  return {results.begin() + static_cast<std::ptrdiff_t>(loop ? carries : 0), results.end()};
}

// ---- Reverse mode ----

namespace {

// The VJP of a cond: a cond of the branches' VJPs, each recomputing its branch from the operands.
std::vector<ValueId> cond_cotangents(ir::Graph& graph, const ir::Node& node, const ControlCall& call,
                                     const std::string& api, const std::vector<ValueId>& cotangents) {
  const std::vector<int> positions = parameter_positions(node, call);
  std::vector<ir::Graph> branches;
  for (const ir::Graph& branch : node.regions) {
    RegionCopy copy(branch, ".vjp");
    const std::vector<ValueId> outputs = pick(copy.outputs(), call.tangent_results);
    const std::vector<ValueId> cotangent_parameters = parameters_like(copy, outputs);
    const Linearization linearization =
        linearize_region(copy, pick(copy.parameters(), positions), outputs, api, call.location);
    const std::vector<ValueId> gradients = transpose(copy.graph(), linearization, cotangent_parameters);
    std::vector<ValueId> parameters = copy.parameters();
    parameters.insert(parameters.end(), cotangent_parameters.begin(), cotangent_parameters.end());
    branches.push_back(std::move(copy).finish(std::move(parameters), gradients));
  }
  std::vector<ValueId> operands = node.operands;
  operands.insert(operands.end(), cotangents.begin(), cotangents.end());
  return add_control(graph, ir::Op::cond, std::move(operands), node.attributes, std::move(branches), call.location);
}

// Residuals: the products a scan's backward step needs from its forward step (matmuls of what varies from step to
// step) are stacked by the forward scan rather than recomputed going back -- the step's elementwise work is
// recomputed from them, fused, for nothing. Within this budget for all of them (a 128-step GRU's two products
// take 100 MiB); beyond it every step is recomputed whole.
constexpr double residual_budget_bytes = 1024.0 * 1024 * 1024;

// The values of `step` (the backward step, a copy of the forward body with the VJP added) worth stacking in the
// forward scan: matmuls of the forward body itself (values below `body_size`, which the forward scan computes
// too) that the backward outputs need, that vary from step to step (they read a carry or an element, not the
// captures alone, which the hoisting pass moves out of the loop anyway) and read no cotangent.
std::vector<ValueId> stored_residuals(const ir::Graph& step, ValueId body_size, std::size_t varying_parameters,
                                      const std::vector<ValueId>& cotangent_parameters,
                                      const std::vector<ValueId>& outputs, std::int64_t length) {
  const auto size = static_cast<std::size_t>(step.size());
  std::vector<bool> reads_cotangent(size, false), varies(size, false), needed(size, false);
  for (ValueId parameter : cotangent_parameters) reads_cotangent[at(parameter)] = true;
  for (std::size_t position = 0; position < varying_parameters; ++position)
    varies[at(step.parameters[position])] = true;
  for (ValueId value = 0; value < step.size(); ++value)
    for (ValueId operand : step.node(value).operands) {
      reads_cotangent[at(value)] = reads_cotangent[at(value)] || reads_cotangent[at(operand)];
      varies[at(value)] = varies[at(value)] || varies[at(operand)];
    }
  for (ValueId output : outputs) needed[at(output)] = true;
  for (ValueId value = step.size() - 1; value >= 0; --value)
    if (needed[at(value)])
      for (ValueId operand : step.node(value).operands) needed[at(operand)] = true;
  std::vector<ValueId> stored;
  double bytes = 0;
  for (ValueId value = 0; value < body_size; ++value) {
    const ir::Node& node = step.node(value);
    if (node.op != ir::Op::matmul || !needed[at(value)] || !varies[at(value)] || reads_cotangent[at(value)]) continue;
    stored.push_back(value);
    bytes += static_cast<double>(node.type.shape.numel()) * static_cast<double>(size_of(node.type.dtype)) *
             static_cast<double>(length);
  }
  if (bytes > residual_budget_bytes) return {};
  return stored;
}

// Where the stacked values of a per-step operand are found: the forward scan's stacked carries or residuals, the
// scan's own sequence, or an output of the backward scan (index: among each kind).
struct StackedSource {
  enum class Kind { carry, sequence, residual, backward_output } kind = Kind::backward_output;
  std::size_t index = 0;
};

struct HoistedOperand {
  ValueId value = -1;  // in the backward step
  StackedSource source;
};

// A capture's per-step cotangent op(a_t) op(b_t) (rank 2), summed over the steps after the loop.
struct HoistedProduct {
  std::size_t capture = 0;  // among the tangent captures
  std::array<HoistedOperand, 2> operands;
  bool transpose_a = false, transpose_b = false;
};

std::optional<HoistedProduct> hoistable_product(RegionCopy& step, ValueId gradient, std::size_t capture) {
  const ir::Node& node = step.graph().node(gradient);
  if (node.op != ir::Op::matmul || node.type.shape.rank() != 2) return std::nullopt;
  HoistedProduct product;
  product.capture = capture;
  for (std::size_t index = 0; index < 2; ++index) {
    if (step.type(node.operands[index]).shape.rank() != 2) return std::nullopt;
    product.operands[index].value = node.operands[index];
  }
  product.transpose_a = node.attributes.transpose_a;
  product.transpose_b = node.attributes.transpose_b;
  return product;
}

StackedSource stacked_source(const RegionCopy& step, ValueId value, std::size_t carries, std::size_t sequences,
                             const std::vector<ValueId>& residual_parameters) {
  for (std::size_t position = 0; position < carries + sequences; ++position)
    if (step.parameter(position) == value)
      return position < carries ? StackedSource{StackedSource::Kind::carry, position}
                                : StackedSource{StackedSource::Kind::sequence, position - carries};
  for (std::size_t index = 0; index < residual_parameters.size(); ++index)
    if (residual_parameters[index] == value) return {StackedSource::Kind::residual, index};
  return {};
}

// sum over t of op(a_t) op(b_t), from a and b stacked along a leading axis of the steps: one product whose
// contraction runs through every step (op(a) [m, k] per step is [m, steps * k] side by side).
ValueId sum_of_products(Emitter& emit, const HoistedProduct& product, ValueId a, ValueId b) {
  const Shape a_shape = emit.shape(a), b_shape = emit.shape(b);  // [steps, rows, columns]
  const std::int64_t steps = a_shape[0];
  // op(a_t) = a_t^T: the steps' a_t one under the other, [steps * k, m], still transposed. Else [m, steps * k].
  const ValueId left = product.transpose_a
                           ? emit.reshape(a, Shape({steps * a_shape[1], a_shape[2]}))
                           : emit.reshape(emit.transpose(a, {1, 0, 2}), Shape({a_shape[1], steps * a_shape[2]}));
  const ValueId right = product.transpose_b
                            ? emit.reshape(emit.transpose(b, {1, 0, 2}), Shape({b_shape[1], steps * b_shape[2]}))
                            : emit.reshape(b, Shape({steps * b_shape[1], b_shape[2]}));
  return emit.matmul(left, right, product.transpose_a, product.transpose_b);
}

// The VJP of a scan: a scan that stacks each step's carries and products (the residuals), then a scan in the other
// direction whose body recomputes the rest of the step from them and applies the step's VJP. Its carries are the
// cotangents of the float carries and the sums of the captures' cotangents; it stacks those of the sequences.
std::vector<ValueId> scan_cotangents(ir::Graph& graph, const ir::Node& node, const ControlCall& call,
                                     const std::string& api, const std::vector<ValueId>& cotangents) {
  const ir::Graph& body = node.regions.at(0);
  const auto carries = at(node.attributes.carry_count), sequences = at(node.attributes.sequence_count);
  const std::size_t outputs = body.outputs.size();

  // The tangent operands by group: float carries (all of them), sequences, captures.
  std::vector<int> carry_positions, sequence_positions, capture_positions;
  for (int position : call.tangent_operands)
    (at(position) < carries               ? carry_positions
     : at(position) < carries + sequences ? sequence_positions
                                          : capture_positions)
        .push_back(position);
  std::vector<int> carry_results, output_results;  // tangent results: float carries, then stacked outputs
  std::vector<ValueId> carry_cotangents, output_cotangents;
  for (std::size_t j = 0; j < call.tangent_results.size(); ++j) {
    const bool is_carry = at(call.tangent_results[j]) < carries;
    (is_carry ? carry_results : output_results).push_back(call.tangent_results[j]);
    (is_carry ? carry_cotangents : output_cotangents).push_back(cotangents[j]);
  }

  // The backward step: the forward body with its VJP.
  RegionCopy step(body, ".vjp");
  Emitter emitter(step.graph());
  emitter.set_location(call.location);
  const std::vector<ValueId> carry_parameters = parameters_like(step, pick(step.outputs(), carry_results));
  const std::vector<ValueId> output_parameters = parameters_like(step, pick(step.outputs(), output_results));
  std::vector<ValueId> step_cotangents = carry_parameters;
  step_cotangents.insert(step_cotangents.end(), output_parameters.begin(), output_parameters.end());
  const Linearization linearization = linearize_region(step, pick(step.parameters(), call.tangent_operands),
                                                       pick(step.outputs(), call.tangent_results), api, call.location);
  // The float carries', the sequences' elements', the captures' cotangents, as call.tangent_operands.
  std::vector<ValueId> gradients = transpose(step.graph(), linearization, step_cotangents);
  const std::size_t first_capture = carry_positions.size() + sequence_positions.size();

  // The residuals stacked by the forward scan; in the backward step, each a parameter in place of its product.
  const std::vector<ValueId> stored = stored_residuals(step.graph(), body.size(), carries + sequences, step_cotangents,
                                                       gradients, node.attributes.length);
  std::vector<ValueId> residual_parameters;
  for (ValueId value : stored) {
    const ir::Type type = step.type(value);
    const ValueId parameter = step.add_parameter(type);
    for (ir::Node& reader : step.graph().nodes)
      std::replace(reader.operands.begin(), reader.operands.end(), value, parameter);
    std::replace(gradients.begin(), gradients.end(), value, parameter);
    residual_parameters.push_back(parameter);
  }

  // A capture's cotangent that is one product a_t b_t per step (a weight's: x_t^T g_t) sums over the steps as one
  // product of the stacked operands after the loop, instead of a carry that each step reads and writes whole.
  // Operands the loops stack already (this step's carries, elements, residuals) are read from there; others the
  // backward step stacks.
  std::vector<HoistedProduct> hoisted;
  std::vector<ValueId> sums,
      step_outputs(gradients.begin(), gradients.begin() + static_cast<std::ptrdiff_t>(carry_positions.size()));
  std::vector<ValueId> stacked_outputs;  // what the backward step stacks for the hoisted products
  for (std::size_t j = 0; j < capture_positions.size(); ++j) {
    const ValueId gradient = gradients[first_capture + j];
    if (std::optional<HoistedProduct> product = hoistable_product(step, gradient, j)) {
      for (HoistedOperand& operand : product->operands) {
        operand.source = stacked_source(step, operand.value, carries, sequences, residual_parameters);
        if (operand.source.kind == StackedSource::Kind::backward_output) {
          operand.source.index = stacked_outputs.size();
          stacked_outputs.push_back(operand.value);
        }
      }
      hoisted.push_back(*product);
      continue;
    }
    sums.push_back(step.add_parameter(step.type(step.parameter(at(capture_positions[j])))));
    step_outputs.push_back(emitter.add(sums.back(), gradient));
  }
  step_outputs.insert(step_outputs.end(), gradients.begin() + static_cast<std::ptrdiff_t>(carry_positions.size()),
                      gradients.begin() + static_cast<std::ptrdiff_t>(first_capture));
  step_outputs.insert(step_outputs.end(), stacked_outputs.begin(), stacked_outputs.end());

  // The forward scan again, stacking each step's carries and residuals too (merge-loops folds the traced scan into
  // it): what the backward steps start from.
  std::vector<ValueId> stacked_carries, stacked_residuals;
  if (carries + stored.size() > 0) {
    RegionCopy forward(body, ".residuals");
    std::vector<ValueId> forward_outputs = forward.outputs();
    for (std::size_t index = 0; index < carries; ++index) forward_outputs.push_back(forward.parameter(index));
    forward_outputs.insert(forward_outputs.end(), stored.begin(), stored.end());  // the copy keeps the body's ids
    std::vector<ir::Graph> regions;
    regions.push_back(std::move(forward).finish(forward.parameters(), forward_outputs));
    const std::vector<ValueId> results =
        add_control(graph, ir::Op::scan_loop, node.operands, node.attributes, std::move(regions), call.location);
    const auto carries_begin = results.begin() + static_cast<std::ptrdiff_t>(outputs);
    stacked_carries.assign(carries_begin, carries_begin + static_cast<std::ptrdiff_t>(carries));
    stacked_residuals.assign(carries_begin + static_cast<std::ptrdiff_t>(carries), results.end());
  }

  // Parameters: the carries' cotangents and the sums (the backward carries), this step's carries, element,
  // outputs' cotangents and residuals (the backward sequences), the captures.
  const std::vector<ValueId>& original = step.parameters();
  std::vector<ValueId> step_parameters = carry_parameters;
  step_parameters.insert(step_parameters.end(), sums.begin(), sums.end());
  step_parameters.insert(step_parameters.end(), original.begin(),
                         original.begin() + static_cast<std::ptrdiff_t>(carries + sequences));
  step_parameters.insert(step_parameters.end(), output_parameters.begin(), output_parameters.end());
  step_parameters.insert(step_parameters.end(), residual_parameters.begin(), residual_parameters.end());
  step_parameters.insert(step_parameters.end(), original.begin() + static_cast<std::ptrdiff_t>(carries + sequences),
                         original.end());
  std::vector<ir::Graph> regions;
  regions.push_back(std::move(step).finish(std::move(step_parameters), std::move(step_outputs)));

  Emitter outer(graph);
  outer.set_location(call.location);
  std::vector<ValueId> operands = carry_cotangents;
  for (std::size_t j = 0; j < capture_positions.size(); ++j)
    if (std::none_of(hoisted.begin(), hoisted.end(),
                     [&](const HoistedProduct& product) { return product.capture == j; }))
      operands.push_back(outer.zeros(graph.type(node.operands.at(at(capture_positions[j])))));
  operands.insert(operands.end(), stacked_carries.begin(), stacked_carries.end());
  operands.insert(operands.end(), node.operands.begin() + static_cast<std::ptrdiff_t>(carries),
                  node.operands.begin() + static_cast<std::ptrdiff_t>(carries + sequences));
  operands.insert(operands.end(), output_cotangents.begin(), output_cotangents.end());
  operands.insert(operands.end(), stacked_residuals.begin(), stacked_residuals.end());
  operands.insert(operands.end(), node.operands.begin() + static_cast<std::ptrdiff_t>(carries + sequences),
                  node.operands.end());
  ir::Attributes attributes = node.attributes;
  attributes.carry_count = static_cast<std::int64_t>(carry_positions.size() + sums.size());
  attributes.sequence_count =
      static_cast<std::int64_t>(carries + sequences + output_parameters.size() + residual_parameters.size());
  attributes.reverse = !node.attributes.reverse;
  const std::vector<ValueId> results =
      add_control(graph, ir::Op::scan_loop, std::move(operands), attributes, std::move(regions), call.location);
  // Results: the float carries' cotangents, the sums, the sequences' cotangents and the hoisted products' operands
  // (stacked). Returned as tangent_operands: carries, sequences, captures.
  const std::size_t after_sums = carry_positions.size() + sums.size();
  std::vector<ValueId> operand_cotangents(results.begin(),
                                          results.begin() + static_cast<std::ptrdiff_t>(carry_positions.size()));
  operand_cotangents.insert(operand_cotangents.end(), results.begin() + static_cast<std::ptrdiff_t>(after_sums),
                            results.begin() + static_cast<std::ptrdiff_t>(after_sums + sequence_positions.size()));
  const std::size_t first_stacked_output = after_sums + sequence_positions.size();
  std::size_t next_sum = carry_positions.size();
  for (std::size_t j = 0; j < capture_positions.size(); ++j) {
    const auto product = std::find_if(hoisted.begin(), hoisted.end(),
                                      [&](const HoistedProduct& candidate) { return candidate.capture == j; });
    if (product == hoisted.end()) {
      operand_cotangents.push_back(results.at(next_sum++));
      continue;
    }
    std::vector<ValueId> stacked;
    for (const HoistedOperand& operand : product->operands) {
      const StackedSource& source = operand.source;
      switch (source.kind) {
        case StackedSource::Kind::carry:
          stacked.push_back(stacked_carries.at(source.index));
          break;
        case StackedSource::Kind::sequence:
          stacked.push_back(node.operands.at(carries + source.index));
          break;
        case StackedSource::Kind::residual:
          stacked.push_back(stacked_residuals.at(source.index));
          break;
        case StackedSource::Kind::backward_output:
          stacked.push_back(results.at(first_stacked_output + source.index));
          break;
      }
    }
    operand_cotangents.push_back(sum_of_products(outer, *product, stacked[0], stacked[1]));
  }
  return operand_cotangents;
}

}  // namespace

std::vector<Tangent> linearize_control(const ir::Graph& graph, LinearProgram& program, const Region& region,
                                       ValueId value, std::span<const Tangent> operand_tangents) {
  const ir::Node& node = graph.node(value);
  const std::string where =
      std::string(ir::name(node.op)) + (node.location.empty() ? "" : " (at " + node.location + ")");
  if (region.marks && region.marks->marked_controls.contains(value))
    throw ValueError(region.api,
                     where +
                         ": its branches or body call kiln::stop_gradient or kiln::custom_vjp, which a derivative "
                         "through control flow does not see yet: call them outside the construct",
                     region.location);
  const std::vector<ir::Type> results = ir::result_types(graph, value);
  ControlCall call;
  call.node = value;
  call.location = node.location;
  const bool loop = node.op != ir::Op::cond;
  for (std::size_t operand = at(leading_operands(node)); operand < node.operands.size(); ++operand) {
    if (!is_floating(graph.type(node.operands[operand]).dtype)) continue;
    // A loop's float carry may gain a tangent from the body even where its initial value has none.
    const bool carried = loop && operand < at(node.attributes.carry_count);
    if (!carried && operand_tangents[operand].is_zero()) continue;
    call.tangent_operands.push_back(static_cast<int>(operand));
    call.operand_tangents.push_back(operand_tangents[operand]);
  }
  for (std::size_t result = 0; result < results.size(); ++result)
    if (is_floating(results[result].dtype)) call.tangent_results.push_back(static_cast<int>(result));
  const ControlCall& recorded = program.control_call(std::move(call), results);
  std::vector<Tangent> tangents(results.size());
  for (std::size_t j = 0; j < recorded.tangent_results.size(); ++j)
    tangents[at(recorded.tangent_results[j])] = recorded.outputs[j];
  return tangents;
}

std::vector<ValueId> control_cotangents(ir::Graph& graph, const ControlCall& call, const std::string& api,
                                        const std::string& location, std::span<const ValueId> result_cotangents) {
  const ir::Node node = graph.node(call.node);  // a copy: adding nodes moves the list
  if (node.op == ir::Op::while_loop)
    throw ValueError(api,
                     "while_loop" + (node.location.empty() ? std::string() : " (at " + node.location + ")") +
                         " has no reverse-mode derivative: its trip count is known only once it has run, so the "
                         "steps to go back through are not stored (as in JAX). Use fori_loop with int bounds or "
                         "scan for a loop to differentiate, or jvp (forward mode)",
                     location);
  const std::vector<ir::Type> types = ir::result_types(graph, call.node);
  Emitter emitter(graph);
  emitter.set_location(call.location);
  std::vector<ValueId> cotangents;
  for (std::size_t j = 0; j < call.tangent_results.size(); ++j)
    cotangents.push_back(result_cotangents[j] >= 0 ? result_cotangents[j]
                                                   : emitter.zeros(types.at(at(call.tangent_results[j]))));
  if (node.op == ir::Op::cond) return cond_cotangents(graph, node, call, api, cotangents);
  return scan_cotangents(graph, node, call, api, cotangents);
}

}  // namespace kiln::autodiff
