#include "compiler/simplify.h"

#include "compiler/simplify_rules.h"

#include <cstring>

namespace kiln::compiler {
namespace simplify_rules {

std::optional<double> Match::constant_value(ir::ValueId value) const {
  const ir::Node& node = graph_.node(value);
  if (node.op != ir::Op::constant) return std::nullopt;
  if (is_floating(node.type.dtype)) return node.attributes.float_value;
  return static_cast<double>(node.attributes.int_value);
}

bool Match::operand_is(std::size_t index, double value) const {
  std::optional<double> constant = constant_value(operand_id(index));
  // Bitwise: -0.0 is not 0.0.
  return constant && std::memcmp(&*constant, &value, sizeof value) == 0;
}

bool Match::operand_has_result_type(std::size_t index) const {
  return operand(index).type == graph_.node(id_).type;
}

std::size_t Match::use_count(ir::ValueId value) const {
  std::size_t uses = 0;
  for (ir::ValueId id = value + 1; id < graph_.size(); ++id)
    for (ir::ValueId operand : graph_.node(id).operands) uses += operand == value ? 1 : 0;
  for (ir::ValueId output : graph_.outputs) uses += output == value ? 1 : 0;
  return uses;
}

bool Match::replace_with(ir::ValueId value) {
  rewriter_.replace_uses(id_, value);
  return true;
}

}  // namespace simplify_rules

bool simplify(ir::Graph& graph) {
  using namespace simplify_rules;
  Rewriter rewriter(graph);
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    rewriter.update_operands(id);
    Match match(graph, rewriter, id);
    if (fold_constants(match)) continue;
    bool rewritten = false;
    for (auto rules : {arithmetic_rules(), shape_rules()})
      for (const Rule& rule : rules)
        if (!rewritten && rule.op == graph.node(id).op) rewritten = rule.apply(match);
  }
  return rewriter.finish();
}

}  // namespace kiln::compiler
