#pragma once
// Derivatives of control flow (cond, while_loop, scan_loop; ir/graph.h says what their operands, regions and
// results are), as JAX defines them. A control node's derivative is a control node of the same kind whose regions
// are the derivatives of its regions -- each region differentiated by the same linearize/transpose as any graph,
// so nested control flow and higher orders need nothing more:
//   forward mode   a cond of the branches' JVPs; a loop that carries each float carry's tangent beside it, its
//                  body the JVP of the old one.
//   reverse mode   a cond of the branches' VJPs; for a scan, a scan that stacks each step's carries and the
//                  products the way back needs (the residuals), then a scan in the other direction whose body
//                  recomputes the rest of the step from them (elementwise work, fused) and applies the step's
//                  VJP. Captures' cotangents are summed in carries of the backward scan, except one that is a
//                  product per step (a weight's x_t^T g_t): that is one product of the stacked operands after the
//                  loop. A while_loop has none: its trip count is known only when it has run (JAX refuses it as
//                  well).
// The forward node stays as the user traced it: the scan stacking the residuals is a second node, which the
// merge-loops pass folds the first into (compiler/merge_loops.h). docs/design-notes.md ("Control flow") has the
// measurements behind each choice.

#include "autodiff/differentiate.h"

#include <span>
#include <vector>

namespace kiln::autodiff {

// Linearize's rule for control node `value`: records a ControlCall in `program` and returns the tangent of each of
// the node's results (zero for those without one), given the tangents of its operands.
std::vector<Tangent> linearize_control(const ir::Graph& graph, LinearProgram& program, const Region& region,
                                       ValueId value, std::span<const Tangent> operand_tangents);

// Forward mode: adds the tangent control node to `graph`; returns the tangents of the call's tangent results (in
// ControlCall::tangent_results' order), given those of its tangent operands (in tangent_operands' order).
std::vector<ValueId> control_tangents(ir::Graph& graph, const ControlCall& call, const std::string& api,
                                      std::span<const ValueId> operand_tangents);

// Reverse mode: adds the nodes computing the cotangents of the call's tangent operands (in order) from those of
// its tangent results (in order). Throws kiln::ValueError for a while_loop.
std::vector<ValueId> control_cotangents(ir::Graph& graph, const ControlCall& call, const std::string& api,
                                        const std::string& location, std::span<const ValueId> result_cotangents);

}  // namespace kiln::autodiff
