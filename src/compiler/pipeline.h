#pragma once
// The compiler's passes (pass.h) in order. The optimization passes run to a fixed point:
//
//   simplify         constant folding, algebraic identities
//   cse              common subexpression elimination
//   dce              dead code elimination
//
// then the lowering passes once each:
//
//   fuse             the kernel plan (fusion.h): which nodes each generated kernel computes, and why
//   assign-buffers   where each value that crosses kernels lives during a call (buffer_assignment.h)
//   generate         the source of the device's kernels (codegen/cpu, codegen/cuda)
//
// In debug builds the verifier runs after every optimization pass.

#include "compiler/pass.h"
#include "ir/graph.h"

#include <span>

namespace kiln::compiler {

std::span<const Pass> optimization_passes();
std::span<const Pass> lowering_passes();

// Runs the optimization passes until none changes the program (or a round limit is hit).
void optimize(Program& program, const PassObserver& observer = {});
// The same for a graph alone (tests and tools that optimize before planning by hand).
void optimize(ir::Graph& graph);

// Runs the lowering passes in order on an optimized program.
void run_lowering(Program& program, const PassObserver& observer = {});

}  // namespace kiln::compiler
