#pragma once
// Squeeze sinking, a pass after the optimization pipeline: a reduction over the trailing axes without keepdims,
// read by elementwise ops of its own shape, becomes the reduction with keepdims squeezed by a reshape, and the
// reshape moves past those ops, which then compute one value per row of the reduction's input:
//
//   sqrt(reduce_sum(x * x, {-1}))                 -> reshape(sqrt(reduce_sum(x * x, {-1}, keepdims)), [rows])
//   m + log(reduce_sum(exp(x - expand_dims(m))))  -> the same with m and the sum of shape [rows, 1]
//
// The fusion pass keeps per-row values in a row kernel only in the row shape (size 1 on the reduced axes): a
// value of the squeezed shape [rows] reads, broadcast NumPy-style against the input, as one value per column.
// Squeezed at the end instead, the ops run in the reduction's kernel (the reshape is a view of its result), as
// in kiln's own composites (reduce_logsumexp), instead of a kernel of their own after it.
//
// A squeeze of such a row value that is already in the graph (kiln's composites keep the axes and squeeze at the
// end: reduce_std(x, {-1}) + 1) moves past the elementwise ops after it in the same way.
//
// The ops' other operands are reshaped to match (a view): a value of the squeezed shape gets the unit axes, a
// scalar stays. Ops that broadcast the squeezed value to a larger shape, and reductions of other axes, are left
// alone.

#include "ir/graph.h"

namespace kiln::compiler {

// True if the graph changed (the reductions and reshapes left without uses are for dce to remove).
bool sink_squeezes_of_reductions(ir::Graph& graph);

}  // namespace kiln::compiler
