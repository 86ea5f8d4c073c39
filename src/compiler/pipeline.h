#pragma once
// The optimization pipeline before fusion, as a flat list of passes run to a
// fixed point:
//
//   simplify   constant folding, algebraic identities
//   cse        common subexpression elimination
//   dce        dead code elimination
//
// In debug builds the verifier runs after every pass.

#include "compiler/pass.h"
#include "ir/graph.h"

#include <functional>
#include <span>
#include <string_view>

namespace kiln::compiler {

std::span<const Pass> optimization_passes();

// Called after each pass that changed the graph (KILN_DUMP_TO uses it).
using PassObserver = std::function<void(std::string_view pass, const ir::Graph& graph)>;

// Runs the passes until none changes the graph (or a round limit is hit).
void optimize(ir::Graph& graph, const PassObserver& observer = {});

}  // namespace kiln::compiler
