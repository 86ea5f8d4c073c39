#pragma once
// Differentiation as a transformation of the graph being traced (DESIGN.md, "Transformations and regions"). A
// region of the graph -- the nodes a differentiated function added, from `begin` on -- is linearized at its traced
// point into a LinearProgram (each node's JVP rule); reverse mode then transposes that program into new nodes of
// the same graph (the adjoints), forward mode replays it with the given tangents. The result is an ordinary graph:
// simplify, CSE, the fusion planner, both executors and the float64 reference see nothing special, and since a
// derivative is nodes like any other, differentiating again (grad of grad) applies the same rules to it.

#include "autodiff/linear_program.h"
#include "trace/differentiation_marks.h"

#include <span>
#include <string>
#include <vector>

namespace kiln::autodiff {

struct Region {
  // Nodes before this are constants of the differentiation: values computed before the function was called, or
  // outside it (captured, closed over).
  ValueId begin = 0;
  // stop_gradient and custom_vjp within the region; null for none.
  const trace::DifferentiationMarks* marks = nullptr;
  // The api call differentiating ("grad", "vjp", "jvp") and the user's line, for errors.
  std::string api;
  std::string location;
};

// The derivative of a region's outputs with respect to its inputs, at the traced point.
struct Linearization {
  explicit Linearization(const ir::Graph& graph) : program(graph) {}
  LinearProgram program;
  std::vector<ir::Type> input_types;
  std::vector<ir::Type> output_types;
  std::vector<Tangent> output_tangents;  // zero where an output does not depend on the inputs
  const trace::DifferentiationMarks* marks = nullptr;
  std::string api, location;
};

// Linearizes the nodes of `graph` from region.begin on that `outputs` depend on, with respect to `inputs` (float
// values made in the region, each by no node but its own: the caller's fresh copies of the arguments). Adds to
// the graph the primal values the tangents need (cos(x) for sin(x), ...). Throws kiln::ValueError naming
// region.api and region.location for a host_call in the way.
Linearization linearize(ir::Graph& graph, const Region& region, std::span<const ValueId> inputs,
                        std::span<const ValueId> outputs);

// Reverse mode: the cotangents of the inputs (zeros where they have none) for `output_cotangents` (one per output,
// of its type), added to the graph as the transposed program.
std::vector<ValueId> transpose(ir::Graph& graph, const Linearization& linearization,
                               std::span<const ValueId> output_cotangents);

// Forward mode: the tangents of the outputs (zeros where they have none) for `input_tangents` (one per input, of
// its type), added to the graph. Throws kiln::ValueError for a custom_vjp call in the way (it has a reverse-mode
// derivative only, as in JAX).
std::vector<ValueId> apply_tangents(ir::Graph& graph, const Linearization& linearization,
                                    std::span<const ValueId> input_tangents);

}  // namespace kiln::autodiff
