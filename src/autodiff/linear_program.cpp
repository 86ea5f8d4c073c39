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
  node.custom_call = call;
  node.custom_position = position;
  node.custom_inputs = std::move(input_positions);
  return push(std::move(node));
}

}  // namespace kiln::autodiff
