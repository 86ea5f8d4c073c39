#pragma once
// Comparing an executor's output (standard kernels or JIT) with the
// reference evaluator's, for tests and the differential fuzzer:
//
//   auto expected = reference::evaluate(graph, inputs);
//   auto result = reference::compare(actual, expected[0], reference::default_tolerance(ir::Op::sin, DType::f32));
//   EXPECT_TRUE(result.ok) << result.message;

#include "ir/graph.h"
#include "reference/reference_evaluator.h"
#include "runtime/buffer.h"

#include <kiln/dtype.h>

#include <cstdint>
#include <string>

namespace kiln::reference {

// How far an actual float element may be from the expected one. An element
// passes if it is within ANY of the three bounds; all three are measured in
// the actual array's dtype, after rounding the expected value to it. The
// default, all zero, demands exact equality.
struct Tolerance {
  // |actual - expected| <= relative * max(|expected|, magnitude), where the
  // magnitude is Value::magnitudes (the condition of a sum, a matmul, or a
  // chain of ops; see reference_evaluator.h).
  double relative = 0;
  // |actual - expected| <= absolute.
  double absolute = 0;
  // Distance in units in the last place: the number of representable values
  // of the dtype between actual and expected (+0 and -0 are one value).
  double ulps = 0;
};

// The tolerance one op's result is held to, on inputs that are exact (for
// example parameters): its accuracy in the op table (ir/ops.def; exact, ulps(n)
// or reassociated). For a result of a chain of ops use graph_tolerance. Why
// each op has the accuracy it has:
//
//   integers, bools (every op)   exact     integer arithmetic has one answer
//   data movement, selection and exact-by-definition float ops: parameter,
//   constant, iota, neg, abs, sign, relu, floor, ceil, round, maximum, minimum,
//   comparisons, logical ops, where, cast, reduce_max, reduce_min, argmax, argmin, cummax, cummin,
//   shape ops, host_call, nonzero
//                                exact     no rounding happens (cast rounds
//                                          the same way the reference does)
//   add, sub, mul, square        0 ulps    IEEE basic ops are correctly rounded, and
//                                          rounding the double result to f32 gives the
//                                          same float (53 >= 2*24 + 2 bits)
//   sqrt                         1 ulp     correctly rounded in IEEE; 1 ulp admits
//                                          x * rsqrt(x) with a Newton step
//   div, rsqrt                   2 ulps    x * (1/y) and 1/sqrt(x) round twice
//                                          (<= 1.5 ulps); hardware rsqrt + Newton
//   sin, cos, exp, log           4 ulps    the vector math we target: glibc libmvec
//                                          documents <= 4 ulps, SLEEF u10 <= 1, u35 <= 3.5
//   tanh, sigmoid, erf, erfc,    8 ulps    composites of the above (sigmoid =
//   log1p, expm1, atan, pow                1/(1 + exp(-x)): exp's 4 ulps plus two
//                                          roundings) or short rational approximations
//                                          (Eigen/XLA-style tanh, erf); vector pow as
//                                          exp(y log x); CUDA's erfcf 4, erfc 5
//   reduce_sum, reduce_mean, matmul, cumsum
//                                relative 1e-5 (f32), 1e-12 (f64) of the magnitude
//                                          (sum of |terms|): reassociation only. A
//                                          blocked or pairwise sum errs by
//                                          ~log2(n) u sum|t|, a sequential one by
//                                          ~sqrt(n) u sum|t| on random data (u =
//                                          2^-24 resp. 2^-53); 1e-5 is ~170 u of f32,
//                                          enough for sequential sums of random data
//                                          up to ~10^4 terms and blocked ones far
//                                          beyond; 1e-12 is ~9000 u of f64, and also
//                                          covers the reference's own double rounding.
//                                          TF32 matmuls (10-bit mantissas) need ~2e-3.
//                                          A running sum (cumsum) is sequential: the
//                                          same ~10^4 terms on random data.
//   reduce_prod, cumprod         relative 1e-5 / 1e-12 of |result|: a product of n
//                                          terms errs by <= n u relative
// bf16 and f16 (computed in f32, rounded once per op, as the reference rounds):
// ulps count in their own units; the relative bound is four units of their
// rounding, 2^-6 (bf16) and 2^-9 (f16): an f32 sum rounded to 16 bits lands on
// one of the two neighbours of the exact value, and a later op may carry that.
// Every bound that is not exact also accepts an absolute error up to the
// smallest normal number of the dtype (2^-126, 2^-1022, f16's 2^-14): kernels
// may flush subnormal results to zero (GPU -ftz, CPU FTZ/DAZ).
Tolerance default_tolerance(ir::Op op, DType dtype);

// The tolerance for value `value` of `graph` computed from exact inputs: exact
// if every float op it depends on is exact; the op's default_tolerance if it
// depends on a single inexact op and every float value on the way has its
// dtype; otherwise the chain bound of the least precise dtype on the way,
// relative 1e-5 (f32), 1e-12 (f64), 2^-6 (bf16), 2^-9 (f16) of the propagated
// magnitude, which covers any number of ops of <= 8 ulps each to
// first order (each op's own rounding enters the magnitude); 1e-5 also for an
// f64 value computed from an inexact f32 one (an f64 cast of an f32 matmul
// carries the matmul's f32 rounding). Results of
// comparisons, casts to integers and argmax are held exact: keep their float
// operands away from the jumps (see reference_evaluator.h).
Tolerance graph_tolerance(const ir::Graph& graph, ir::ValueId value);

struct Comparison {
  bool ok = false;
  // On failure: what differs (dtype, shape, or the elements: how many, the
  // first failing multi-index with actual vs expected and its errors in
  // ulps, relative and absolute terms, and the largest errors overall). On
  // success: a one-line summary of the largest errors.
  std::string message;
  std::int64_t mismatches = 0;  // elements outside the tolerance
  // Largest errors over the elements where both values are finite.
  double max_absolute_error = 0;
  double max_relative_error = 0;  // against max(|expected|, magnitude)
  double max_ulps = 0;
};

// Compares `actual` (a CPU array) with `expected`. Dtypes and shapes must
// match exactly. NaN matches NaN of any payload; an infinity (on either side)
// matches only the same infinity; +0 equals -0. A bool byte that is not 0 or 1
// is a mismatch. Integers and bools must be equal.
Comparison compare(const runtime::Array& actual, const Value& expected, const Tolerance& tolerance);

}  // namespace kiln::reference
