#pragma once
// Merges a loop into a later twin that computes all it does and more: two scan_loop or while_loop nodes of the
// same operands and attributes whose regions compute the same values, one returning some outputs besides (the
// stacked carries a scan's reverse-mode derivative adds, src/autodiff/control_rules.h: without this, a training
// step runs its forward loop twice). The earlier node takes the later one's regions, the later one's readers read
// the earlier one, and the later one goes. CSE leaves control nodes alone (it would have to compare regions); this
// is the comparison it needs for the case that matters.

#include "ir/graph.h"

namespace kiln::compiler {

// Rewrites `graph` as above; returns whether it changed.
bool merge_loops(ir::Graph& graph);

// Whether `a` and `b` compute the same values from the same parameters, b's outputs starting with a's (names,
// source locations and nodes no output needs aside).
bool computes_prefix_of(const ir::Graph& a, const ir::Graph& b);

}  // namespace kiln::compiler
