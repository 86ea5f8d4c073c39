#pragma once
// Attention fusion, the CPU's last fusion step: finds in a plan from fuse() two f32 matmuls with a reduction
// kernel over the rows of the first between them -- softmax(Q K^T / sqrt(d)) V, with or without a mask or a
// scale, or any other row-wise fusion -- and makes the three kernels one of kind `attention`, which never
// writes the first product (the scores) to memory (kernels/cpu/attention.h runs it).
//
// The pattern: a library kernel holding one matmul whose product S is read only by one reduction kernel,
// over S's shape and reducing its last axis, through elementwise ops and reductions (no data movement of S);
// that kernel's one output P read only by a second matmul, as its left operand, not transposed, alone in its
// kernel or with an elementwise epilogue (a 2-D matmul's gemm kernel), which then becomes a loop kernel of its
// own after the attention kernel. The matmuls' operands each have the product's batch axes or none (a matrix
// shared by every batch item). Each
// candidate refused is a note in the plan with its reason; the notes that said those kernels were library
// kernels are dropped.

#include "compiler/fusion.h"
#include "ir/graph.h"

namespace kiln::compiler {

FusionPlan fuse_attention(const ir::Graph& graph, FusionPlan plan);

}  // namespace kiln::compiler
