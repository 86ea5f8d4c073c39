#include "autodiff/linear_program.h"

#include "ir/type_rules.h"

namespace kiln::autodiff {

Tangent LinearProgram::push(LinearNode node) {
  nodes_.push_back(std::move(node));
  return Tangent{static_cast<std::int32_t>(nodes_.size() - 1)};
}

Tangent LinearProgram::input(int position, const ir::Type& type) {
  LinearNode node;
  node.kind = LinearKind::input;
  node.type = type;
  node.input = position;
  return push(std::move(node));
}

Tangent LinearProgram::apply(ir::Op op, std::vector<LinearOperand> operands, const ir::Attributes& attributes,
                             ir::Type declared, const std::string& location) {
  std::vector<ir::Type> types;
  types.reserve(operands.size());
  for (const LinearOperand& operand : operands) types.push_back(operand_type(operand));
  LinearNode node;
  node.op = op;
  node.type = ir::infer_type(op, attributes, types, declared, location);
  node.attributes = attributes;
  node.operands = std::move(operands);
  node.location = location;
  return push(std::move(node));
}

Tangent LinearProgram::custom_output(int call, int position, const ir::Type& type, std::vector<LinearOperand> inputs,
                                     std::vector<int> input_positions) {
  LinearNode node;
  node.kind = LinearKind::custom_output;
  node.type = type;
  node.operands = std::move(inputs);
  node.call = call;
  node.position = position;
  node.custom_inputs = std::move(input_positions);
  return push(std::move(node));
}

const ControlCall& LinearProgram::control_call(ControlCall call, const std::vector<ir::Type>& result_types) {
  const int index = static_cast<int>(controls_.size());
  std::vector<LinearOperand> operands;
  for (Tangent tangent : call.operand_tangents)
    if (!tangent.is_zero()) operands.push_back(LinearOperand::of(tangent));
  call.outputs.clear();
  for (int result : call.tangent_results) {
    LinearNode node;
    node.kind = LinearKind::control_output;
    node.type = result_types.at(static_cast<std::size_t>(result));
    node.operands = operands;
    node.call = index;
    node.position = result;
    node.location = call.location;
    call.outputs.push_back(push(std::move(node)));
  }
  controls_.push_back(std::move(call));
  return controls_.back();
}

}  // namespace kiln::autodiff
