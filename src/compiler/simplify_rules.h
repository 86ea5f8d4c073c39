#pragma once
// What simplify's rules see and how they are declared. A rule looks at one
// node and either redirects its uses to an existing value (replace_with) or
// rewrites the node in place (its new operands must come before it).

#include "compiler/rewrite.h"
#include "ir/graph.h"

#include <optional>
#include <span>
#include <string_view>

namespace kiln::compiler::simplify_rules {

class Match {
 public:
  Match(ir::Graph& graph, Rewriter& rewriter, ir::ValueId id) : graph_(graph), rewriter_(rewriter), id_(id) {}

  ir::Graph& graph() { return graph_; }
  ir::ValueId id() const { return id_; }
  ir::Node& node() { return graph_.node(id_); }
  const ir::Node& operand(std::size_t index) const { return graph_.node(graph_.node(id_).operands[index]); }
  ir::ValueId operand_id(std::size_t index) const { return graph_.node(id_).operands[index]; }

  // The uniform value of a constant node, as a double (exact for floats,
  // bools and integers below 2^53).
  std::optional<double> constant_value(ir::ValueId value) const;
  bool operand_is(std::size_t index, double value) const;
  // True if operand `index` has exactly the node's own type.
  bool operand_has_result_type(std::size_t index) const;
  // The uses of `value` by nodes and by the outputs, as the graph stands: a
  // use that a pending replacement will redirect to it later in the walk is
  // not counted, so a rule may only lose speed by trusting it, never
  // correctness.
  std::size_t use_count(ir::ValueId value) const;

  // Uses of this node now read `value` (which must have the node's type).
  bool replace_with(ir::ValueId value);
  // The node was rewritten in place.
  bool changed() {
    rewriter_.mark_changed();
    return true;
  }

 private:
  ir::Graph& graph_;
  Rewriter& rewriter_;
  ir::ValueId id_;
};

struct Rule {
  std::string_view name;
  ir::Op op;
  bool (*apply)(Match& match);  // true if it rewrote something
};

std::span<const Rule> arithmetic_rules();
std::span<const Rule> shape_rules();
// Replaces an elementwise or data-movement node whose operands are all
// constants by the constant it computes.
bool fold_constants(Match& match);

}  // namespace kiln::compiler::simplify_rules
