#pragma once
// A small helper for passes that walk a graph in order and redirect uses of
// some values to others: replacements are recorded as the walk goes and
// applied to each node's operands when the walk reaches it, then to the
// outputs. Nodes left without uses are removed by dce.

#include "ir/graph.h"

#include <cstring>
#include <vector>

namespace kiln::compiler {

class Rewriter {
 public:
  explicit Rewriter(ir::Graph& graph) : graph_(graph), replacement_(static_cast<std::size_t>(graph.size())) {
    for (ir::ValueId id = 0; id < graph.size(); ++id) replacement_[static_cast<std::size_t>(id)] = id;
  }

  // Call before looking at node `id`: points its operands at replacements.
  void update_operands(ir::ValueId id) {
    for (ir::ValueId& operand : graph_.node(id).operands) operand = resolve(operand);
  }

  // From now on uses of `value` read `with` (an earlier value of the same type).
  void replace_uses(ir::ValueId value, ir::ValueId with) {
    replacement_[static_cast<std::size_t>(value)] = resolve(with);
    changed_ = true;
  }

  // Records an in-place change of a node.
  void mark_changed() { changed_ = true; }

  // Redirects the outputs; returns whether anything changed.
  bool finish() {
    for (ir::ValueId& output : graph_.outputs) output = resolve(output);
    return changed_;
  }

 private:
  ir::ValueId resolve(ir::ValueId value) const {
    while (replacement_[static_cast<std::size_t>(value)] != value) value = replacement_[static_cast<std::size_t>(value)];
    return value;
  }

  ir::Graph& graph_;
  std::vector<ir::ValueId> replacement_;
  bool changed_ = false;
};

}  // namespace kiln::compiler
