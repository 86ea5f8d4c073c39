#pragma once
// Concat fusion, a CPU fusion step after column fusion: a concat is a library kernel in fuse()'s plan, copying its
// operands into a new buffer after the kernels that computed them wrote each to a buffer of its own. This pass has
// those kernels write each operand straight into its slice of the concat's buffer (a placement: the operand's
// element at c is stored at c plus the operand's offset along the concat axis), as PyTorch Inductor's concat
// kernels do; the concat becomes a kernel of kind `assembled` that copies only what is left -- operands that are
// parameters, returned, read by another kernel, or repeated -- and runs nothing when nothing is. concat(exp(a),
// b * 2) is two kernels, each writing its half once, instead of three writing it twice.
//
// Placed: an operand written by a loop or reduction kernel as one of its element outputs (its shape is the kernel's
// iteration space), read by no other kernel, not returned, and appearing once among the concat's operands.

#include "compiler/fusion.h"
#include "ir/graph.h"

namespace kiln::compiler {

FusionPlan place_concat_operands(const ir::Graph& graph, FusionPlan plan);

}  // namespace kiln::compiler
