// The trigonometric, inverse trigonometric and hyperbolic functions of ops.h, written with kiln's primitives so
// that the JIT fuses them, each in a form that neither cancels nor overflows before the exact result does. The
// float64 reference checks them through their parts; tests/api/elementary_functions_test.cpp checks each against
// the exact function.

#include "api/dispatch.h"

#include <kiln/ops.h>

#include <limits>
#include <numbers>

namespace kiln {
namespace {

using detail::checked_rank;

// x in the dtype its float math computes in: itself for floats, f32 for integers and bools.
Tensor floating(const Tensor& x, const char* op, const Location& location) {
  checked_rank(x, op, location);
  return detail::cast_to(x, floating_result(x.dtype()), location);
}

// Whether x's sign bit is set: x < 0, or x is -0 (1 / -0 is -inf; 1 / -inf is -0, hence both tests). NaN: false;
// every caller's value is NaN then.
Tensor sign_bit(const Tensor& x, const Location& location) {
  return logical_or(lt(x, 0, location), lt(div(1, x, location), 0, location), location);
}

// f(x) of an odd f with f(0) = 0 from its `magnitude` f(|x|): negated for negative x, and x itself at +-0 (which
// keeps -0 without a division to find its sign).
Tensor odd(const Tensor& magnitude, const Tensor& x, const Location& location) {
  return where(lt(x, 0, location), neg(magnitude, location), where(eq(x, 0, location), x, magnitude, location),
               location);
}

// Beyond this, sinh and cosh are e^|x| / 2 to well below an ULP, and e^|x| itself would overflow from 88.72 while
// e^|x| / 2 stays finite up to 89.41: there they are w (w / 2), w = e^(|x| / 2).
constexpr double exp_overflow_margin = 88;
// Beyond this, x^2 + 1 is x^2 to double precision and x^2 could overflow a float: asinh and acosh are
// log(x) + log(2) there.
constexpr double logarithmic_from = 0x1p28;

Tensor half_exponential(const Tensor& magnitude, const Location& location) {
  const Tensor half = exp(mul(magnitude, 0.5, location), location);
  return mul(half, mul(half, 0.5, location), location);
}

}  // namespace

// For |y| <= |x|, atan(|y| / |x|), else pi/2 - atan(|x| / |y|): the quotient is at most 1, so it never overflows or
// underflows to a wrong angle; then the quadrant. 0 / 0 (both zero) is an angle of 0 and inf / inf (both infinite)
// one of pi/4, as C's atan2 gives them.
Tensor atan2(const Tensor& y, const Tensor& x, Location location) {
  checked_rank(y, "atan2", location);
  checked_rank(x, "atan2", location);
  const DType dtype = floating_result(promote_types(y.dtype(), x.dtype()));
  const Tensor ordinate = detail::cast_to(y, dtype, location), abscissa = detail::cast_to(x, dtype, location);
  const Tensor height = abs(ordinate, location), width = abs(abscissa, location);
  const Tensor larger = maximum(height, width, location), smaller = minimum(height, width, location);
  Tensor ratio = div(smaller, larger, location);
  ratio = where(eq(larger, 0, location), 0.0, ratio, location);
  ratio = where(eq(smaller, std::numeric_limits<double>::infinity(), location), 1.0, ratio, location);
  Tensor angle = atan(ratio, location);  // in [0, pi/4]
  angle = where(gt(height, width, location), sub(std::numbers::pi / 2, angle, location), angle, location);
  angle = where(sign_bit(abscissa, location), sub(std::numbers::pi, angle, location), angle, location);
  return where(sign_bit(ordinate, location), neg(angle, location), angle, location);
}

Tensor tan(const Tensor& x, Location location) {
  const Tensor value = floating(x, "tan", location);
  return div(sin(value, location), cos(value, location), location);
}

// asin(x) = atan2(x, sqrt(1 - x^2)), with 1 - x^2 as (1 - x)(1 + x): exact factors near +-1, where 1 - x^2 would
// lose the digits of x's distance to 1. |x| > 1 makes the root, and so the result, NaN.
Tensor asin(const Tensor& x, Location location) {
  const Tensor value = floating(x, "asin", location);
  const Tensor cosine = sqrt(mul(sub(1, value, location), add(value, 1, location), location), location);
  return atan2(value, cosine, location);
}

Tensor acos(const Tensor& x, Location location) {
  const Tensor value = floating(x, "acos", location);
  const Tensor sine = sqrt(mul(sub(1, value, location), add(value, 1, location), location), location);
  return atan2(sine, value, location);
}

// sinh(a) = (e^a - e^-a) / 2 = (u + u / (u + 1)) / 2 with u = e^a - 1 (expm1): two positive terms, so small a
// keeps its relative accuracy where e^a - e^-a would cancel.
Tensor sinh(const Tensor& x, Location location) {
  const Tensor value = floating(x, "sinh", location);
  const Tensor magnitude = abs(value, location);
  const Tensor growth = expm1(minimum(magnitude, exp_overflow_margin, location), location);
  const Tensor moderate = mul(add(growth, div(growth, add(growth, 1, location), location), location), 0.5, location);
  const Tensor large = half_exponential(magnitude, location);
  return odd(where(gt(magnitude, exp_overflow_margin, location), large, moderate, location), value, location);
}

Tensor cosh(const Tensor& x, Location location) {
  const Tensor value = floating(x, "cosh", location);
  const Tensor magnitude = abs(value, location);
  const Tensor growth = exp(minimum(magnitude, exp_overflow_margin, location), location);
  const Tensor moderate = add(mul(growth, 0.5, location), div(0.5, growth, location), location);
  return where(gt(magnitude, exp_overflow_margin, location), half_exponential(magnitude, location), moderate, location);
}

// asinh(a) = log(a + sqrt(a^2 + 1)) = log1p(a + a^2 / (1 + sqrt(1 + a^2))): log1p keeps small a accurate.
Tensor asinh(const Tensor& x, Location location) {
  const Tensor value = floating(x, "asinh", location);
  const Tensor magnitude = abs(value, location);
  const Tensor bounded = minimum(magnitude, logarithmic_from, location);
  const Tensor square_ = mul(bounded, bounded, location);
  const Tensor moderate =
      log1p(add(bounded, div(square_, add(sqrt(add(square_, 1, location), location), 1, location), location), location),
            location);
  const Tensor large = add(log(magnitude, location), std::numbers::ln2, location);
  return odd(where(gt(magnitude, logarithmic_from, location), large, moderate, location), value, location);
}

// acosh(x) = log(x + sqrt(x^2 - 1)) = log1p((x - 1) + sqrt((x - 1)(x + 1))): x - 1 is exact near 1, where the
// result is small.
Tensor acosh(const Tensor& x, Location location) {
  const Tensor value = floating(x, "acosh", location);
  const Tensor bounded = minimum(value, logarithmic_from, location);
  const Tensor excess = sub(bounded, 1, location);
  const Tensor moderate =
      log1p(add(excess, sqrt(mul(excess, add(bounded, 1, location), location), location), location), location);
  const Tensor large = add(log(value, location), std::numbers::ln2, location);
  return where(gt(value, logarithmic_from, location), large, moderate, location);
}

// atanh(a) = log((1 + a) / (1 - a)) / 2 = log1p(2a / (1 - a)) / 2, on |x| with the sign put back: 1 - a is exact
// near 1, and log1p keeps small a accurate.
Tensor atanh(const Tensor& x, Location location) {
  const Tensor value = floating(x, "atanh", location);
  const Tensor magnitude = abs(value, location);
  const Tensor ratio = div(mul(magnitude, 2, location), sub(1, magnitude, location), location);
  return odd(mul(log1p(ratio, location), 0.5, location), value, location);
}

}  // namespace kiln
