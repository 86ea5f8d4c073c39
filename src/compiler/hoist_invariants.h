#pragma once
// Loop-invariant code motion: what a while_loop's or scan_loop's regions compute from their captures alone (the
// values of the enclosing graph, the same at every step) is computed once, before the loop, and passed in as a
// capture. `transpose(w) * scale` in a loop body is one kernel per call instead of one per step.
//
// A value moves when every operand is a capture or another moved value and its op is pure and cannot fail on data
// (gather, take_along_axis and scatter_add check their indices: moved out of a loop that never runs, they could
// raise an error the loop would not have; host callbacks and control nodes stay). Constants stay where they are
// used (they cost nothing there, and the simplifier folds them), and so do broadcasts (read in place there). Only the
// values a step still reads move -- the frontier between invariant and varying work -- with what they need; what
// nothing reads after that goes. cond's branches run once: nothing to gain there. An optimization pass on the graph
// holding the loops; the regions are optimized when they are compiled (compile_regions in jit.cpp).

#include "ir/graph.h"

namespace kiln::compiler {

// Rewrites `graph` as above; returns whether it changed.
bool hoist_loop_invariants(ir::Graph& graph);

}  // namespace kiln::compiler
