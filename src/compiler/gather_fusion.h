#pragma once
// Gather fusion, a CPU fusion step after column fusion: a gemm kernel whose left operand is a concat along its last
// axis of views of values in memory -- a convolution's windows, the taps of the padded input side by side (im2col)
// -- gathers each strip of that operand from the views as the GEMM packs it (kernels/cpu/gemm.h, sgemm_gathered)
// instead of reading it from a buffer that a loop kernel and the concat wrote first: the implicit GEMM of cuDNN and
// of XLA's CPU convolutions. At 3x3 the written-out operand is 9 times the input, written once and read again.
//
// A view is a concat operand that is a slice with unit step on the last axis (or the operand itself) of a value in
// memory (a parameter or another kernel's output). Its source is followed further through concats that pad it with
// zeros on a leading axis (the padding of a convolution): the view then reads the unpadded value, and zero where it
// falls on the padding. The concat, and every kernel left with no reader (the slices' loop kernel, the padding's
// concats and constants), leave the plan.

#include "compiler/fusion.h"
#include "ir/graph.h"

namespace kiln::compiler {

FusionPlan gather_gemm_operands(const ir::Graph& graph, FusionPlan plan);

}  // namespace kiln::compiler
