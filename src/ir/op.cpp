#include "ir/op.h"

#include <array>

namespace kiln::ir {
namespace {

constexpr std::array<OpInfo, op_count> op_table = {{
#define KILN_OP(name, arity, category, attributes, type_rule) \
  {Op::name, #name, arity, OpCategory::category, AttributeKind::attributes},
#include "ir/ops.def"
#undef KILN_OP
}};

}  // namespace

const OpInfo& info(Op op) { return op_table[static_cast<std::size_t>(op)]; }

std::optional<Op> op_from_name(std::string_view name) {
  for (const OpInfo& entry : op_table)
    if (entry.name == name) return entry.op;
  return std::nullopt;
}

}  // namespace kiln::ir
