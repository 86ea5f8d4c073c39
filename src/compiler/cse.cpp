#include "compiler/cse.h"

#include "compiler/rewrite.h"

#include <cstring>
#include <functional>
#include <unordered_map>

namespace kiln::compiler {
namespace {

std::size_t hash_node(const ir::Node& node) {
  std::size_t hash = static_cast<std::size_t>(node.op) * 1000003u + static_cast<std::size_t>(node.type.dtype);
  auto mix = [&hash](std::size_t value) { hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2); };
  for (std::int64_t dim : node.type.shape.dims()) mix(std::hash<std::int64_t>{}(dim));
  for (ir::ValueId operand : node.operands) mix(std::hash<ir::ValueId>{}(operand));
  mix(std::hash<double>{}(node.attributes.float_value));
  mix(std::hash<std::int64_t>{}(node.attributes.int_value));
  for (std::int64_t axis : node.attributes.axes) mix(std::hash<std::int64_t>{}(axis));
  return hash;
}

bool same_computation(const ir::Node& a, const ir::Node& b) {
  // Bitwise comparison of constants: 0.0 and -0.0 differ, NaN equals NaN.
  auto same_bits = [](double x, double y) { return std::memcmp(&x, &y, sizeof x) == 0; };
  ir::Attributes left = a.attributes, right = b.attributes;
  bool values_match = same_bits(left.float_value, right.float_value);
  left.float_value = right.float_value = 0;
  return a.op == b.op && a.type == b.type && a.operands == b.operands && left == right && values_match;
}

}  // namespace

bool cse(ir::Graph& graph) {
  Rewriter rewriter(graph);
  std::unordered_multimap<std::size_t, ir::ValueId> seen;
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    rewriter.update_operands(id);
    const ir::Node& node = graph.node(id);
    // Two control nodes with the same operands may still differ in their regions (not compared here).
    if (node.op == ir::Op::parameter || node.op == ir::Op::host_call || ir::has_regions(node.op)) continue;
    std::size_t hash = hash_node(node);
    auto [begin, end] = seen.equal_range(hash);
    bool replaced = false;
    for (auto it = begin; it != end && !replaced; ++it) {
      if (same_computation(graph.node(it->second), node)) {
        rewriter.replace_uses(id, it->second);
        replaced = true;
      }
    }
    if (!replaced) seen.emplace(hash, id);
  }
  return rewriter.finish();
}

}  // namespace kiln::compiler
