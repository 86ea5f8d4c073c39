#include "compiler/merge_loops.h"

#include <algorithm>

namespace kiln::compiler {
namespace {

bool same_nodes(const ir::Graph& a, const ir::Graph& b);

bool same_node(const ir::Node& a, const ir::Node& b) {
  if (a.op != b.op || !(a.type == b.type) || a.operands != b.operands || !(a.attributes == b.attributes) ||
      a.regions.size() != b.regions.size())
    return false;
  for (std::size_t index = 0; index < a.regions.size(); ++index) {
    const ir::Graph& first = a.regions[index];
    const ir::Graph& second = b.regions[index];
    if (first.outputs != second.outputs || !same_nodes(first, second)) return false;
  }
  return true;
}

bool same_nodes(const ir::Graph& a, const ir::Graph& b) {
  if (a.size() != b.size() || a.parameters != b.parameters || a.host_functions != b.host_functions) return false;
  for (ir::ValueId value = 0; value < a.size(); ++value)
    if (!same_node(a.node(value), b.node(value))) return false;
  return true;
}

ir::Graph without_dead_nodes(ir::Graph graph) {
  ir::remove_dead_nodes(graph);
  return graph;
}

bool is_loop(ir::Op op) { return op == ir::Op::scan_loop || op == ir::Op::while_loop; }

}  // namespace

bool computes_prefix_of(const ir::Graph& a, const ir::Graph& b) {
  if (a.outputs.size() > b.outputs.size()) return false;
  // Compare what each needs for a's outputs: b's extra outputs may keep more nodes alive.
  ir::Graph needed_of_b = b;
  needed_of_b.outputs.resize(a.outputs.size());
  const ir::Graph first = without_dead_nodes(a), second = without_dead_nodes(std::move(needed_of_b));
  if (first.outputs != second.outputs || !same_nodes(first, second)) return false;
  // b's extra outputs are then values b computes; the rest of b need not match a.
  return true;
}

bool merge_loops(ir::Graph& graph) {
  bool changed = false;
  std::vector<ir::ValueId> replaced_by(static_cast<std::size_t>(graph.size()), -1);
  for (ir::ValueId later = 0; later < graph.size(); ++later) {
    ir::Node& node = graph.node(later);
    for (ir::ValueId& operand : node.operands)
      if (replaced_by[static_cast<std::size_t>(operand)] >= 0) operand = replaced_by[static_cast<std::size_t>(operand)];
    if (!is_loop(node.op)) continue;
    for (ir::ValueId earlier = 0; earlier < later; ++earlier) {
      const ir::Node& twin = graph.node(earlier);
      if (twin.op != node.op || twin.operands != node.operands || !(twin.attributes == node.attributes) ||
          twin.regions.size() != node.regions.size())
        continue;
      // A scan's region is its body; a while_loop's are its condition and body, whose outputs are the carries
      // (the same for both): only a scan's body can return more.
      bool prefix = true;
      for (std::size_t region = 0; region < node.regions.size() && prefix; ++region)
        prefix = computes_prefix_of(twin.regions[region], node.regions[region]);
      if (!prefix) continue;
      graph.node(earlier).regions = node.regions;  // the later one's outputs include the earlier's, in order
      replaced_by[static_cast<std::size_t>(later)] = earlier;
      changed = true;
      break;
    }
  }
  if (!changed) return false;
  for (ir::ValueId& output : graph.outputs)
    if (replaced_by[static_cast<std::size_t>(output)] >= 0) output = replaced_by[static_cast<std::size_t>(output)];
  ir::remove_dead_nodes(graph);
  return true;
}

}  // namespace kiln::compiler
