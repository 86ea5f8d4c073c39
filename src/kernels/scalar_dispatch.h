#pragma once
// The standard kernels' way from an op to its scalar meaning (kernels/scalar_ops.h), through the op table: the
// CPU and CUDA elementwise kernels run every op of meaning `scalar` without naming it, so a new op needs no case
// in them.

#include "ir/op.h"
#include "kernels/scalar_ops.h"

namespace kiln::kernels {

// Calls visitor(kiln::scalar::<op>{}) and returns what it returns if `op` has meaning `scalar` and `arity`
// operands in the op table (ir/ops.def); returns false otherwise.
template <int arity, class Visitor>
bool visit_scalar_op(ir::Op op, Visitor&& visitor) {
  switch (op) {
#define KILN_VISIT_scalar(name, op_arity)                            \
  case ir::Op::name:                                                 \
    if constexpr (op_arity == arity) return visitor(scalar::name{}); \
    return false;
#define KILN_VISIT_math(name, op_arity)
#define KILN_VISIT_own(name, op_arity)
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) KILN_VISIT_##meaning(name, arity)
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_VISIT_own
#undef KILN_VISIT_math
#undef KILN_VISIT_scalar
    default:
      return false;
  }
}

// (scalar::accepts<Function, T...> says whether it takes those dtypes.)
using scalar::accepts;

}  // namespace kiln::kernels
