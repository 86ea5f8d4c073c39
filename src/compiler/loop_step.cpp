#include "compiler/loop_step.h"

#include <kiln/error.h>

namespace kiln::compiler {

ir::Graph loop_step(const ir::Graph& graph, ir::ValueId loop) {
  const ir::Node& node = graph.node(loop);
  if (node.op != ir::Op::while_loop && node.op != ir::Op::scan_loop)
    throw InternalError("compiled loop", std::string(ir::name(node.op)) + " is not a loop", node.location);
  const ir::Graph& body = node.regions.back();
  ir::Graph step = body;
  step.name = graph.name + ".loop_" + std::to_string(loop);
  if (node.op == ir::Op::scan_loop) return step;
  // The condition's parameters are the carries and the captures: the body's outputs for the first, the step's own
  // parameters for the others (a while_loop's regions take the same parameters).
  const ir::Graph& condition = node.regions.front();
  const auto carried = static_cast<std::size_t>(node.attributes.carry_count);
  std::vector<ir::ValueId> mapped(static_cast<std::size_t>(condition.size()), -1);
  for (std::size_t position = 0; position < condition.parameters.size(); ++position)
    mapped[static_cast<std::size_t>(condition.parameters[position])] =
        position < carried ? body.outputs.at(position) : body.parameters.at(position);
  for (ir::ValueId value = 0; value < condition.size(); ++value) {
    if (mapped[static_cast<std::size_t>(value)] >= 0) continue;
    ir::Node copy = condition.node(value);
    for (ir::ValueId& operand : copy.operands) operand = mapped[static_cast<std::size_t>(operand)];
    mapped[static_cast<std::size_t>(value)] = step.add(std::move(copy));
  }
  // A host_call's index into host_functions is not remapped: a region calling the host is not compiled at all.
  step.outputs.push_back(mapped[static_cast<std::size_t>(condition.outputs.at(0))]);
  return step;
}

}  // namespace kiln::compiler
