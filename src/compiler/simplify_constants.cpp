// Constant folding. A `constant` node holds one value filling its shape, so
// an elementwise op on constants is again a constant: kiln computes that one
// value with the standard kernel itself (on rank-0 arrays), so folding gives
// bit for bit what running the graph would. Data movement of a constant is
// the same constant in the new shape.

#include "compiler/simplify_rules.h"
#include "core/half_precision.h"
#include "kernels/kernels.h"

namespace kiln::compiler::simplify_rules {
namespace {

bool moves_data_only(ir::Op op) {
  switch (op) {
    case ir::Op::reshape:
    case ir::Op::broadcast_to:
    case ir::Op::transpose:
    case ir::Op::slice:
    case ir::Op::expand_dims:
    case ir::Op::squeeze:
    case ir::Op::concat: return true;
    default: return false;
  }
}

void set_constant(ir::Node& node, const ir::Attributes& value) {
  node.op = ir::Op::constant;
  node.operands.clear();
  node.attributes = {};
  node.attributes.float_value = value.float_value;
  node.attributes.int_value = value.int_value;
}

// The value of a rank-0 array as constant attributes.
ir::Attributes value_of(const runtime::Array& array) {
  ir::Attributes value;
  if (is_half_precision(array.dtype)) {
    value.float_value = half_precision_value(array.dtype, array.data<std::uint16_t>()[0]);
    return value;
  }
  visit_dtype(array.dtype, [&]<class T>() {
    T element = array.data<T>()[0];
    if constexpr (std::is_floating_point_v<T>) value.float_value = static_cast<double>(element);
    else value.int_value = static_cast<std::int64_t>(element);
  });
  return value;
}

}  // namespace

bool fold_constants(Match& match) {
  ir::Node& node = match.node();
  if (node.operands.empty() || !node.type.shape.is_static()) return false;
  for (std::size_t i = 0; i < node.operands.size(); ++i)
    if (match.operand(i).op != ir::Op::constant) return false;

  if (moves_data_only(node.op)) {
    const ir::Attributes& first = match.operand(0).attributes;
    for (std::size_t i = 1; i < node.operands.size(); ++i) {
      const ir::Attributes& other = match.operand(i).attributes;
      if (other.int_value != first.int_value || !(other.float_value == first.float_value)) return false;
    }
    set_constant(node, first);
    return match.changed();
  }
  if (!ir::is_elementwise(node.op)) return false;

  std::vector<runtime::Array> scalars;
  for (std::size_t i = 0; i < node.operands.size(); ++i) {
    ir::Node scalar = match.operand(i);
    scalar.type.shape = Shape();
    scalars.push_back(kernels::run(scalar, {}, Device::cpu()));
  }
  ir::Node scalar_node = node;
  scalar_node.type.shape = Shape();
  runtime::Array result = kernels::run(scalar_node, scalars, Device::cpu());
  set_constant(node, value_of(result));
  return match.changed();
}

}  // namespace kiln::compiler::simplify_rules
