// The rule table (rules.h): the families merged into one entry per op, and the contexts the rules work in.

#include "autodiff/products.h"
#include "autodiff/rules.h"

#include <kiln/error.h>

#include <algorithm>
#include <array>
#include <string>

namespace kiln::autodiff {
namespace {

using Table = std::array<const OpRule*, ir::op_count>;

Table make_table() {
  Table table{};
  for (std::span<const OpRule> family : {elementwise_rules(), reduction_rules(), shape_rules()}) {
    for (const OpRule& rule : family) {
      const auto index = static_cast<std::size_t>(rule.op);
      if (table[index])
        throw InternalError("autodiff", "two derivative rules for " + std::string(ir::name(rule.op)), std::string());
      table[index] = &rule;
    }
  }
  return table;
}

}  // namespace

const OpRule* rule_for(ir::Op op) {
  static const Table table = make_table();
  return table[static_cast<std::size_t>(op)];
}

// ---- JvpContext ---------------------------------------------------------------------------------------------

Tangent JvpContext::linear(ir::Op op, std::vector<LinearOperand> operands, const ir::Attributes& attributes,
                           ir::Type declared) {
  const OpRule* rule = rule_for(op);
  if (!rule || !rule->transpose)
    throw InternalError("autodiff",
                        "the derivative of " + std::string(ir::name(node_.op)) + " uses " + std::string(ir::name(op)) +
                            " on a tangent, which has no transpose rule",
                        node_.location);
  return program_.apply(op, std::move(operands), attributes, declared, node_.location);
}

Tangent JvpContext::same_op(Tangent tangent) {
  if (tangent.is_zero()) return tangent;
  std::vector<LinearOperand> operands{LinearOperand::of(tangent)};
  for (std::size_t index = 1; index < node_.operands.size(); ++index)
    operands.push_back(LinearOperand::of(node_.operands[index]));
  return linear(node_.op, std::move(operands), node_.attributes, node_.type);
}

Tangent JvpContext::scale(Tangent tangent, ValueId factor) {
  if (tangent.is_zero()) return tangent;
  return linear(ir::Op::mul, {LinearOperand::of(tangent), LinearOperand::of(factor)});
}

Tangent JvpContext::divide(Tangent tangent, ValueId divisor) {
  if (tangent.is_zero()) return tangent;
  return linear(ir::Op::div, {LinearOperand::of(tangent), LinearOperand::of(divisor)});
}

Tangent JvpContext::add(Tangent a, Tangent b) {
  if (a.is_zero()) return b;
  if (b.is_zero()) return a;
  return linear(ir::Op::add, {LinearOperand::of(a), LinearOperand::of(b)});
}

Tangent JvpContext::subtract(Tangent a, Tangent b) {
  if (b.is_zero()) return a;
  if (a.is_zero()) return negate(b);
  return linear(ir::Op::sub, {LinearOperand::of(a), LinearOperand::of(b)});
}

Tangent JvpContext::negate(Tangent tangent) {
  if (tangent.is_zero()) return tangent;
  return linear(ir::Op::neg, {LinearOperand::of(tangent)});
}

Tangent JvpContext::select(ValueId condition, Tangent when_true, Tangent when_false) {
  if (when_true.is_zero() && when_false.is_zero()) return when_true;
  auto operand = [&](Tangent tangent) {
    return tangent.is_zero() ? LinearOperand::of(constant(0)) : LinearOperand::of(tangent);
  };
  return linear(ir::Op::where, {LinearOperand::of(condition), operand(when_true), operand(when_false)});
}

LinearOperand JvpContext::tangent_or_zeros(std::size_t index) {
  if (!tangents_[index].is_zero()) return LinearOperand::of(tangents_[index]);
  return LinearOperand::of(emitter_.zeros(operand_type(index)));
}

// ---- TransposeContext ---------------------------------------------------------------------------------------

ValueId TransposeContext::value(std::size_t index) const {
  const LinearOperand& operand = node_.operands[index];
  if (operand.is_tangent)
    throw InternalError("autodiff",
                        "operand " + std::to_string(index) + " of linear " + std::string(ir::name(node_.op)) +
                            " is a tangent, not a value",
                        node_.location);
  return operand.id;
}

void TransposeContext::contribute(std::size_t index, ValueId cotangent) {
  const LinearOperand& operand = node_.operands[index];
  if (!operand.is_tangent) return;
  accumulate(emitter_, cotangents_, Tangent{operand.id},
             emitter_.sum_to_shape(cotangent, program_.operand_type(operand).shape));
}

namespace {

// a + b, where both are the same data movement of values of one type: that movement of their sum. The adjoints of
// a value's strided slices (transpose_slice) are each a merge of a phase layout: summed before the merge, they are
// one kernel over the phases instead of a kernel per slice writing its merge. A slice is looked through only where
// it keeps at least half of its operand (a crop), so the sum never adds many elements the result drops.
ValueId add_alike(Emitter& emit, ValueId a, ValueId b) {
  if (const std::optional<ValueId> product = add_products(emit, a, b)) return *product;
  const ir::Node &left = emit.graph().node(a), &right = emit.graph().node(b);
  const bool movement = left.op == ir::Op::reshape || left.op == ir::Op::transpose || left.op == ir::Op::slice;
  if (!movement || left.op != right.op || left.type != right.type || left.attributes != right.attributes ||
      emit.type(left.operands[0]) != emit.type(right.operands[0]))
    return emit.add(a, b);
  if (left.op == ir::Op::slice) {
    const bool unit_steps = std::all_of(left.attributes.step.begin(), left.attributes.step.end(),
                                        [](std::int64_t step) { return step == 1; });
    if (!unit_steps || 2 * left.type.shape.numel() < emit.shape(left.operands[0]).numel()) return emit.add(a, b);
  }
  // Copies: nodes added below may move the node list.
  const ir::Op op = left.op;
  const ir::Attributes attributes = left.attributes;
  const ir::Type type = left.type;
  const ValueId left_operand = left.operands[0], right_operand = right.operands[0];
  return emit.apply(op, {add_alike(emit, left_operand, right_operand)}, attributes, type);
}

}  // namespace

void accumulate(Emitter& emitter, std::vector<ValueId>& cotangents, Tangent tangent, ValueId contribution) {
  ValueId& slot = cotangents[static_cast<std::size_t>(tangent.id)];
  slot = slot < 0 ? contribution : add_alike(emitter, slot, contribution);
}

}  // namespace kiln::autodiff
