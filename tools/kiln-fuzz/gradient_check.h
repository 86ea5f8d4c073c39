#pragma once
// Gradient mode's check of a fuzz case (kiln-fuzz --gradients): its scalar
// function f and f's derivatives by kiln's autodiff transformation
// (derivative_graph.h), checked two ways:
//   (a) the derivative graph, in the case's own float types, on the
//       executors (standard, JIT, ...) against the float64 reference, as
//       differential_check.h checks any graph: within graph_tolerance;
//   (b) the derivative graph of the float64 function (promote_to_f64), on
//       the reference, against central finite differences of f along the
//       direction v: gradient . v (reverse mode) and f's jvp (forward mode)
//       each against the Richardson extrapolation R = (4 D(h/2) - D(h)) / 3
//       of the difference quotients D(h) = (f(x + h v) - f(x - h v)) / 2h at
//       h = long_step. Allowed: 1e-6 of the scale (sum |g_k v_k|, or |R|),
//       plus twice |D(h) - D(h/2)| (an upper estimate of the error left by
//       f's curvature), plus float64 rounding in f divided by the step.
// The case should be free of hazards (gradient_hazards.h); the check does not
// look for them. Every failure has `gradient` set; (b)'s are the reference's
// mismatches "reverse mode vs finite differences" and "forward mode vs
// finite differences", and an exception of the transformation is the
// reference's (its error kind).

#include "differential_check.h"

#include <functional>
#include <vector>

namespace kiln::fuzz {

struct GradientCheckOptions {
  CheckOptions executors;
  // A test hook: edits each derivative graph once it is built (to plant a wrong derivative and see it caught).
  std::function<void(ir::Graph&)> tamper;
};

// (a): the derivative graph on the executors.
std::vector<Failure> check_derivative_executors(const FuzzCase& primal, const GradientCheckOptions& options,
                                                CheckTimes* times = nullptr);

// (b): the float64 derivatives against finite differences.
std::vector<Failure> check_finite_differences(const FuzzCase& primal, const GradientCheckOptions& options);

// Both, (b) first.
std::vector<Failure> check_gradients(const FuzzCase& primal, const GradientCheckOptions& options,
                                     CheckTimes* times = nullptr);

}  // namespace kiln::fuzz
