// Identities of data-movement ops: no-op reshapes, broadcasts, transposes
// and slices disappear; chains collapse into one op; expand_dims and squeeze
// become reshape (one op for the fusion pass to understand).

#include "compiler/simplify_rules.h"

#include <array>

namespace kiln::compiler::simplify_rules {
namespace {

bool identity(Match& match) { return match.operand_has_result_type(0) && match.replace_with(match.operand_id(0)); }

// reshape(reshape(x)) -> reshape(x); a reshape to x's own shape -> x.
bool reshape_chain(Match& match) {
  if (identity(match)) return true;
  const ir::Node& operand = match.operand(0);
  if (operand.op != ir::Op::reshape) return false;
  match.node().operands[0] = operand.operands[0];
  return match.changed();
}

bool to_reshape(Match& match) {
  ir::Node& node = match.node();
  node.op = ir::Op::reshape;
  node.attributes = {};
  return match.changed();
}

bool is_identity_permutation(const std::vector<std::int64_t>& permutation) {
  for (std::size_t axis = 0; axis < permutation.size(); ++axis)
    if (permutation[axis] != static_cast<std::int64_t>(axis)) return false;
  return true;
}

bool transpose_chain(Match& match) {
  ir::Node& node = match.node();
  if (is_identity_permutation(node.attributes.axes)) return match.replace_with(match.operand_id(0));
  const ir::Node& operand = match.operand(0);
  if (operand.op != ir::Op::transpose) return false;
  // result[i] = operand[p[i]] = x[q[p[i]]]
  std::vector<std::int64_t> composed;
  for (std::int64_t axis : node.attributes.axes)
    composed.push_back(operand.attributes.axes[static_cast<std::size_t>(axis)]);
  if (is_identity_permutation(composed)) return match.replace_with(operand.operands[0]);
  node.attributes.axes = composed;
  node.operands[0] = operand.operands[0];
  return match.changed();
}

bool full_slice(Match& match) {
  const ir::Node& node = match.node();
  for (std::int64_t step : node.attributes.step)
    if (step != 1) return false;
  return identity(match);
}

bool single_concat(Match& match) { return match.node().operands.size() == 1 && identity(match); }

const std::array shape = {
    Rule{"reshape(reshape(x)) -> reshape(x)", ir::Op::reshape, reshape_chain},
    Rule{"expand_dims -> reshape", ir::Op::expand_dims, to_reshape},
    Rule{"squeeze -> reshape", ir::Op::squeeze, to_reshape},
    Rule{"broadcast_to own shape -> x", ir::Op::broadcast_to, identity},
    Rule{"transpose(transpose(x)) -> transpose(x)", ir::Op::transpose, transpose_chain},
    Rule{"slice of everything -> x", ir::Op::slice, full_slice},
    Rule{"concat of one -> x", ir::Op::concat, single_concat},
};

}  // namespace

std::span<const Rule> shape_rules() { return shape; }

}  // namespace kiln::compiler::simplify_rules
