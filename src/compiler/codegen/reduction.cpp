#include "compiler/codegen/reduction.h"

#include <kiln/error.h>

#include <string>

namespace kiln::compiler::codegen {

ReductionForm reduction_form(ir::Op op) {
  switch (op) {
    case ir::Op::reduce_sum:
      return {ir::Op::add, Identity::zero};
    case ir::Op::reduce_mean:
      return {ir::Op::add, Identity::zero, true};
    case ir::Op::reduce_prod:
      return {ir::Op::mul, Identity::one};
    case ir::Op::reduce_max:
      return {ir::Op::maximum, Identity::lowest};
    case ir::Op::reduce_min:
      return {ir::Op::minimum, Identity::highest};
    default:
      throw CompileError(std::string(ir::name(op)), "has no generated reduction", std::string());
  }
}

}  // namespace kiln::compiler::codegen
