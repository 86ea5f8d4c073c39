#pragma once
// Padding fusion, a fusion step (on the CPU after gather fusion): a loop kernel that reads a padded value --
// pad()'s concat of constants around one value, one concat per padded axis -- reads the unpadded value where it
// lies instead, and the constant wherever its index map falls on the padding, as XLA fuses a pad into its
// consumer's loop. The padded value is never written: a 3x3 max_pool with SAME padding was two copies of its whole
// input (one per padded axis) before its one loop kernel, and is that kernel alone.
//
// Folded: a padded value (nested paddings with the same constant followed down to the value they pad) read by a
// loop kernel, when the value under the padding is in memory (a parameter or another kernel's output). The
// kernel's members gain the concats, its inputs the unpadded value instead of the padded one (the CPU's row walk
// checks the padded axes' coordinates once per row, or lane by lane where the inner loop runs along one; a CUDA
// thread checks them for its element: codegen/cpu/padding_bounds.cpp). The concats, and every kernel left with no
// reader (the padding's constants), leave the plan.

#include "compiler/fusion.h"
#include "ir/graph.h"

namespace kiln::compiler {

FusionPlan fold_padding_into_loops(const ir::Graph& graph, FusionPlan plan);

}  // namespace kiln::compiler
