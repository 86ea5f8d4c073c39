#pragma once
// Column fusion, a CPU fusion step after attention fusion: a reduction over a run of axes followed by one kept
// last axis -- reduce_sum(exp(x), {0}) of a [rows, columns] x, a mean over the tokens of [batch, tokens, width],
// the statistics of a batch norm, softmax over axis 0 -- is a library kernel in fuse()'s plan, reading its input
// from memory after a loop kernel wrote it. This pass makes the reduction join that loop kernel, which becomes a
// kernel of kind `column`: each work item takes a block of columns (and one index of the axes before the reduced
// ones) and walks the reduced rows in order, computing the loop kernel's values, writing its outputs as before,
// and folding the reduction's input into one accumulator per group of columns. The input is written only where
// something else reads it. The summation order of every column is the rows' order, the same for any thread count.
//
// The pattern: a library kernel holding one reduce_sum, reduce_mean, reduce_max, reduce_min or reduce_prod whose
// input and result have one dtype, reducing axes [first, rank - 2] of an input of rank >= 2, written by a loop
// kernel over exactly the input's shape. A reduction of a parameter stays a library kernel (its standard kernel
// reads it once already).

#include "compiler/fusion.h"
#include "ir/graph.h"

namespace kiln::compiler {

FusionPlan fuse_columns(const ir::Graph& graph, FusionPlan plan);

// The number of reduced axes when `reduction` reduces a run of axes ending just before its input's last axis
// (the shape the column kernel computes), else 0.
int column_reduced_axes(const ir::Graph& graph, const ir::Node& reduction);

}  // namespace kiln::compiler
