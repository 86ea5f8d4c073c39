#pragma once
// Hazards of gradient mode (derivative_graph.h): points where the scalar
// function f is not differentiable, or where central finite differences
// along the direction cannot be trusted, so that a disagreement there is no
// bug. Judged on the float64 function at x and at x +- long_step v:
//   - a kink or jump within reach of the step: the operand of abs, relu,
//     sign, copysign (either operand), floor, ceil, round (near a
//     half-integer), a cast to an integer (near an integer) or to bool (near
//     0); the difference of the operands of maximum, minimum and of a
//     comparison (where() takes its condition from those); the quotient of
//     remainder, fmod and floor_divide near an integer; a near tie in a line
//     that reduce_max, reduce_min, argmax, argmin, cummax, cummin, sort,
//     argsort or top_k orders;
//   - a pole within reach, or exactly at it (where the rule's 0 * inf is
//     NaN, as in JAX: sqrt(relu(x)) at x < 0): the divisor of div,
//     remainder, fmod and floor_divide, the operand of log, sqrt and rsqrt at
//     0 and of log1p at -1, the base of pow at 0; a negative base of pow
//     whose exponent moves (its derivative is log(base));
//   - a value that is not finite at x or at a step from it, or beyond 1e150
//     (the derivative's products of such values overflow): the op that made
//     it;
//   - where none of the above is, difference quotients at the two steps that
//     differ by more than 1e-3 (f curves within the step, so the finite
//     differences cannot be trusted): no value to replace (-1).
// "Within reach": the distance from the kink at x is at most 4 times (a
// pole: 20 times) how far the quantity moves over the long step.
//
// The derivative graph that the executors run in the case's own float types
// has hazards of its own (hazards.h: the rules compare primal values, and a
// near tie there is judged differently by f32 executors and the reference).
// Those at primal values are reported here too; those at the derivative's
// own nodes come with value -1: no parameter can replace them.

#include "hazards.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::fuzz {

// The gradient hazards of `primal` (values of `primal`, or -1), as above. None if the reference or the autodiff
// transformation throws: the gradient check reports that.
std::vector<Hazard> find_gradient_hazards(const FuzzCase& primal);

// Replaces the hazards of `primal` (hazards.h's and the gradient hazards) by parameters with random inputs, up to
// 8 rounds, adding one to `counts` per replaced value under its reason. Returns false, counting the case under
// "skipped: " and the reason, if a hazard cannot be replaced (value -1) or hazards remain after 8 rounds.
bool remove_gradient_hazards(FuzzCase& primal, RandomSource& random, std::map<std::string, std::int64_t>& counts);

}  // namespace kiln::fuzz
