#pragma once
// Hazards: values on which an f32 (or f64) executor may legitimately differ
// from the float64 reference by more than any tolerance, because a
// discontinuity turns a rounding error into a different answer (see
// src/reference/reference_evaluator.h and compare.h):
//   - the operand of floor, ceil, sign, a cast to an integer or bool, a
//     comparison, argmax or argmin, computed inexactly and within rounding distance
//     of the jump (floor(x*y) at x*y = 2.9999999);
//   - an inexact value near a singularity: the divisor of div, the operand
//     of log, sqrt, rsqrt, the base of pow (where the sign of a value near 0
//     decides between a number and NaN or inf), the operand of log1p near -1;
//     the inexact exponent of a negative base;
//   - an inexact value beyond the range of its dtype in float64 (f32 would
//     overflow to inf where the reference holds 1e40) or in its subnormal
//     range (where flushing is allowed).
// "Inexact" means the reference's error magnitude (reference::Value::
// magnitudes) is nonzero; exact values (parameters, constants, data movement
// and exact ops of them, integers) agree exactly and are never hazards.
//
// The generator replaces each hazard by a fresh parameter, which is exact;
// the shrinker rejects candidates that have hazards.
//
// Regions get the same care: the hazards are looked for in the case's graph
// with every region run inlined as the reference runs it (a cond's branch
// that its index picks, a while_loop's condition and body once per step, a
// scan_loop's body once per step), so that a value in a loop body is judged
// at every step, with the error it has gathered by then. A hazard in a region
// is replaced by a new parameter of the case captured into the region
// (fuzz_case.h: Replacement).

#include "fuzz_case.h"

#include <string>
#include <vector>

namespace kiln::fuzz {

class RandomSource;

struct Hazard {
  ir::ValueId value;   // the value to replace; -1: none can be (loops too long to judge; gradient_hazards.h)
  std::string reason;  // "operand of floor near an integer", ...
  // Empty: `value` is the case graph's. Else the region holding it, as Replacement::region_path.
  std::vector<std::int64_t> region_path = {};
};

// "%4", or "%4 in region 1 of %7" for a hazard in a region.
std::string describe_place(const Hazard& hazard);

// For each element of a `result` shape, the flat index of the element of
// `operand` it reads under NumPy broadcasting.
std::vector<std::int64_t> broadcast_sources(const Shape& operand, const Shape& result);

// The hazards of `fuzz_case` on its inputs (none if the reference throws:
// the differential check reports that).
std::vector<Hazard> find_hazards(const FuzzCase& fuzz_case);

// Replaces hazards by parameters with random inputs until there are none
// (or none that can be replaced). Returns how many values were replaced.
int remove_hazards(FuzzCase& fuzz_case, RandomSource& random);

// Whether the case's loops end within the steps that find_hazards judges (a
// few hundred; the generator's take a few): an edit inside a loop (the
// shrinker's) can make one that never ends, which the reference and the
// executors would run forever.
bool loops_end(const FuzzCase& fuzz_case);

}  // namespace kiln::fuzz
