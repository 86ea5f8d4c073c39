#pragma once
// One iteration of a loop as a graph of its own: what the CPU JIT compiles a loop's generated driver around
// (compiled_loop.h). A scan_loop's step is its body. A while_loop's is its body followed by its condition on the
// carries the body returns, the condition's flag a last output: one run of the step's kernels both advances the
// carries and says whether to go on, and the condition's kernels fuse with the body's (the solver's flag is computed
// in the kernel that counts its iterations).

#include "ir/graph.h"

namespace kiln::compiler {

// The step of loop node `loop` (a while_loop or scan_loop) of `graph`: the body's parameters, its outputs and, for a
// while_loop, the condition's bool[] last. Named "<graph>.loop_<loop>".
ir::Graph loop_step(const ir::Graph& graph, ir::ValueId loop);

}  // namespace kiln::compiler
