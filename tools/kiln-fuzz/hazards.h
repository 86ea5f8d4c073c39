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

#include "fuzz_case.h"

#include <string>
#include <vector>

namespace kiln::fuzz {

class RandomSource;

struct Hazard {
  ir::ValueId value;   // the value to replace
  std::string reason;  // "operand of floor near an integer", ...
};

// For each element of a `result` shape, the flat index of the element of
// `operand` it reads under NumPy broadcasting.
std::vector<std::int64_t> broadcast_sources(const Shape& operand, const Shape& result);

// The hazards of `fuzz_case` on its inputs (none if the reference throws:
// the differential check reports that).
std::vector<Hazard> find_hazards(const FuzzCase& fuzz_case);

// Replaces hazards by parameters with random inputs until there are none.
// Returns how many values were replaced.
int remove_hazards(FuzzCase& fuzz_case, RandomSource& random);

}  // namespace kiln::fuzz
