#pragma once
// What a generated reduction does, whichever backend spells it: the binary op that folds two partial results (its
// scalar meaning is the op's own, ops.def), the value an empty reduction starts from, and whether the total is
// divided by the count (a mean). The CPU's row and column kernels (cpu/row_kernel.h) and CUDA's (cuda/
// kernel_writer.h) spell these in their preludes' names.

#include "ir/op.h"

#include <string_view>

namespace kiln::compiler::codegen {

// Where an empty reduction starts: 0 for sums, 1 for products, the dtype's lowest value for maxima (-inf for
// floats; false for bools, whose any() is a maximum) and its highest for minima.
enum class Identity { zero, one, lowest, highest };

struct ReductionForm {
  ir::Op combine;  // add, mul, maximum or minimum
  Identity identity;
  bool mean = false;
  // The fold's name in both preludes, "add": the CPU's vector function, CUDA's scalar:: function object.
  std::string_view combine_name() const { return ir::name(combine); }
};

// The form of reduce_sum, reduce_mean, reduce_prod, reduce_max or reduce_min; throws CompileError naming `op` for
// any other (argmax is not generated).
ReductionForm reduction_form(ir::Op op);

}  // namespace kiln::compiler::codegen
