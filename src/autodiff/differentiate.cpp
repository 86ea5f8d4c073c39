#include "autodiff/differentiate.h"

#include "autodiff/control_rules.h"
#include "autodiff/rules.h"

#include <kiln/error.h>

#include <algorithm>
#include <map>
#include <optional>

namespace kiln::autodiff {
namespace {

std::size_t at(ValueId value) { return static_cast<std::size_t>(value); }

// Which nodes from region.begin on the outputs depend on: only those are linearized. A custom_vjp call's outputs
// depend on its inputs, through the user's backward function rather than through the nodes that compute them.
std::vector<bool> needed_nodes(const ir::Graph& graph, const Region& region, std::span<const ValueId> outputs) {
  std::vector<bool> needed(at(graph.size()), false);
  for (ValueId output : outputs) needed[at(output)] = true;
  for (ValueId value = graph.size() - 1; value >= region.begin; --value) {
    if (!needed[at(value)]) continue;
    for (ValueId operand : graph.node(value).operands) needed[at(operand)] = true;
    if (!region.marks) continue;
    if (auto found = region.marks->custom_outputs.find(value); found != region.marks->custom_outputs.end())
      for (ValueId input : region.marks->custom[static_cast<std::size_t>(found->second.first)].inputs)
        needed[at(input)] = true;
  }
  return needed;
}

[[noreturn]] void refuse(const Region& region, const ir::Node& node) {
  throw ValueError(region.api,
                   std::string(ir::name(node.op)) + (node.location.empty() ? "" : " (at " + node.location + ")") +
                       " has no derivative: kiln cannot see inside host code. Give it one with kiln::custom_vjp, or "
                       "pass its inputs through kiln::stop_gradient if no derivative flows through it",
                   region.location);
}

// A softmax as nn::softmax spells it, y = e / reduce_sum(e, axes, keepdims) with e = exp(z): z, else nothing.
std::optional<ValueId> softmax_exponent(const ir::Graph& graph, const ir::Node& node) {
  if (node.op != ir::Op::div) return std::nullopt;
  const ValueId exponential = node.operands[0];
  const ir::Node& sum = graph.node(node.operands[1]);
  if (graph.node(exponential).op != ir::Op::exp || sum.op != ir::Op::reduce_sum || sum.operands[0] != exponential ||
      !sum.attributes.keepdims)
    return std::nullopt;
  return graph.node(exponential).operands[0];
}

// The softmax's own derivative, dy = y (dz - sum(y dz)), in terms of y alone: its backward, y (g - sum(g y)), reads
// the probabilities and the cotangent, where the chain rule through the division, the sum and exp also read the
// exponentials (recomputed from z) and divided by the sum twice (block-train's attention: its backward read the
// scores, the probabilities and the cotangent, 8 x 1024 x 1024 each).
Tangent softmax_tangent(JvpContext& context, Tangent exponent_tangent, ir::Attributes sum_attributes) {
  const ValueId probabilities = context.result();
  const Tangent weighted = context.scale(exponent_tangent, probabilities);
  const Tangent total = context.linear(ir::Op::reduce_sum, {LinearOperand::of(weighted)}, sum_attributes);
  return context.subtract(weighted, context.scale(total, probabilities));
}

}  // namespace

Linearization linearize(ir::Graph& graph, const Region& region, std::span<const ValueId> inputs,
                        std::span<const ValueId> outputs) {
  Linearization result(graph);
  result.marks = region.marks;
  result.api = region.api;
  result.location = region.location;
  LinearProgram& program = result.program;
  const ValueId end = graph.size();
  const std::vector<bool> needed = needed_nodes(graph, region, outputs);

  std::vector<Tangent> tangents(at(end));
  std::vector<bool> is_input(at(end), false);
  for (std::size_t position = 0; position < inputs.size(); ++position) {
    const ir::Type& type = graph.type(inputs[position]);
    if (!is_floating(type.dtype) || inputs[position] < region.begin)
      throw InternalError("autodiff", "an input is not a float value made in the region", region.location);
    tangents[at(inputs[position])] = program.input(static_cast<int>(position), type);
    is_input[at(inputs[position])] = true;
    result.input_types.push_back(type);
  }

  Emitter emitter(graph);
  std::map<ValueId, std::vector<Tangent>> result_tangents;  // per control node, per result
  for (ValueId value = region.begin; value < end; ++value) {
    if (is_input[at(value)] || !needed[at(value)]) continue;
    if (region.marks && region.marks->stopped.contains(value)) continue;
    // A copy: the rules add nodes, which may move the graph's node list.
    const ir::Node node = graph.node(value);
    if (region.marks) {
      if (auto found = region.marks->custom_outputs.find(value); found != region.marks->custom_outputs.end()) {
        const auto [call, position] = found->second;
        std::vector<LinearOperand> operands;
        std::vector<int> input_positions;
        const std::vector<ValueId>& call_inputs = region.marks->custom[static_cast<std::size_t>(call)].inputs;
        for (std::size_t input = 0; input < call_inputs.size(); ++input) {
          const Tangent tangent = tangents[at(call_inputs[input])];
          if (tangent.is_zero()) continue;
          operands.push_back(LinearOperand::of(tangent));
          input_positions.push_back(static_cast<int>(input));
        }
        if (!operands.empty())
          tangents[at(value)] =
              program.custom_output(call, position, node.type, std::move(operands), std::move(input_positions));
        continue;
      }
    }
    if (node.op == ir::Op::result) {  // the control node it reads (result 0's tangent may be zero) stored it
      if (const auto found = result_tangents.find(node.operands[0]); found != result_tangents.end())
        tangents[at(value)] = found->second.at(at(node.attributes.index));
      continue;
    }
    std::vector<Tangent> operand_tangents;
    bool any = false;
    for (ValueId operand : node.operands) {
      operand_tangents.push_back(tangents[at(operand)]);
      any = any || !operand_tangents.back().is_zero();
    }
    if (!any) continue;
    // Control flow: every result's tangent at once (result 0 may be an integer while another carries one).
    if (ir::has_regions(node.op)) {
      result_tangents[value] = linearize_control(graph, program, region, value, operand_tangents);
      tangents[at(value)] = result_tangents[value].at(0);
      continue;
    }
    if (!is_floating(node.type.dtype)) continue;  // integers and bools carry no tangent
    if (const std::optional<ValueId> exponent = softmax_exponent(graph, node)) {
      if (tangents[at(*exponent)].is_zero()) continue;
      const ir::Attributes sum_attributes = graph.node(node.operands[1]).attributes;  // a copy: nodes are added
      emitter.set_location(node.location);
      JvpContext context(emitter, program, node, value, {});
      tangents[at(value)] = softmax_tangent(context, tangents[at(*exponent)], sum_attributes);
      continue;
    }
    const OpRule* rule = rule_for(node.op);
    if (!rule)
      throw InternalError(region.api, std::string(ir::name(node.op)) + " has no entry in the derivative rules",
                          region.location);
    if (rule->derivative == Derivative::refused) refuse(region, node);
    if (rule->derivative == Derivative::none) continue;
    emitter.set_location(node.location);
    JvpContext context(emitter, program, node, value, std::move(operand_tangents));
    Tangent tangent = rule->jvp(context);
    if (!tangent.is_zero() && !(program.type(tangent) == node.type)) {
      if (program.type(tangent).dtype != node.type.dtype)
        throw InternalError(region.api, "the derivative of " + std::string(ir::name(node.op)) + " has another dtype",
                            node.location);
      // Elementwise ops broadcast: a tangent of one operand alone may have that operand's shape.
      tangent = program.apply(ir::Op::broadcast_to, {LinearOperand::of(tangent)}, {}, node.type, node.location);
    }
    tangents[at(value)] = tangent;
  }

  for (ValueId output : outputs) {
    result.output_types.push_back(graph.type(output));
    result.output_tangents.push_back(output < end ? tangents[at(output)] : Tangent{});
  }
  return result;
}

namespace {

// A custom_vjp call's transpose: its backward function, given the cotangents of all its outputs at once.
void transpose_custom_call(Emitter& emitter, const Linearization& linearization, const LinearNode& node,
                           std::vector<ValueId>& cotangents) {
  const trace::CustomDerivative& call = linearization.marks->custom[static_cast<std::size_t>(node.call)];
  std::vector<ValueId> output_cotangents;
  for (std::size_t position = 0; position < call.outputs.size(); ++position) {
    ValueId cotangent = -1;
    for (int id = 0; id < linearization.program.size(); ++id) {
      const LinearNode& other = linearization.program.nodes()[static_cast<std::size_t>(id)];
      if (other.kind == LinearKind::custom_output && other.call == node.call &&
          other.position == static_cast<int>(position))
        cotangent = cotangents[static_cast<std::size_t>(id)];
    }
    output_cotangents.push_back(cotangent >= 0 ? cotangent : emitter.zeros(emitter.type(call.outputs[position])));
  }
  const std::vector<ValueId> input_cotangents = call.backward(output_cotangents);
  for (std::size_t operand = 0; operand < node.operands.size(); ++operand)
    accumulate(emitter, cotangents, Tangent{node.operands[operand].id},
               input_cotangents.at(static_cast<std::size_t>(node.custom_inputs[operand])));
}

}  // namespace

std::vector<ValueId> transpose(ir::Graph& graph, const Linearization& linearization,
                               std::span<const ValueId> output_cotangents) {
  const LinearProgram& program = linearization.program;
  std::vector<ValueId> cotangents(static_cast<std::size_t>(program.size()), -1);
  Emitter emitter(graph);
  emitter.set_location(linearization.location);
  for (std::size_t output = 0; output < output_cotangents.size(); ++output)
    if (!linearization.output_tangents[output].is_zero())
      accumulate(emitter, cotangents, linearization.output_tangents[output], output_cotangents[output]);

  std::vector<bool> custom_done(linearization.marks ? linearization.marks->custom.size() : 0, false);
  std::vector<bool> control_done(program.control_count(), false);
  for (int id = program.size() - 1; id >= 0; --id) {
    const ValueId cotangent = cotangents[static_cast<std::size_t>(id)];
    const LinearNode& node = program.nodes()[static_cast<std::size_t>(id)];
    if (cotangent < 0 || node.kind == LinearKind::input) continue;
    emitter.set_location(node.location);
    if (node.kind == LinearKind::control_output) {
      // As for a custom call: from the last of the node's outputs with a cotangent on, all of theirs are complete.
      if (control_done[static_cast<std::size_t>(node.call)]) continue;
      control_done[static_cast<std::size_t>(node.call)] = true;
      const ControlCall& call = program.control(node.call);
      std::vector<ValueId> result_cotangents;
      for (Tangent output : call.outputs) result_cotangents.push_back(cotangents[static_cast<std::size_t>(output.id)]);
      const std::vector<ValueId> operand_cotangents =
          control_cotangents(graph, call, linearization.api, linearization.location, result_cotangents);
      for (std::size_t operand = 0; operand < call.operand_tangents.size(); ++operand)
        if (!call.operand_tangents[operand].is_zero())
          accumulate(emitter, cotangents, call.operand_tangents[operand], operand_cotangents[operand]);
      continue;
    }
    if (node.kind == LinearKind::custom_output) {
      // The call's outputs are consecutive: from the last of them on, all of their cotangents are complete.
      if (custom_done[static_cast<std::size_t>(node.call)]) continue;
      custom_done[static_cast<std::size_t>(node.call)] = true;
      emitter.set_location(linearization.location);
      transpose_custom_call(emitter, linearization, node, cotangents);
      continue;
    }
    TransposeContext context(emitter, program, node, cotangent, cotangents);
    rule_for(node.op)->transpose(context);
  }

  emitter.set_location(linearization.location);
  std::vector<ValueId> gradients;
  for (std::size_t input = 0; input < linearization.input_types.size(); ++input) {
    const ValueId cotangent = cotangents[input];  // the inputs' tangents are the program's first nodes
    gradients.push_back(cotangent >= 0 ? cotangent : emitter.zeros(linearization.input_types[input]));
  }
  return gradients;
}

std::vector<ValueId> apply_tangents(ir::Graph& graph, const Linearization& linearization,
                                    std::span<const ValueId> input_tangents) {
  const LinearProgram& program = linearization.program;
  const auto size = static_cast<std::size_t>(program.size());
  std::vector<bool> needed(size, false);
  for (Tangent tangent : linearization.output_tangents)
    if (!tangent.is_zero()) needed[static_cast<std::size_t>(tangent.id)] = true;
  for (std::size_t id = size; id-- > 0;)
    if (needed[id])
      for (const LinearOperand& operand : program.nodes()[id].operands)
        if (operand.is_tangent) needed[static_cast<std::size_t>(operand.id)] = true;

  Emitter emitter(graph);
  std::vector<ValueId> values(size, -1);
  std::map<int, std::vector<ValueId>> control_values;  // per control call, its tangent results
  for (std::size_t id = 0; id < size; ++id) {
    if (!needed[id]) continue;
    const LinearNode& node = program.nodes()[id];
    switch (node.kind) {
      case LinearKind::input:
        values[id] = input_tangents[static_cast<std::size_t>(node.input)];
        break;
      case LinearKind::custom_output:
        throw ValueError(linearization.api,
                         "a kiln::custom_vjp function is in the way, and it has a reverse-mode derivative only (as "
                         "in JAX): use kiln::vjp or kiln::grad through it",
                         linearization.location);
      case LinearKind::control_output: {
        std::vector<ValueId>& results = control_values[node.call];
        const ControlCall& call = program.control(node.call);
        if (results.empty()) {
          std::vector<ValueId> operand_tangents;
          for (std::size_t operand = 0; operand < call.operand_tangents.size(); ++operand) {
            const Tangent tangent = call.operand_tangents[operand];
            const ValueId primal =
                graph.node(call.node).operands[static_cast<std::size_t>(call.tangent_operands[operand])];
            operand_tangents.push_back(tangent.is_zero() ? emitter.zeros(graph.type(primal))
                                                         : values[static_cast<std::size_t>(tangent.id)]);
          }
          results = control_tangents(graph, call, linearization.api, operand_tangents);
        }
        const auto output = std::find_if(call.outputs.begin(), call.outputs.end(),
                                         [&](Tangent tangent) { return tangent.id == static_cast<std::int32_t>(id); });
        values[id] = results.at(static_cast<std::size_t>(output - call.outputs.begin()));
        break;
      }
      case LinearKind::op: {
        std::vector<ValueId> operands;
        for (const LinearOperand& operand : node.operands)
          operands.push_back(operand.is_tangent ? values[static_cast<std::size_t>(operand.id)] : operand.id);
        emitter.set_location(node.location);
        values[id] = emitter.apply(node.op, std::move(operands), node.attributes, node.type);
        break;
      }
    }
  }
  emitter.set_location(linearization.location);
  std::vector<ValueId> tangents;
  for (std::size_t output = 0; output < linearization.output_tangents.size(); ++output) {
    const Tangent tangent = linearization.output_tangents[output];
    tangents.push_back(tangent.is_zero() ? emitter.zeros(linearization.output_types[output])
                                         : values[static_cast<std::size_t>(tangent.id)]);
  }
  return tangents;
}

}  // namespace kiln::autodiff
