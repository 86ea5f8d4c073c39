#pragma once
// Products with one column -- a matrix times a vector, or a [m, k] by [k, 1] product -- rewritten as what they are:
// a multiply and a sum along each row, reduce_sum(a * x, last axis). A BLAS gemv (or a GEMM with one column) reads
// the matrix once and does two flops per element: memory-bound, and the JIT's row-reduction kernel reads the matrix
// at the copy rate with the multiply fused into it, where the library call does not (on this CPU, 2048^2 f32: the
// library's gemv 1.2 ms, the row kernel 0.6 ms). The reduction also fuses with what produced its operands.
//
// Products with one row -- a vector, or a [1, k] row, times a [k, n] matrix: a layer applied to one example, as in
// decoding a sequence a token at a time -- likewise, as sums down the matrix's columns, reduce_sum(x [k, 1] * w,
// first axis), or along its rows when it is transposed. As a GEMM with one row, they ran at a third of the memory
// rate or less (4096^2 f32 on Zen 3, two threads: x w 6.0 ms, x w^T 8.9 ms; the column and row kernels 2.8 and 1.9).
//
// f32 and f64 products whose left operand is not transposed (its rows are the reduced lines); batch axes of the left
// operand stay (the vector broadcasts over them); a product with one row takes a matrix without batch axes. Not a
// convolution's product (its left operand a concat of the windows): the gathered GEMM reads the windows where they
// lie, a reduction would need them written. The sums down columns only where the backend has column kernels (the
// CPU); a transposed matrix's rows everywhere. A lowering pass, after widen-half-precision (a widened bf16 product
// is an f32 one by then) and before fusion.

#include "compiler/fusion.h"
#include "ir/graph.h"

namespace kiln::compiler {

// Rewrites `graph` as above; returns whether it changed.
bool rewrite_matrix_vector_products(ir::Graph& graph, const BackendCapabilities& capabilities);

}  // namespace kiln::compiler
