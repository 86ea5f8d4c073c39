#include "ir/graph.h"

#include <kiln/error.h>

#include <cmath>

namespace kiln::ir {

std::string Type::to_string() const { return std::string(kiln::to_string(dtype)) + shape.to_string(); }

ValueId Graph::add(Node node) {
  nodes.push_back(std::move(node));
  return static_cast<ValueId>(nodes.size() - 1);
}

ValueId Graph::add_parameter(const Type& type) {
  Node node;
  node.op = Op::parameter;
  node.type = type;
  node.attributes.index = static_cast<std::int64_t>(parameters.size());
  ValueId value = add(std::move(node));
  parameters.push_back(value);
  return value;
}

std::vector<int> Graph::use_counts() const {
  std::vector<int> counts(nodes.size(), 0);
  for (const Node& node : nodes)
    for (ValueId operand : node.operands) counts[static_cast<std::size_t>(operand)] += 1;
  for (ValueId output : outputs) counts[static_cast<std::size_t>(output)] += 1;
  return counts;
}

bool Graph::has_dynamic_shapes() const {
  for (const Node& node : nodes)
    if (!node.type.shape.is_static()) return true;
  return false;
}

bool is_positive_zero(const Node& node) {
  return node.op == Op::constant && node.attributes.float_value == 0 && !std::signbit(node.attributes.float_value) &&
         node.attributes.int_value == 0;
}

std::vector<Type> result_types(const Graph& graph, ValueId value) {
  const Node& node = graph.node(value);
  std::vector<Type> types;
  if (!has_regions(node.op) || node.regions.empty()) return types;
  const Graph& last = node.regions.back();  // a cond's branch, a while_loop's body, a scan_loop's body
  for (ValueId output : last.outputs) types.push_back(last.type(output));
  if (node.op == Op::scan_loop)
    for (std::size_t index = static_cast<std::size_t>(node.attributes.carry_count); index < types.size(); ++index) {
      std::vector<std::int64_t> dims{node.attributes.length};
      for (std::int64_t dim : types[index].shape.dims()) dims.push_back(dim);
      types[index].shape = Shape(dims);
    }
  return types;
}

std::vector<std::vector<ValueId>> result_nodes(const Graph& graph) {
  std::vector<std::vector<ValueId>> nodes(graph.nodes.size());
  for (ValueId value = 0; value < graph.size(); ++value)
    if (graph.node(value).op == Op::result)
      nodes[static_cast<std::size_t>(graph.node(value).operands.at(0))].push_back(value);
  return nodes;
}

void compact(Graph& graph, const std::vector<bool>& keep) {
  std::vector<ValueId> new_id(graph.nodes.size(), -1);
  std::vector<Node> kept;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!keep[i]) continue;
    Node node = std::move(graph.nodes[i]);
    for (ValueId& operand : node.operands) {
      operand = new_id[static_cast<std::size_t>(operand)];
      if (operand < 0) throw InternalError("ir::compact", "a kept node uses a removed value", std::string());
    }
    new_id[i] = static_cast<ValueId>(kept.size());
    kept.push_back(std::move(node));
  }
  graph.nodes = std::move(kept);
  for (ValueId& parameter : graph.parameters) parameter = new_id[static_cast<std::size_t>(parameter)];
  for (ValueId& output : graph.outputs) output = new_id[static_cast<std::size_t>(output)];
}

std::vector<ValueId> add_control_node(Graph& graph, Node node) {
  const std::string location = node.location;
  const ValueId value = graph.add(std::move(node));
  const std::vector<Type> types = result_types(graph, value);
  graph.node(value).type = types.at(0);
  std::vector<ValueId> results{value};
  for (std::size_t index = 1; index < types.size(); ++index) {
    Node result;
    result.op = Op::result;
    result.type = types[index];
    result.operands = {value};
    result.attributes.index = static_cast<std::int64_t>(index);
    result.location = location;
    results.push_back(graph.add(std::move(result)));
  }
  return results;
}

void canonicalize(Graph& graph) {
  std::vector<Node> ordered;
  std::vector<ValueId> new_id(graph.nodes.size(), -1);
  for (std::size_t position = 0; position < graph.parameters.size(); ++position) {
    auto old = static_cast<std::size_t>(graph.parameters[position]);
    new_id[old] = static_cast<ValueId>(ordered.size());
    Node node = graph.nodes[old];
    node.attributes.index = static_cast<std::int64_t>(position);
    ordered.push_back(std::move(node));
  }
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].op == Op::parameter) continue;
    new_id[i] = static_cast<ValueId>(ordered.size());
    ordered.push_back(std::move(graph.nodes[i]));
  }
  for (Node& node : ordered)
    for (ValueId& operand : node.operands) operand = new_id[static_cast<std::size_t>(operand)];
  for (std::size_t position = 0; position < graph.parameters.size(); ++position)
    graph.parameters[position] = static_cast<ValueId>(position);
  for (ValueId& output : graph.outputs) output = new_id[static_cast<std::size_t>(output)];
  graph.nodes = std::move(ordered);
}

bool remove_dead_nodes(Graph& graph) {
  std::vector<bool> live(graph.nodes.size(), false);
  for (ValueId output : graph.outputs) live[static_cast<std::size_t>(output)] = true;
  for (ValueId parameter : graph.parameters) live[static_cast<std::size_t>(parameter)] = true;
  for (std::size_t i = graph.nodes.size(); i-- > 0;) {
    if (!live[i]) continue;
    for (ValueId operand : graph.nodes[i].operands) live[static_cast<std::size_t>(operand)] = true;
  }
  bool changed = false;
  for (bool is_live : live) changed = changed || !is_live;
  if (changed) compact(graph, live);
  return changed;
}

}  // namespace kiln::ir
