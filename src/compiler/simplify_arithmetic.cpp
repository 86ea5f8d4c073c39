// Algebraic identities of arithmetic ops. Only exact ones: x + 0.0 is not x
// when x is -0.0, so only x + (-0.0) folds; x * 0 is not 0 for inf or NaN,
// so it stays.

#include "compiler/simplify_rules.h"

#include <array>

namespace kiln::compiler::simplify_rules {
namespace {

// x op identity -> x, when the identity does not broadcast x to a larger shape.
bool right_identity(Match& match, double identity) {
  return match.operand_is(1, identity) && match.operand_has_result_type(0) && match.replace_with(match.operand_id(0));
}
bool left_identity(Match& match, double identity) {
  return match.operand_is(0, identity) && match.operand_has_result_type(1) && match.replace_with(match.operand_id(1));
}
double additive_identity(const Match& match) { return is_floating(match.operand(0).type.dtype) ? -0.0 : 0.0; }

bool add_zero(Match& match) {
  double zero = additive_identity(match);
  return right_identity(match, zero) || left_identity(match, zero);
}
bool subtract_zero(Match& match) { return right_identity(match, 0.0); }
bool multiply_one(Match& match) { return right_identity(match, 1.0) || left_identity(match, 1.0); }
bool divide_one(Match& match) { return right_identity(match, 1.0); }

bool double_negation(Match& match) {
  return match.operand(0).op == ir::Op::neg && match.replace_with(match.operand(0).operands[0]);
}

bool idempotent(Match& match) {
  return match.operand(0).op == match.node().op && match.replace_with(match.operand_id(0));
}

// pow(x, 2) -> square(x): pow correctly rounds x*x, as square does.
bool power_two(Match& match) {
  if (!match.operand_is(1, 2.0) || !match.operand_has_result_type(0)) return false;
  ir::Node& node = match.node();
  node.op = ir::Op::square;
  node.operands.resize(1);
  return match.changed();
}

bool same_dtype_cast(Match& match) { return match.operand_has_result_type(0) && match.replace_with(match.operand_id(0)); }

// A reduction of one element per result -- over no axes, or only over axes
// of size 1 -- is that element (mean divides by one, prod multiplies by one):
// its input, or a reshape of it. The standard kernels copy it too, so a sum
// of -0 alone stays -0 in every executor (a row kernel would add it to +0).
bool one_element_reduction(Match& match) {
  ir::Node& node = match.node();
  const ir::Type& input = match.graph().type(match.operand_id(0));
  if (input.dtype != node.type.dtype) return false;
  for (std::int64_t axis : node.attributes.axes)
    if (input.shape[static_cast<int>(axis)] != 1) return false;
  if (match.operand_has_result_type(0)) return match.replace_with(match.operand_id(0));
  node.op = ir::Op::reshape;
  node.attributes = {};
  return match.changed();
}

const std::array arithmetic = {
    Rule{"x + 0 -> x", ir::Op::add, add_zero},
    Rule{"x - 0 -> x", ir::Op::sub, subtract_zero},
    Rule{"x * 1 -> x", ir::Op::mul, multiply_one},
    Rule{"x / 1 -> x", ir::Op::div, divide_one},
    Rule{"-(-x) -> x", ir::Op::neg, double_negation},
    Rule{"relu(relu(x)) -> relu(x)", ir::Op::relu, idempotent},
    Rule{"floor(floor(x)) -> floor(x)", ir::Op::floor, idempotent},
    Rule{"ceil(ceil(x)) -> ceil(x)", ir::Op::ceil, idempotent},
    Rule{"round(round(x)) -> round(x)", ir::Op::round, idempotent},
    Rule{"pow(x, 2) -> square(x)", ir::Op::pow, power_two},
    Rule{"cast to own dtype -> x", ir::Op::cast, same_dtype_cast},
    Rule{"reduce_sum of one element -> x", ir::Op::reduce_sum, one_element_reduction},
    Rule{"reduce_mean of one element -> x", ir::Op::reduce_mean, one_element_reduction},
    Rule{"reduce_max of one element -> x", ir::Op::reduce_max, one_element_reduction},
    Rule{"reduce_min of one element -> x", ir::Op::reduce_min, one_element_reduction},
    Rule{"reduce_prod of one element -> x", ir::Op::reduce_prod, one_element_reduction},
};

}  // namespace

std::span<const Rule> arithmetic_rules() { return arithmetic; }

}  // namespace kiln::compiler::simplify_rules
