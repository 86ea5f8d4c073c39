// kiln's vectorized double-precision math: exp, log, sin, cos, tanh, erf, erfc and
// sigmoid on kLanes doubles (f64v, two registers), the f64 counterpart of vector_math.h;
// and pow for floats, which it computes in double.
//
// The same contracts as vector_math.h: used by the standard CPU kernels and embedded
// verbatim into every JIT-generated translation unit (after vector_math.h), so both
// executors get the same bits; self-contained, standard headers only; every
// multiply-add that is not exact is an explicit fused one (mul_add), so the bits do not
// depend on the compiler's contraction; IEEE special values as C's <math.h>, NaN
// propagates, sin, tanh and erf keep the sign of zero; a scalar overload runs the
// vector code on a broadcast value. Without hardware FMA the polynomials round twice
// per step (the range reductions use exact products either way).
//
// Before this header, f64 transcendentals called libm once per element (glibc's
// correctly rounded or nearly so, but scalar): f64 gelu (tanh form) over 4M elements
// took 61 ms in the JIT on 2 threads, 4.6 ms with it. Accuracy against long double
// references, in ULPs of the double result (measured maxima in docs/vector_math.md,
// "Double precision"): sin, cos, exp, log <= 2; tanh, erf, erfc, sigmoid, log1p, expm1 <= 4
// (erfc's in ULPs of erfc itself, down through the denormals; log1p 1.44 and expm1 2.37
// measured, from log and exp).
//
// Method: the classic range reductions with Taylor series where the reduced argument
// is small enough for them (truncation error at most 4e-18 relative, 0.04 ULP),
// least-squares Chebyshev fits for tanh and erf near 0, Chebyshev series for erf's
// erfc(x) e^(x^2), and Chebyshev interpolants in powers of their argument for erfc;
// scripts/vector-math-f64-coefficients computes every constant (mpmath, 60 digits,
// rounded to double once).

#ifndef KILN_KERNELS_CPU_VECTOR_MATH_F64_H_
#define KILN_KERNELS_CPU_VECTOR_MATH_F64_H_

#include "kernels/cpu/vector_math.h"

#include <cstdint>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::vector_math {

// kLanes doubles, two registers: the JIT's vector of f64 (its vectors of every type
// have kLanes lanes).
using f64v = double __attribute__((vector_size(2 * kRegisterBytes)));
using i64v = std::int64_t __attribute__((vector_size(2 * kRegisterBytes)));
using u64v = std::uint64_t __attribute__((vector_size(2 * kRegisterBytes)));

// ---------------------------------------------------------------------------------
// Loads, stores, lane utilities (the f32v ones, for doubles).

[[gnu::always_inline]] inline f64v load(const double* source) {
  f64v value;
  __builtin_memcpy(&value, source, sizeof(value));
  return value;
}
[[gnu::always_inline]] inline void store(double* destination, f64v value) {
  __builtin_memcpy(destination, &value, sizeof(value));
}
// The first `count` doubles (0 <= count <= kLanes); the other lanes are 0.
[[gnu::always_inline]] inline f64v load_partial(const double* source, int count) {
  f64v value = {};
  if (count > 0) __builtin_memcpy(&value, source, sizeof(double) * static_cast<unsigned>(count));
  return value;
}
[[gnu::always_inline]] inline void store_partial(double* destination, f64v value, int count) {
  if (count > 0) __builtin_memcpy(destination, &value, sizeof(double) * static_cast<unsigned>(count));
}
[[gnu::always_inline]] inline f64v broadcast(double value) { return lanes_of<f64v>(value); }

// The math. A JIT module with no f64 transcendental and no pow defines KILN_JIT_DOUBLE_MATH as 0 and leaves
// it out: it is half of what GCC parses of the prelude (31 of 64 ms), ~15% of such a module's compile time.
#if !defined(KILN_JIT_DOUBLE_MATH) || KILN_JIT_DOUBLE_MATH

namespace detail_f64 {

// The functions work on one register of doubles (f64h: 8 with AVX-512, 4 with AVX2),
// and the f64v ones below apply them to each half: GCC handles vectors wider than the
// registers poorly (vector_math.h, kRegisterBytes). (vector_math.h's float sin/cos
// reduce in double without FMA: the register-of-doubles types and the reduction
// constants shared with it are its.)
using detail::f64h;
using detail::u64h;
using i64h = std::int64_t __attribute__((vector_size(kRegisterBytes)));
inline constexpr int kHalfLanes = kLanes / 2;

[[gnu::always_inline]] inline f64h broadcast(double value) { return lanes_of<f64h>(value); }
[[gnu::always_inline]] inline f64h select(i64h mask, f64h if_true, f64h if_false) {
  return select_lanes(mask, if_true, if_false);
}
// True if any lane of the mask is nonzero.
[[gnu::always_inline]] inline bool any(i64h mask) { return any_lane(mask); }
[[gnu::always_inline]] inline u64h to_bits(f64h value) { return __builtin_bit_cast(u64h, value); }
[[gnu::always_inline]] inline f64h from_bits(u64h bits) { return __builtin_bit_cast(f64h, bits); }
[[gnu::always_inline]] inline f64h abs(f64h value) { return from_bits(to_bits(value) & 0x7fffffffffffffffu); }

// Correctly rounded a * b + c in every lane, as fma(f32v): the AVX-512 or AVX2
// instruction through its builtin, else the lane loop (a library call per lane
// without hardware FMA, where only square_error would use it; see mul_add).
[[gnu::always_inline]] inline f64h fma(f64h a, f64h b, f64h c) {
#if defined(__AVX512F__)
  return __builtin_ia32_vfmaddpd512_mask(a, b, c, static_cast<unsigned char>(0xff), 4);
#elif defined(__AVX__) && defined(__FMA__)
  return __builtin_ia32_vfmaddpd256(a, b, c);
#else
  f64h result = {};
  for (int lane = 0; lane < kHalfLanes; ++lane) result[lane] = __builtin_fma(a[lane], b[lane], c[lane]);
  return result;
#endif
}

// a * b + c for polynomials: fused with hardware FMA, else a multiply and an add.
[[gnu::always_inline]] inline f64h mul_add(f64h a, f64h b, f64h c) {
  if constexpr (kHardwareFma) {
    return fma(a, b, c);
  } else {
    const f64h product = a * b;
    return product + c;
  }
}

inline constexpr double kInfinity = __builtin_inf();
inline constexpr double kQuietNaN = __builtin_nan("");
// Adding then subtracting 1.5 * 2^52 rounds a double of magnitude < 2^51 to the
// nearest integer, and the low bits of the sum hold that integer.
using detail::kRoundMagicDouble;

template <int First = 0, int N>
[[gnu::always_inline]] inline f64h horner(f64h x, const double (&coefficients)[N]) {
  if constexpr (First == N - 1) {
    return broadcast(coefficients[First]);
  } else {
    return mul_add(horner<First + 1>(x, coefficients), x, broadcast(coefficients[First]));
  }
}

// sum_j coefficients[First + j] x^j by Estrin's scheme: the terms in pairs c + c' x, the
// pairs in pairs with x^2, and so on with x^4, x^8, x^16 (squares[k] = x^(2^k)). The chain
// of dependent multiply-adds is about log2(N) long instead of Horner's N: for long
// polynomials whose latency, not their count of operations, bounds a loop.
template <int First, int Last, int N>
[[gnu::always_inline]] inline f64h estrin_terms(const f64h (&squares)[5], const double (&coefficients)[N]) {
  if constexpr (Last - First == 1) {
    return broadcast(coefficients[First]);
  } else {
    // The lower part takes the largest power of two of terms below the count, 2^level.
    constexpr int level = [] {
      int level = 0;
      while ((2 << level) < Last - First) ++level;
      return level;
    }();
    constexpr int middle = First + (1 << level);
    return mul_add(estrin_terms<middle, Last>(squares, coefficients), squares[level],
                   estrin_terms<First, middle>(squares, coefficients));
  }
}
template <int First = 0, int N>
[[gnu::always_inline]] inline f64h estrin(f64h x, const double (&coefficients)[N]) {
  static_assert(N - First <= 32, "squares up to x^16");
  f64h squares[5] = {x};
  for (int k = 1; k < 5; ++k) squares[k] = squares[k - 1] * squares[k - 1];
  return estrin_terms<First, N>(squares, coefficients);
}

// The integer held in the low bits of `shifted` = value + kRoundMagicDouble.
[[gnu::always_inline]] inline i64h rounded_integer(f64h shifted) {
  return __builtin_bit_cast(i64h, to_bits(shifted) - to_bits(broadcast(kRoundMagicDouble)));
}
// 2^n for integer lanes n in [-1022, 1023].
[[gnu::always_inline]] inline f64h power_of_two(i64h n) { return from_bits(__builtin_bit_cast(u64h, n + 1023) << 52); }
[[gnu::always_inline]] inline f64h with_sign_of(f64h magnitude, f64h sign_source) {
  return from_bits(to_bits(magnitude) | (to_bits(sign_source) & 0x8000000000000000u));
}

// ---- exp and expm1 ----------------------------------------------------------------
// k = round(x / ln2), r = x - k ln2 in [-ln2/2, ln2/2] (about; rounding may push it a
// little past): ln2 in two parts, k * kLn2High exact (11 + 42 bits) and so is
// x - k * kLn2High (Cody and Waite). e^r - 1 = r + r^2 P(r), P the Taylor series of
// (e^r - 1 - r) / r^2 to r^11 (truncation 4e-18 relative at |r| = 0.35).
inline constexpr double kLog2e = 0x1.71547652b82fep+0;
inline constexpr double kLn2High = 0x1.62e42fefa3800p-1;  // 42 significant bits
inline constexpr double kLn2Low = 0x1.ef35793c76730p-45;  // ln2 - kLn2High
inline constexpr double kExpTaylor[] = {0x1.0000000000000p-1,  0x1.5555555555555p-3,  0x1.5555555555555p-5,
                                        0x1.1111111111111p-7,  0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13,
                                        0x1.a01a01a01a01ap-16, 0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22,
                                        0x1.ae64567f544e4p-26, 0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33};
// e^x = 2^(k/2) * 2^(k - k/2) * e^r: exact powers of two, applied one after the other
// so that a denormal result rounds once and a result past DBL_MAX is inf. x is clamped
// to [-746, 710] first (exp rounds to 0 and inf beyond; NaN passes through).
inline constexpr double kExpClampHigh = 710.0;
inline constexpr double kExpClampLow = -746.0;

struct Reduced {
  f64h r;  // x - k ln2
  i64h k;
};
[[gnu::always_inline]] inline Reduced reduce_ln2(f64h x) {
  const f64h shifted = mul_add(x, broadcast(kLog2e), broadcast(kRoundMagicDouble));
  const f64h k = shifted - kRoundMagicDouble;
  const f64h exact = x - k * kLn2High;
  return {mul_add(k, broadcast(-kLn2Low), exact), rounded_integer(shifted)};
}
// e^r - 1 for the reduced r.
[[gnu::always_inline]] inline f64h expm1_reduced(f64h r) { return mul_add(r * r, horner(r, kExpTaylor), r); }

// Whether any lane has |x| > 704 (e^x near or past the ends of the normal doubles), or is infinite or NaN: one
// integer comparison of |x|'s bits, which are above 704's for all of those.
inline constexpr std::uint64_t kExpNormalLimitBits = 0x4086000000000000u;  // 704.0
[[gnu::always_inline]] inline bool any_outside_exp_normal_range(f64h x) {
  const i64h magnitude_bits = __builtin_bit_cast(i64h, to_bits(x) & 0x7fffffffffffffffu);
  return any(greater(magnitude_bits, static_cast<std::int64_t>(kExpNormalLimitBits)));
}

// value * 2^k, rounded once: where every result is normal (`normal`), one exact multiplication; otherwise
// two, by 2^(k/2) and 2^(k - k/2), so that a denormal result rounds once and one past DBL_MAX is inf.
[[gnu::always_inline]] inline f64h times_power_of_two(f64h value, i64h k, bool normal) {
  if (normal) [[likely]]
    return value * power_of_two(k);
  const i64h half = k >> 1;
  return value * power_of_two(half) * power_of_two(k - half);
}

[[gnu::always_inline]] inline f64h exp(f64h x) {
  // Usual arguments need no clamps, and e^x is normal.
  const bool usual = !any_outside_exp_normal_range(x);
  if (!usual) {
    x = select(greater(x, kExpClampHigh), broadcast(kExpClampHigh), x);
    x = select(less(x, kExpClampLow), broadcast(kExpClampLow), x);
  }
  const Reduced reduced = reduce_ln2(x);
  return times_power_of_two(expm1_reduced(reduced.r) + 1.0, reduced.k, usual);
}

// e^x - 1 for x in [1.25, 44] (what tanh needs): 2^k (e^r - 1) + (2^k - 1), with
// 2^k (e^r - 1) exact and 2^k - 1 exact up to k = 53, so the sum rounds once.
[[gnu::always_inline]] inline f64h expm1_nonnegative(f64h x) {
  const Reduced reduced = reduce_ln2(x);
  const f64h scale = power_of_two(reduced.k);
  return mul_add(scale, expm1_reduced(reduced.r), scale - 1.0);
}

// ---- log --------------------------------------------------------------------------
// x = 2^e m, m in [sqrt(1/2), sqrt(2)) from the bits (denormals scaled by 2^54 first),
// f = m - 1 (exact), s = f / (2 + f), log1p(f) = 2 atanh(s) = f - (h - s (h + R)) with
// h = f^2/2 and R = sum 2 s^(2k) / (2k + 1) to k = 11 (truncation 5e-19 relative at
// |s| = 0.172); e ln2 is added as e * kLn2High (exact) plus e * kLn2Low with the small
// terms, so the large terms f and e * kLn2High are never rounded before the last sum
// (the arrangement of fdlibm's log).
inline constexpr std::uint64_t kSqrtHalfBits = 0x3fe6a09e667f3bcd;  // double(sqrt(1/2))
inline constexpr double kLogAtanhTaylor[] = {0x1.5555555555555p-1, 0x1.999999999999ap-2, 0x1.2492492492492p-2,
                                             0x1.c71c71c71c71cp-3, 0x1.745d1745d1746p-3, 0x1.3b13b13b13b14p-3,
                                             0x1.1111111111111p-3, 0x1.e1e1e1e1e1e1ep-4, 0x1.af286bca1af28p-4,
                                             0x1.8618618618618p-4, 0x1.642c8590b2164p-4};

[[gnu::always_inline]] inline f64h log(f64h x) {
  const i64h denormal = less(x, 0x1p-1022) & greater(x, 0);
  const f64h scaled = select(denormal, x * 0x1p54, x);
  const u64h offset = to_bits(scaled) - kSqrtHalfBits;
  // e = offset >> 52 (arithmetic) as a double, through operations every target has (AVX2 lacks the 64-bit
  // arithmetic shift and the 64-bit integer conversion; GCC did both lane by lane): offset + 2^63, shifted
  // logically, is e + 2048 in [0, 4096), and as the low bits of 2^52's significand it reads 2^52 + e + 2048.
  const u64h biased = ((offset ^ 0x8000000000000000u) >> 52) + 0x4330000000000000u;
  const f64h e = (from_bits(biased) - (0x1p52 + 2048.0)) - select(denormal, broadcast(54.0), broadcast(0.0));
  const f64h m = from_bits((offset & 0x000fffffffffffffu) + kSqrtHalfBits);
  const f64h f = m - 1.0;
  const f64h s = f / (f + 2.0);
  const f64h z = s * s;
  const f64h half_square = 0.5 * f * f;
  const f64h atanh_tail = mul_add(z, horner(z, kLogAtanhTaylor), half_square);  // h + R
  const f64h small = mul_add(s, atanh_tail, e * kLn2Low);
  f64h result = e * kLn2High - ((half_square - small) - f);
  result = select(equal(x, kInfinity), x, result);
  result = select(equal(x, 0), broadcast(-kInfinity), result);
  result = select(less(x, 0), broadcast(kQuietNaN), result);
  return select(is_nan(x), x, result);
}

// ---- sin / cos --------------------------------------------------------------------
// j = round(x 2/pi), r = x - j pi/2 with pi/2 in three parts (33 + 33 + 53 bits; the
// first two products are exact for |j| < 2^20, and x - j * kPiOver2High is exact),
// kept as a sum of two doubles (see sin_cos_fast); |r| <= pi/4 (about).
// sin(r) = r + r^3 S(r^2), S the Taylor series to r^17; cos(r) = w + ((1 - w) - r^2/2
// + r^4 C(r^2)), w = 1 - r^2/2, C to r^18 (the parenthesis recovers w's rounding
// error; fdlibm's arrangement). Truncation about 1e-19 relative at |r| = pi/4. Beyond
// kTrigFastLimit the lanes are recomputed with libm.
using detail::kPiOver2High;  // 33 significant bits
using detail::kTwoOverPiDouble;
inline constexpr double kPiOver2Part2 = 0x1.0b4611a600000p-34;
inline constexpr double kPiOver2Part3 = 0x1.3198a2e037073p-69;
inline constexpr double kSinTaylor[] = {-0x1.5555555555555p-3,  0x1.1111111111111p-7,   -0x1.a01a01a01a01ap-13,
                                        0x1.71de3a556c734p-19,  -0x1.ae64567f544e4p-26, 0x1.6124613a86d09p-33,
                                        -0x1.ae7f3e733b81fp-41, 0x1.952c77030ad4ap-49};
inline constexpr double kCosTaylor[] = {0x1.5555555555555p-5,   -0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-16,
                                        -0x1.27e4fb7789f5cp-22, 0x1.1eed8eff8d898p-29,  -0x1.93974a8c07c9dp-37,
                                        0x1.ae7f3e733b81fp-45,  -0x1.6827863b97d97p-53};
inline constexpr double kTrigFastLimit = 0x1p19;

// sin(x) if quadrant_offset is 0, cos(x) if it is 1.
[[gnu::always_inline]] inline f64h sin_cos_fast(f64h x, std::uint64_t quadrant_offset) {
  const f64h shifted = mul_add(x, broadcast(kTwoOverPiDouble), broadcast(kRoundMagicDouble));
  const f64h j = shifted - kRoundMagicDouble;
  // r = high + low: the first step is exact, the second (an exact product) is
  // subtracted with its rounding error kept (Knuth's two-sum), the third goes
  // into the low part.
  const f64h first = x - j * kPiOver2High;
  const f64h second_product = j * kPiOver2Part2;
  const f64h high = first - second_product;
  const f64h first_part = high + second_product;
  const f64h error = (first - first_part) - (second_product - (first_part - high));
  const f64h low = mul_add(j, broadcast(-kPiOver2Part3), error);
  const u64h quadrant = __builtin_bit_cast(u64h, rounded_integer(shifted)) + quadrant_offset;
  // sin(high + low) = sin(high) + low cos(high), cos(high + low) = cos(high) - low sin(high),
  // to first order in low (|low| < 2^-50 |high| or so; the next terms are below 2^-100).
  const f64h z = high * high;
  const f64h half_z = 0.5 * z;
  const f64h sine_low = mul_add(low, -half_z, low);  // low cos(high), to the order that matters
  const f64h sine = high + mul_add(high * z, horner(z, kSinTaylor), sine_low);
  const f64h w = 1.0 - half_z;
  const f64h cosine_low = mul_add(-high, low, (1.0 - w) - half_z);
  const f64h cosine = w + mul_add(z * z, horner(z, kCosTaylor), cosine_low);
  const f64h result = select(not_equal(__builtin_bit_cast(i64h, quadrant & 1), 0), cosine, sine);
  return from_bits(to_bits(result) ^ ((quadrant & 2) << 62));
}

// Recomputes the lanes with |x| > kTrigFastLimit with libm (cold and out of line,
// with plain arrays so that its ABI does not depend on the vector ISA; see
// sin_cos_large_lanes in vector_math.h).
[[gnu::noinline, gnu::cold]] inline void sin_cos_large_lanes_f64(const double* x, double* result, int count,
                                                                 bool cosine) {
  for (int lane = 0; lane < count; ++lane) {
    if (__builtin_fabs(x[lane]) > kTrigFastLimit)
      result[lane] = cosine ? __builtin_cos(x[lane]) : __builtin_sin(x[lane]);
  }
}

[[gnu::always_inline]] inline f64h sin_cos(f64h x, bool cosine) {
  f64h result = sin_cos_fast(x, cosine ? 1 : 0);
  if (!cosine) result = select(equal(x, 0), x, result);  // sin(-0) = -0: the sums above give +0
  if (any(greater(abs(x), kTrigFastLimit))) {
    double x_lanes[kHalfLanes], result_lanes[kHalfLanes];
    __builtin_memcpy(x_lanes, &x, sizeof(x));
    __builtin_memcpy(result_lanes, &result, sizeof(result));
    sin_cos_large_lanes_f64(x_lanes, result_lanes, kHalfLanes, cosine);
    __builtin_memcpy(&result, result_lanes, sizeof(result));
  }
  return result;
}

// ---- erf --------------------------------------------------------------------------
// Odd, computed on a = |x|.
// a < 1: erf = a + a K(a^2), K a degree-11 polynomial (least-squares Chebyshev fit of
//   erf(a)/a - 1, error 7e-18).
// 1 <= a < 6: erf = 1 - e^(-a^2) g(a), g(a) = erfc(a) e^(a^2) in [0.093, 0.43] as a
//   Chebyshev series summed by Clenshaw's rule: degree 20 in t = a - 2 on [1, 3] (fitted
//   to 5.6e-18 relative; summed in double it errs by up to 4e-16 near a = 3, where erfc
//   is 2.2e-5, and by 1e-17 near a = 1: at most 2e-18 of erf), degree 14 in
//   t = (2a - 9) / 3 on [3, 6] (error 4.9e-13 relative, but erfc <= 2.2e-5 there: 1.1e-17
//   of erf). Neither is accurate enough for erfc itself, which has its own pieces (below).
//   a^2 = high + low exactly (low = fma(a, a, -high)), and e^(-a^2) = e^(-high) (1 - low).
// a >= 6: erf rounds to 1 (erfc(6) = 2.2e-17 < 2^-54).
inline constexpr double kErfSmallPolynomial[] = {
    0x1.06eba8214db68p-3,  -0x1.812746b0379c1p-2,  0x1.ce2f21a040f66p-4,  -0x1.b82ce31203772p-6,
    0x1.565bccfa44156p-8,  -0x1.c02db0665e53dp-11, 0x1.f9a2be4f731a1p-14, -0x1.f4ca838adb73bp-17,
    0x1.b981d78881a5dp-20, -0x1.5c131500d3f88p-23, 0x1.d76af6ca49787p-27, -0x1.ac9585a44fe29p-31};
inline constexpr double kErfcScaledNear[] = {0x1.1d394f9d6689ep-2,   -0x1.ea125cdccafedp-4,  0x1.8800725987f26p-6,
                                             -0x1.272c2552290f0p-8,  0x1.a5d0398552a05p-11,  -0x1.1fbca13c77b16p-13,
                                             0x1.788ebfb7e334ep-16,  -0x1.da895bcf21fbap-19, 0x1.20d74c890c1a6p-21,
                                             -0x1.5493ead6c2890p-24, 0x1.85d9b939a0643p-27,  -0x1.b2109177ae063p-30,
                                             0x1.d6e5e981296dfp-33,  -0x1.f280bd0d7ac32p-36, 0x1.01d33ba66addfp-38,
                                             -0x1.04e6c1c8d7854p-41, 0x1.028e7f8e05598p-44,  -0x1.f65b8f1cda48ap-48,
                                             0x1.ded10884bdc27p-51,  -0x1.c00f59b3967a4p-54, 0x1.96f36d42ac01ep-57};
inline constexpr double kErfcScaledFar[] = {0x1.083f415292348p-3,   -0x1.5869e2f4a7961p-5,  0x1.b6fdf71e26364p-8,
                                            -0x1.11f6ea55606e6p-10, 0x1.4f3fa58144ce0p-13,  -0x1.929fbfa95d3e3p-16,
                                            0x1.db01511466fcdp-19,  -0x1.137c181c793fep-21, 0x1.3a67345e63a91p-24,
                                            -0x1.614b20927d696p-27, 0x1.87204f687ab1fp-30,  -0x1.aadb18ade7829p-33,
                                            0x1.cb7850904f2ecp-36,  -0x1.e7ea3c6e653d9p-39, 0x1.f750633f800c4p-42};
inline constexpr double kErfSaturation = 6.0;

// sum_j coefficients[j] T_j(t) for t in [-1, 1].
template <int N>
[[gnu::always_inline]] inline f64h clenshaw(f64h t, const double (&coefficients)[N]) {
  const f64h two_t = t + t;
  f64h next = {}, after = {};  // b(k+1), b(k+2)
  for (int k = N - 1; k >= 1; --k) {
    const f64h current = mul_add(two_t, next, coefficients[k] - after);
    after = next;
    next = current;
  }
  return mul_add(t, next, coefficients[0] - after);
}

// erfc(a) e^(a^2) for a in [1, 6); the far piece only when a lane needs it.
[[gnu::always_inline]] inline f64h erfc_scaled(f64h a) {
  f64h result = clenshaw(a - 2.0, kErfcScaledNear);
  const i64h far = greater_equal(a, 3.0);
  if (any(far)) result = select(far, clenshaw(mul_add(a, broadcast(2.0 / 3), broadcast(-3.0)), kErfcScaledFar), result);
  return result;
}

// The low part of a * a = high + low, exactly: an FMA, or Dekker's product without one.
[[gnu::always_inline]] inline f64h square_error(f64h a, f64h high) {
  if constexpr (kHardwareFma) {
    return fma(a, a, -high);
  } else {
    const f64h split = a * 134217729.0;  // 2^27 + 1: a = top + bottom, 26 bits each
    const f64h top = split - (split - a);
    const f64h bottom = a - top;
    return ((top * top - high) + 2.0 * top * bottom) + bottom * bottom;
  }
}

[[gnu::always_inline]] inline f64h erf(f64h x) {
  const f64h a = abs(x);
  const f64h small = mul_add(a, horner(a * a, kErfSmallPolynomial), a);
  f64h result = small;
  const i64h large = greater_equal(a, 1.0);  // NaN takes the small path, which keeps it
  if (any(large)) {
    const f64h high = a * a;
    const f64h low = square_error(a, high);
    const f64h decay = exp(-high);
    const f64h exact_decay = mul_add(decay, -low, decay);
    const f64h tail = mul_add(-exact_decay, erfc_scaled(a), broadcast(1.0));
    result = select(large, select(greater_equal(a, kErfSaturation), broadcast(1.0), tail), small);
  }
  return with_sign_of(result, x);
}

// ---- erfc -------------------------------------------------------------------------
// Relative accuracy down to the smallest denormal, where 1 - erf(x) cancels (erf's far
// piece, 4.9e-13 relative, is good for erf only). a = |x|.
// a < 0.5: erfc = (1 - x) - x K(x^2) with erf's K, for either sign of x, 1 - x kept as its
//   rounded value plus its rounding error (two-sum) until the last sum. (Up to a = 1, K's
//   rounding errors would reach 3.7 ULP of the result, 0.157 at x = 1.)
// a >= 0.5: erfc(a) = e^(-a^2) h(a) / (a + c), h = (a + c) erfc(a) e^(a^2) a polynomial
//   chosen nearly constant, so that its rounding errors stay small:
//     [0.5, 2.5]: c = 0.5, degree 22 in t = a - 1.5 (exact), h in [0.616, 0.644];
//     [2.5, 27.25]: c = 0, degree 20 in s = kErfcFarScale / a^2 + kErfcFarOffset, h in
//       [0.527, 0.564] (h is smooth in 1/a^2, and s's rounding hardly moves it);
//   errors 3.4e-18 and 6.6e-18 relative, summed by Estrin's scheme (Horner's took about
//   25% longer). The three factors are each a double plus a small correction, multiplied
//   out so that the result rounds about once (a first version that rounded each factor,
//   with erf's series on [1, 3], erred by 4.9 ULP): a^2 = high + low exactly, as in erf;
//   e^(-high - low) = 2^k e^(r + r_low), exp's reduction with low and r's rounding error
//   kept apart; h = leading + rest (leading_and_rest); 1 / (a + c) = reciprocal
//   (1 + residual). a is clamped to 27.25: erfc(27.25) = 6.7e-325 rounds to 0, as for
//   every larger a, and inf does not make NaN through fma(inf, inf, -inf). Each piece is
//   computed only for vectors with a lane in it.
// x <= -0.5: erfc = 2 - erfc(a), in [1.52, 2].
inline constexpr double kErfcSmallLimit = 0.5;
inline constexpr double kErfcNearCenter = 1.5;
inline constexpr double kErfcNearOffset = 0.5;  // c
inline constexpr double kErfcFarStart = 2.5;
inline constexpr double kErfcClamp = 27.25;
inline constexpr double kErfcNear[] = {
    0x1.494daffa2ad68p-1,   -0x1.72f612887638cp-8, -0x1.72f612887639cp-7,  0x1.51284f941b01fp-7,
    -0x1.94c3d57cd1396p-8,  0x1.9469b64d18eddp-9,  -0x1.681aa09972eadp-10, 0x1.26cb3d1730b41p-11,
    -0x1.c389c57c2dd9cp-13, 0x1.471f61cb969ebp-14, -0x1.c3d0c01ac2d96p-16, 0x1.2b1d6d4d1c641p-17,
    -0x1.7d51a9efd90bap-19, 0x1.d5ab9541ca6b5p-21, -0x1.183bfd51e3d5dp-22, 0x1.4497d7f23d8f0p-24,
    -0x1.6e163f7096e03p-26, 0x1.958c52229526ep-28, -0x1.b2d605ec1b452p-30, 0x1.a52f269910155p-32,
    -0x1.b319c7e85c30ap-34, 0x1.4adad58cdce9bp-35, -0x1.4250a694ee501p-37,
};
inline constexpr double kErfcNearLow = 0x1.39bdf0f0d8e21p-55;
inline constexpr double kErfcFarScale = 0x1.93653237c2498p+3;
inline constexpr double kErfcFarOffset = -0x1.04589232e4352p+0;
inline constexpr double kErfcFar[] = {
    0x1.16660b205483ap-1,  -0x1.29af0e84b9952p-6,  0x1.aa32490e7a2c1p-10,  -0x1.ccc6866bc7439p-13,
    0x1.3f98e8f8434dap-15, -0x1.078c307605763p-17, 0x1.eec598f50b9dap-20,  -0x1.011bd14c91ea0p-21,
    0x1.224a7989a5c8bp-23, -0x1.5f2ef42336a77p-25, 0x1.c29c5b437ac3fp-27,  -0x1.30edb11df3295p-28,
    0x1.aece9790f79b1p-30, -0x1.3045d89143e1fp-31, 0x1.ca7161bfccfe9p-33,  -0x1.e3f90b1d567abp-34,
    0x1.9721b2876162dp-35, 0x1.b2caba279f8efp-39,  -0x1.398ccd20b93c5p-39, -0x1.38c0ae57ec493p-37,
    0x1.22f2eb2dd512ep-38,
};
inline constexpr double kErfcFarLow = -0x1.1fb37ce341371p-55;

// A polynomial's value as leading + rest, leading = p0 + p1 t rounded, rest the terms from
// t^2 on plus leading's rounding error (exact with FMA: p0 - leading is exact, leading
// being within a factor of 2 of p0) and constant_low, the part of p0 a double does not hold.
struct LeadingAndRest {
  f64h leading, rest;
};
template <int N>
[[gnu::always_inline]] inline LeadingAndRest leading_and_rest(f64h t, const double (&coefficients)[N],
                                                              double constant_low) {
  const f64h leading = mul_add(t, broadcast(coefficients[1]), broadcast(coefficients[0]));
  const f64h leading_error = mul_add(t, broadcast(coefficients[1]), coefficients[0] - leading) + constant_low;
  return {leading, mul_add(t * t, estrin<2>(t, coefficients), leading_error)};
}

[[gnu::always_inline]] inline f64h erfc(f64h x) {
  const f64h rounded_difference = 1.0 - x;
  const f64h difference_error = (1.0 - rounded_difference) - x;  // exact for |x| <= 1
  f64h result = rounded_difference + mul_add(-x, horner(x * x, kErfSmallPolynomial), difference_error);
  const f64h a = abs(x);
  const i64h large = greater_equal(a, kErfcSmallLimit);  // NaN takes the small path, which keeps it
  if (any(large)) {
    const f64h clamped = select(greater(a, kErfcClamp), broadcast(kErfcClamp), a);
    const f64h high = clamped * clamped;
    const f64h low = square_error(clamped, high);
    // -high - low = k ln2 + r + r_low: -high - k kLn2High is exact (as in reduce_ln2), and
    // the small parts are added with the rounding error kept (Fast2Sum).
    const f64h shifted = mul_add(-high, broadcast(kLog2e), broadcast(kRoundMagicDouble));
    const f64h k = shifted - kRoundMagicDouble;
    const f64h exact = -high - k * kLn2High;
    const f64h small_parts = mul_add(k, broadcast(-kLn2Low), -low);
    const f64h r = exact + small_parts;
    const f64h r_low = (exact - r) + small_parts;
    // e^(r + r_low) = 1 + r + expm1_tail: exp's series, and r_low (1 + r) (r_low^2 < 2^-110).
    const f64h expm1_tail = mul_add(r * r, estrin(r, kExpTaylor), mul_add(r, r_low, r_low));
    const i64h far = greater_equal(a, kErfcFarStart);
    LeadingAndRest h = {};
    if (any(large & ~far)) h = leading_and_rest(a - kErfcNearCenter, kErfcNear, kErfcNearLow);
    if (any(far)) {
      const LeadingAndRest far_h = leading_and_rest(kErfcFarScale / high + kErfcFarOffset, kErfcFar, kErfcFarLow);
      h = {select(far, far_h.leading, h.leading), select(far, far_h.rest, h.rest)};
    }
    // h e^(r + r_low) = leading + correction, the correction rounded once.
    const f64h correction =
        mul_add(h.leading, r, mul_add(h.leading, expm1_tail, mul_add(h.rest, r + expm1_tail, h.rest)));
    // 1 / (a + c) = reciprocal (1 + residual) to about 2^-105, with a + c = sum + sum_error
    // exactly (Fast2Sum) and the residual exact with FMA.
    const f64h offset = select(far, broadcast(0.0), broadcast(kErfcNearOffset));
    const f64h sum = clamped + offset;
    const f64h sum_error = offset - (sum - clamped);
    const f64h reciprocal = 1.0 / sum;
    const f64h residual = mul_add(-sum_error, reciprocal, mul_add(-sum, reciprocal, broadcast(1.0)));
    // (leading + correction) reciprocal (1 + residual): leading * reciprocal exact in the
    // last multiply-add, which rounds the sum once.
    const f64h small_terms = reciprocal * mul_add(h.leading + correction, residual, correction);
    const f64h unscaled = mul_add(h.leading, reciprocal, small_terms);  // erfc(a) / 2^k
    // Times 2^k, as exp scales: e^-high may be denormal where high > 704.
    const f64h erfc_of_a = times_power_of_two(unscaled, rounded_integer(shifted), !any_outside_exp_normal_range(high));
    result = select(large, select(less(x, 0), 2.0 - erfc_of_a, erfc_of_a), result);
  }
  return result;
}

// Odd, computed on a = |x|; the sign of x is put back (tanh(-0) = -0, NaN stays NaN).
// a < 0.625: tanh = a + a^3 T(a^2), T a degree-11 polynomial (least-squares Chebyshev
//   fit, error 4e-18; the correction is at most 12% of the result, so its rounding
//   errors are damped).
// a >= 0.625: tanh = e / (e + 2) with e = e^(2a) - 1 >= 2.49, 2a clamped to 44 (there
//   tanh rounds to 1, so tanh(inf) = 1).
inline constexpr double kTanhSmallLimit = 0.625;
inline constexpr double kTanhSmallPolynomial[] = {
    -0x1.5555555555555p-2,  0x1.11111111110a8p-3,  -0x1.ba1ba1ba0f126p-5,  0x1.664f487e0a749p-6,
    -0x1.226e3473dce5cp-7,  0x1.d6d39ae3905e2p-9,  -0x1.7d9f6f23e8682p-10, 0x1.3526e9ed54da1p-11,
    -0x1.f243823c8c981p-13, 0x1.8445870f6fe41p-14, -0x1.05bbdae896297p-15, 0x1.b33642a122cddp-18};

[[gnu::always_inline]] inline f64h tanh(f64h x) {
  const f64h a = abs(x);
  const f64h z = a * a;
  const f64h small = mul_add(a * z, horner(z, kTanhSmallPolynomial), a);
  f64h result = small;
  const i64h large = greater_equal(a, kTanhSmallLimit);  // NaN takes the small path, which keeps it
  if (any(large)) {
    const f64h twice = select(greater(a, 22.0), broadcast(44.0), a * 2.0);
    const f64h grown = expm1_nonnegative(twice);
    result = select(large, grown / (grown + 2.0), small);
  }
  return with_sign_of(result, x);
}

// 1 / (1 + e^-x) for x >= 0 and e^x / (1 + e^x) below, both from e = e^-|x|: no
// overflow, and tiny results (x < -709) stay accurate instead of 1 / inf = 0.
[[gnu::always_inline]] inline f64h sigmoid(f64h x) {
  const f64h decay = exp(-abs(x));
  const f64h denominator = decay + 1.0;
  // One division per lane, not two: each lane's quotient is the one it selected before.
  return select(greater_equal(x, 0), broadcast(1.0), decay) / denominator;
}

// log(1 + x) and e^x - 1 as the f32 versions compute them (vector_math.h: the rounding error of u = 1 + x
// corrects log(u); Kahan's (u - 1) (x / log(u)) for u = e^x), with the same special values. expm1 raises x to
// -700 (e^x is normal down to -708.4), where the result has been -1 since x = -37.5.
[[gnu::always_inline]] inline f64h log1p(f64h x) {
  const f64h u = x + 1.0;
  const f64h correction = x - (u - 1.0);
  f64h result = log(u) + correction / u;
  result = select(equal(u, 1.0) | equal(x, kInfinity), x, result);
  return select(equal(u, 0.0), broadcast(-kInfinity), result);
}

[[gnu::always_inline]] inline f64h expm1(f64h x) {
  const f64h u = exp(select(less(x, -700.0), broadcast(-700.0), x));
  const f64h u_minus_one = u - 1.0;
  f64h result = u_minus_one * (x / log(u));
  result = select(equal(u, 1.0), x, result);
  result = select(equal(u_minus_one, -1.0), broadcast(-1.0), result);
  return select(equal(u, kInfinity), u, result);
}

// ---- atan ---------------------------------------------------------------------------
// As the f32 version (vector_math.h): |x| reduced to t in [-1/2, 1/2], atan(t) = t + t z g(z) with z = t^2 and g
// a degree-12 polynomial (least-squares Chebyshev fit, scripts/vector-math-atan-coefficients: 4.5e-18 relative to
// atan with these double coefficients), plus 0, pi/4 or pi/2 in two parts.
inline constexpr double kAtanPolynomial[] = {
    -0.33333333333333331,  0.19999999999999488,   -0.14285714285599188,  0.11111111100917376,   -0.090909086203225228,
    0.076922947125402846,  -0.066664356772359476, 0.058795784295824251,  -0.052400995079947131, 0.046280248685701533,
    -0.038066536720573661, 0.025006503566489507,  -0.0092157920470898585};
inline constexpr double kTan3PiOver8 = 2.414213562373095;
inline constexpr double kPiOver4High = 0.7853981633974483, kPiOver4Low = 3.061616997868383e-17;
inline constexpr double kPiOver2Low = 6.123233995736766e-17;  // pi/2 - double(pi/2)

[[gnu::always_inline]] inline f64h atan(f64h x) {
  const f64h a = abs(x);
  const i64h beyond = greater(a, kTan3PiOver8);
  const i64h middle = greater(a, 0.5) & ~beyond;
  const f64h numerator = select(beyond, broadcast(-1.0), select(middle, a - 1.0, a));
  const f64h denominator = select(beyond, a, select(middle, a + 1.0, broadcast(1.0)));
  const f64h t = numerator / denominator;
  const f64h z = t * t;
  const f64h high =
      select(beyond, broadcast(1.5707963267948966), select(middle, broadcast(kPiOver4High), broadcast(0.0)));
  const f64h low = select(beyond, broadcast(kPiOver2Low), select(middle, broadcast(kPiOver4Low), broadcast(0.0)));
  const f64h tail = mul_add(t * z, horner(z, kAtanPolynomial), low);
  return with_sign_of(high + (t + tail), x);
}

// f(x) on each half of x.
template <class Function>
[[gnu::always_inline]] inline f64v on_halves(f64v x, Function function) {
  return halves::join(function(halves::low(x)), function(halves::high(x)));
}

// ---- pow (float) ---------------------------------------------------------------------
// powf(x, y) computed in double: |x|^y = e^(y log|x|). log's and exp's errors (about an
// ULP of a double each) and the rounding of y log|x| put the double within 2.2e-14
// relative of x^y for every result a float can hold (|y log|x|| <= 104), so the one
// rounding to float is the correct one unless x^y lies within that distance of a
// midpoint between two floats. y = 2 is x * x in float, exactly as square(x) (the JIT
// rewrites pow(x, 2) so). Special values as C's powf: pow(x, +-0) = 1 and pow(1, y) = 1
// even for NaN; pow(-1, +-inf) = 1; a finite negative x to a finite non-integer power is
// NaN; otherwise the sign is x's when y is an odd integer (-0 and -inf included).
[[gnu::always_inline]] inline f64h pow_float_lanes(f64h x, f64h y) {
  const f64h magnitude = exp(y * log(abs(x)));
  const f64h y_magnitude = abs(y);
  // Floats of magnitude 2^24 and more are even integers; below, y is an integer when
  // truncating it (exactly, in double) changes nothing.
  const i64h small_y = less(y_magnitude, 0x1p24);
  const i64h truncated = __builtin_convertvector(select(small_y, y, broadcast(0.0)), i64h);
  const i64h integer = greater_equal(y_magnitude, 0x1p24) | equal(__builtin_convertvector(truncated, f64h), y);
  const i64h odd = small_y & integer & not_equal(truncated & 1, 0);
  const u64h sign = to_bits(x) & 0x8000000000000000u;
  f64h result = from_bits(to_bits(magnitude) | (sign & __builtin_bit_cast(u64h, odd)));
  const i64h finite_negative = less(x, 0) & greater(x, -kInfinity);
  result = select(finite_negative & ~integer & less(y_magnitude, kInfinity), broadcast(kQuietNaN), result);
  result = select(equal(x, -1.0) & equal(y_magnitude, kInfinity), broadcast(1.0), result);
  result = select(equal(y, 0) | equal(x, 1.0), broadcast(1.0), result);
  return result;
}

}  // namespace detail_f64

// clang-format off
#define KILN_VECTOR_MATH_F64(name, body)                                                                 \
  [[gnu::always_inline]] inline f64v name(f64v x) {                                                  \
    return detail_f64::on_halves(x, [](detail_f64::f64h half) __attribute__((always_inline)) { return body; }); \
  }                                                                                                      \
  /* The scalar overload: the vector code on a broadcast half, lane 0. */                               \
  [[gnu::always_inline]] inline double name(double x) {                                                  \
    const detail_f64::f64h half = detail_f64::broadcast(x);                                             \
    return (body)[0];                                                                                    \
  }
// clang-format on
KILN_VECTOR_MATH_F64(exp, detail_f64::exp(half))
KILN_VECTOR_MATH_F64(log, detail_f64::log(half))
KILN_VECTOR_MATH_F64(sin, detail_f64::sin_cos(half, false))
KILN_VECTOR_MATH_F64(cos, detail_f64::sin_cos(half, true))
KILN_VECTOR_MATH_F64(tanh, detail_f64::tanh(half))
KILN_VECTOR_MATH_F64(erf, detail_f64::erf(half))
KILN_VECTOR_MATH_F64(erfc, detail_f64::erfc(half))
KILN_VECTOR_MATH_F64(sigmoid, detail_f64::sigmoid(half))
KILN_VECTOR_MATH_F64(log1p, detail_f64::log1p(half))
KILN_VECTOR_MATH_F64(expm1, detail_f64::expm1(half))
KILN_VECTOR_MATH_F64(atan, detail_f64::atan(half))
#undef KILN_VECTOR_MATH_F64

namespace detail_f64 {
// Half an f32v as doubles. With AVX-512, GCC 12 converts the 8 floats 4 at a time and
// joins the halves; the instruction takes all 8 (Clang emits it for the conversion itself).
[[gnu::always_inline]] inline f64h widen(detail::f32h x) {
#if defined(__AVX512F__) && !defined(__clang__)
  return __builtin_ia32_cvtps2pd512_mask(x, f64h{}, static_cast<unsigned char>(0xff), 4);
#else
  return __builtin_convertvector(x, f64h);
#endif
}
}  // namespace detail_f64

// f32v through two registers of doubles: `function` of the widened lanes, rounded to float.
template <class Function>
[[gnu::always_inline]] inline f32v in_double(f32v x, f32v y, Function function) {
  using detail::f32h;
  auto half = [&](f32h base, f32h exponent) __attribute__((always_inline)) {
    return __builtin_convertvector(function(detail_f64::widen(base), detail_f64::widen(exponent)), f32h);
  };
  return halves::join(half(halves::low(x), halves::low(y)), half(halves::high(x), halves::high(y)));
}

// Correctly rounded square roots: the instruction (GCC vectorizes a lane loop of
// __builtin_sqrtf only without errno), through each compiler's builtin.
[[gnu::always_inline]] inline f32v square_root(f32v x) {
#if defined(__AVX512F__) && defined(__clang__)
  return __builtin_ia32_sqrtps512(x, 4);
#elif defined(__AVX512F__)
  return __builtin_ia32_sqrtps512_mask(x, x, static_cast<unsigned short>(0xffff), 4);
#elif defined(__AVX__)
  return __builtin_ia32_sqrtps256(x);
#elif defined(__SSE__)
  return __builtin_ia32_sqrtps(x);
#else
  f32v result = {};
  for (int lane = 0; lane < kLanes; ++lane) result[lane] = __builtin_sqrtf(x[lane]);
  return result;
#endif
}

// x^y for floats, as C's powf (see pow_float_lanes). Three exponents skip the log and
// the exp, each as correctly rounded as the general path:
//   y = 2: x * x in float (exact before its one rounding; square(x), as the JIT rewrites it);
//   y = 3 (gelu's x^3): x * x * x in double, where x * x is exact, so x^3 is rounded once
//     to double and once to float;
//   y = 0.5: sqrt(x), correctly rounded, with powf's pow(-0, 0.5) = +0 and pow(-inf, 0.5) = +inf.
// (y = -1 as 1 / x, under `if (any(...))` as these, made GCC 12's SLP vectorizer crash on
// a kernel where x was known to be a zero: kiln-fuzz seed 86, graph 134.)
// A vector whose exponents are all among them skips the general path (in the JIT, where
// the exponent is a constant, GCC removes it); a mixed one selects lane by lane.
[[gnu::always_inline]] inline f32v pow(f32v x, f32v y) {
  const i32v two = equal(y, 2.0f), three = equal(y, 3.0f), half = equal(y, 0.5f);
  f32v result = x * x;
  if (any(~(two | three | half))) {
    const f32v general = in_double(
        x, y, [](detail_f64::f64h base, detail_f64::f64h exponent) __attribute__((always_inline)) {
          return detail_f64::pow_float_lanes(base, exponent);
        });
    result = select(two, result, general);
  }
  if (any(three)) {
    const f32v cube = in_double(
        x, y,
        [](detail_f64::f64h base, detail_f64::f64h) __attribute__((always_inline)) { return base * base * base; });
    result = select(three, cube, result);
  }
  if (any(half)) {
    const f32v root =
        select(equal(x, -__builtin_inff()), broadcast(__builtin_inff()), square_root(x) + 0.0f);  // -0 -> +0
    result = select(half, root, result);
  }
  return result;
}
[[gnu::always_inline]] inline float pow(float x, float y) { return pow(broadcast(x), broadcast(y))[0]; }

#endif  // KILN_JIT_DOUBLE_MATH

}  // namespace kiln::vector_math

#pragma GCC diagnostic pop

#endif  // KILN_KERNELS_CPU_VECTOR_MATH_F64_H_
