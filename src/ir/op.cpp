#include "ir/op.h"

#include <array>

namespace kiln::ir {
namespace {

// The accuracy column's words.
namespace accuracy_column {
constexpr Accuracy exact{Accuracy::Kind::exact, 0};
constexpr Accuracy reassociated{Accuracy::Kind::reassociated, 0};
constexpr Accuracy ulps(int count) { return {Accuracy::Kind::ulps, count}; }
}  // namespace accuracy_column

constexpr std::array<OpInfo, op_count> op_table = {{
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) \
  {Op::name,                                                                           \
   #name,                                                                              \
   arity,                                                                              \
   OpCategory::category,                                                               \
   AttributeKind::attributes,                                                          \
   Meaning::meaning,                                                                   \
   Cost::cost,                                                                         \
   accuracy_column::accuracy},
#include "ir/ops.def"
#undef KILN_OP
}};

}  // namespace

int flops_per_element(Op op) {
  switch (info(op).cost) {
    case Cost::none:
      return 0;
    case Cost::simple:
      return 1;
    case Cost::pick:
      return 2;
    case Cost::divide:
      return 4;
    case Cost::division:
    case Cost::transcendental:
      return 20;
  }
  return 0;
}

const OpInfo& info(Op op) { return op_table[static_cast<std::size_t>(op)]; }

std::optional<Op> op_from_name(std::string_view name) {
  for (const OpInfo& entry : op_table)
    if (entry.name == name) return entry.op;
  return std::nullopt;
}

}  // namespace kiln::ir
