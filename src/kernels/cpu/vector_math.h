// kiln's one shared choice of vectorized float math.
//
// This header is used by the standard CPU kernels and its text is embedded verbatim
// into every JIT-generated C++ translation unit, so that both executors compute
// transcendental functions with the same code and get the same bits. It is therefore
// self-contained (standard headers only), defines no macros besides its include guard,
// and is written with GCC/Clang vector extensions (one exception: the FMA builtin, see
// fma()): the same source compiles to 512-bit code with -march=native on AVX-512
// machines, to two or four narrower registers per vector on AVX2/SSE, and to scalar
// code elsewhere. Method, measured accuracy and speed: docs/vector_math.md.
//
// Contracts
// - Every function works on 16 float lanes (f32x16). Each has a scalar overload
//   that runs the vector code on a broadcast value and returns lane 0, so a value
//   gets the same bits whether it is computed in a vector, a tail or a scalar call.
//   (Tails should still use load_partial / store_partial: a scalar call costs a vector.)
// - Accuracy against double-precision std:: functions, over the whole float range,
//   denormals included: sin, cos, exp, log <= 2 ULP; tanh, erf, sigmoid <= 4 ULP
//   (measured: 1.54, 1.54, 1.01, 0.86, 1.07, 1.00, 2.40). IEEE special values follow
//   C's <math.h>; NaN propagates; sin, tanh, erf keep the sign of zero.
// - Bit-identical results across compilers (g++ >= 12, clang++ >= 14), -O levels and
//   -ffp-contract settings on targets with FMA: every multiply-add is written as an
//   explicit fused one (fma or mul_add), no plain `a * b + c` is left for a compiler to
//   contract or not. Without hardware FMA (-mavx2 alone, baseline x86-64) the range
//   reductions switch to exact-product forms that need no FMA, polynomials round twice
//   per step, and results may differ from FMA builds by an ULP, within the same bounds.
// - Do not compile users of this header with -ffast-math or -ffinite-math-only: the
//   special-value handling relies on IEEE comparisons with NaN and infinity.
// - Call the functions qualified (kiln::vector_math::sin): unqualified calls next to
//   `using namespace std` would be ambiguous with std::sin(float).

#ifndef KILN_KERNELS_CPU_VECTOR_MATH_H_
#define KILN_KERNELS_CPU_VECTOR_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

// Passing 64-byte vectors by value without AVX-512 makes GCC and Clang warn that the
// ABI of such calls differs from AVX-512 code (-Wpsabi). Every function taking or
// returning f32x16 here is always inlined, so no call with that ABI is ever emitted;
// silence the warning inside this header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::vector_math {

// 16 floats; 512 bits, one AVX-512 register.
using f32x16 = float __attribute__((vector_size(64)));
// Lane masks and bit patterns. A comparison of two f32x16 yields an i32x16 whose
// lanes are -1 (true) or 0 (false); `select` and `any` treat any nonzero lane as true.
using i32x16 = std::int32_t __attribute__((vector_size(64)));
using u32x16 = std::uint32_t __attribute__((vector_size(64)));

inline constexpr int kLanes = 16;

// True when the compiler targets hardware FMA, so `a * b + c` written as a fused
// multiply-add costs one instruction.
#if defined(__FMA__) || defined(__FP_FAST_FMAF) || defined(__ARM_FEATURE_FMA)
inline constexpr bool kHardwareFma = true;
#else
inline constexpr bool kHardwareFma = false;
#endif

// ---------------------------------------------------------------------------------
// Loads, stores, lane utilities.

// Unaligned load of 16 floats.
[[gnu::always_inline]] inline f32x16 load(const float* source) {
  f32x16 value;
  __builtin_memcpy(&value, source, sizeof(value));
  return value;
}

// Unaligned store of 16 floats.
[[gnu::always_inline]] inline void store(float* destination, f32x16 value) {
  __builtin_memcpy(destination, &value, sizeof(value));
}

// Loads the first `count` floats (0 <= count <= 16); the other lanes are 0.
// Reads only source[0, count); with count == 0 the pointer may be null.
[[gnu::always_inline]] inline f32x16 load_partial(const float* source, int count) {
  f32x16 value = {};
  if (count > 0) {
    __builtin_memcpy(&value, source, sizeof(float) * static_cast<unsigned>(count));
  }
  return value;
}

// Stores the first `count` lanes (0 <= count <= 16); writes only destination[0, count).
[[gnu::always_inline]] inline void store_partial(float* destination, f32x16 value, int count) {
  if (count > 0) {
    __builtin_memcpy(destination, &value, sizeof(float) * static_cast<unsigned>(count));
  }
}

[[gnu::always_inline]] inline f32x16 broadcast(float value) {
  return f32x16{value, value, value, value, value, value, value, value,
                value, value, value, value, value, value, value, value};
}

// Lane-wise `mask ? if_true : if_false` (nonzero mask lane = true).
[[gnu::always_inline]] inline f32x16 select(i32x16 mask, f32x16 if_true, f32x16 if_false) {
  return mask ? if_true : if_false;
}
[[gnu::always_inline]] inline i32x16 select(i32x16 mask, i32x16 if_true, i32x16 if_false) {
  return mask ? if_true : if_false;
}

// True if any lane of the mask is nonzero. Narrowing the lanes to bytes lets Clang emit
// one kortest on AVX-512 and GCC a short sequence; used once per 16 elements to detect
// rare slow cases.
[[gnu::always_inline]] inline bool any(i32x16 mask) {
  using i8x16 = std::int8_t __attribute__((vector_size(16)));
  const i8x16 narrow = __builtin_convertvector(mask != 0, i8x16);
  std::uint64_t words[2];
  __builtin_memcpy(words, &narrow, sizeof(words));
  return (words[0] | words[1]) != 0;
}

[[gnu::always_inline]] inline u32x16 to_bits(f32x16 value) { return __builtin_bit_cast(u32x16, value); }
[[gnu::always_inline]] inline f32x16 from_bits(u32x16 bits) { return __builtin_bit_cast(f32x16, bits); }

[[gnu::always_inline]] inline f32x16 abs(f32x16 value) { return from_bits(to_bits(value) & 0x7fffffffu); }

// Correctly rounded a * b + c in every lane (one rounding), on any target. Range
// reductions rely on it. On x86 with FMA this is the vfmadd instruction, through the
// compiler builtin behind _mm512_fmadd_ps / _mm256_fmadd_ps: GCC 12 has no generic
// vector FMA, and its vectorizers turn the portable lane loop below into one vfmadd
// only in some contexts (in larger kernels it fell back to 16 scalar FMAs). Elsewhere
// the lane loop: vectorized where the target has FMA, calls to fmaf where it has not.
[[gnu::always_inline]] inline f32x16 fma(f32x16 a, f32x16 b, f32x16 c) {
#if defined(__AVX512F__)
  return __builtin_ia32_vfmaddps512_mask(a, b, c, static_cast<unsigned short>(0xffff), 4);
#elif defined(__AVX__) && defined(__FMA__)
  using f32x8 = float __attribute__((vector_size(32)));
  const f32x8 low = __builtin_ia32_vfmaddps256(__builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7),
                                               __builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7),
                                               __builtin_shufflevector(c, c, 0, 1, 2, 3, 4, 5, 6, 7));
  const f32x8 high = __builtin_ia32_vfmaddps256(__builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15),
                                                __builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15),
                                                __builtin_shufflevector(c, c, 8, 9, 10, 11, 12, 13, 14, 15));
  return __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#else
  f32x16 result = {};
  for (int lane = 0; lane < kLanes; ++lane) {
    result[lane] = __builtin_fmaf(a[lane], b[lane], c[lane]);
  }
  return result;
#endif
}

// a * b + c for polynomial evaluation: fused where the hardware has FMA, otherwise a
// multiply and an add (where one extra rounding is harmless and a software fmaf is not).
[[gnu::always_inline]] inline f32x16 mul_add(f32x16 a, f32x16 b, f32x16 c) {
  if constexpr (kHardwareFma) {
    return fma(a, b, c);
  } else {
    const f32x16 product = a * b;
    return product + c;
  }
}

namespace detail {

inline constexpr float kInfinity = __builtin_inff();
inline constexpr float kQuietNaN = __builtin_nanf("");

// Adding then subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to the nearest
// integer (ties to even), and the low bits of the sum hold that integer: no
// float->int conversion, which is undefined for NaN and out-of-range lanes.
inline constexpr float kRoundMagic = 0x1.8p23f;

// Polynomial c[First] + c[First + 1] x + ... by Horner's rule, written as a
// compile-time recursion so that it is straight-line code for every compiler.
template <int First = 0, int N>
[[gnu::always_inline]] inline f32x16 horner(f32x16 x, const float (&coefficients)[N]) {
  if constexpr (First == N - 1) {
    return broadcast(coefficients[First]);
  } else {
    return mul_add(horner<First + 1>(x, coefficients), x, broadcast(coefficients[First]));
  }
}

// ---- exp --------------------------------------------------------------------------
// exp(x) = 2^n * exp(r), n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2].
// r is computed with ln2 split in two floats: n * kLn2High is exact inside the FMA and
// x - n * kLn2High is exact (both are multiples of 2^-24 and the difference is < 1/2),
// so r carries only the rounding of the second step.
// exp(r) = 1 + r + r^2 E(r), E a degree-4 minimax polynomial for relative error on
// [-0.3473, 0.3473] (fitted by linear programming on a dense grid; approximation
// error 3.1e-9 = 0.05 ULP).
inline constexpr float kLog2e = 1.44269502f;
// Cephes' split of ln2: 0.693359375 has 9 significant bits, so k * it is exact for
// |k| < 2^15 without FMA (used by log, and by exp on targets without FMA).
inline constexpr float kLn2Coarse = 0.693359375f;
inline constexpr float kLn2CoarseError = -0.000212194442f;  // float(ln2 - kLn2Coarse)
inline constexpr float kLn2High = 0.693147182f;             // float(ln 2)
inline constexpr float kLn2Low = -1.90465421e-09f;          // float(ln 2 - kLn2High)
inline constexpr float kExpPolynomial[] = {0.49999994f, 0.166665196f, 0.0416684002f, 0.00836885069f, 0.00138143206f};
// exp(89) > FLT_MAX and exp(-104) < FLT_TRUE_MIN / 2: clamping there keeps n within
// [-150, 129] and gives exactly inf / 0 for inputs beyond.
inline constexpr float kExpClampHigh = 89.0f;
inline constexpr float kExpClampLow = -104.0f;

struct ExpReduced {
  f32x16 mantissa;  // exp(r), in [0.70, 1.42]
  u32x16 n;         // exp(x) = mantissa * 2^n (two's complement)
};

// Garbage (never undefined behaviour) for lanes outside [-2^22, 2^22]; NaN stays NaN.
[[gnu::always_inline]] inline ExpReduced exp_reduce(f32x16 x) {
  const f32x16 magic = broadcast(kRoundMagic);
  const f32x16 shifted = mul_add(x, broadcast(kLog2e), magic);
  const f32x16 n = shifted - magic;
  f32x16 r;
  if constexpr (kHardwareFma) {
    r = fma(n, broadcast(-kLn2High), x);  // -c, not -n: no negation op
    r = fma(n, broadcast(-kLn2Low), r);
  } else {
    // Without FMA, Cephes' split of ln2: n * kLn2Coarse has at most 17 significant
    // bits, so it and x - n * kLn2Coarse are exact with plain operations.
    const f32x16 coarse = n * kLn2Coarse;
    r = x - coarse;
    const f32x16 correction = n * kLn2CoarseError;
    r = r - correction;
  }
  const f32x16 r2 = r * r;
  return {mul_add(r2, horner(r, kExpPolynomial), r) + 1.0f, to_bits(shifted) - to_bits(magic)};
}

// e^x for any x, denormal results included: 2^n is applied as two exact powers of two
// 2^(n/2) * 2^(n - n/2), so results down in the denormal range round once and results
// above FLT_MAX overflow to inf. Returns the two factors of the last multiplication:
// exp(x) = partial * scale.
struct ExpFactors {
  f32x16 partial;  // exp(r) * 2^(n/2), exact
  f32x16 scale;    // 2^(n - n/2)
};
[[gnu::always_inline]] inline ExpFactors exp_factors(f32x16 x) {
  x = select(x > kExpClampHigh, broadcast(kExpClampHigh), x);  // NaN passes through
  x = select(x < kExpClampLow, broadcast(kExpClampLow), x);
  const ExpReduced reduced = exp_reduce(x);
  const u32x16 half_n = __builtin_bit_cast(u32x16, __builtin_bit_cast(i32x16, reduced.n) >> 1);
  const u32x16 other_half_n = reduced.n - half_n;
  return {reduced.mantissa * from_bits((half_n + 127u) << 23), from_bits((other_half_n + 127u) << 23)};
}

// e^x for x in [-87, 88] (normal results; callers clamp): 2^n is added to the exponent
// bits, exactly. NaN does NOT propagate (the bit arithmetic can make it a number).
[[gnu::always_inline]] inline f32x16 exp_normal_range(f32x16 x) {
  const ExpReduced reduced = exp_reduce(x);
  return from_bits(to_bits(reduced.mantissa) + (reduced.n << 23));
}

// ---- log --------------------------------------------------------------------------
// x = 2^k * m with m in [sqrt(1/2), sqrt(2)) taken from the bits (denormals are first
// scaled by 2^23), f = m - 1 (exact), log(x) = k ln2 + log1p(f) with
// log1p(f) = f - f^2/2 + f^3 L(f), L a degree-7 minimax polynomial for relative error
// on [-0.2929, 0.4142] (approximation error 5.8e-9 = 0.1 ULP). k ln2 is added in two
// parts (Cephes' split: 0.693359375 has 9 significant bits so k * it is exact).
inline constexpr float kLogPolynomial[] = {0.333333313f, -0.250008196f, 0.200012267f, -0.166233569f,
                                           0.142017573f, -0.131601796f, 0.127615839f, -0.0763451383f};
inline constexpr std::uint32_t kSqrtHalfBits = 0x3f3504f3u;  // float(sqrt(1/2))

// ---- sin / cos --------------------------------------------------------------------
// Cody-Waite reduction: j = round(x * 2/pi), r = x - j * pi/2 with pi/2 split into
// three floats (72 bits) applied by exact-product FMAs. The first step is exact for
// |x| < 2^24; when r is tiny (x near a multiple of pi/2) the second is exact too, so r
// keeps nearly full relative accuracy and sin stays within the ULP bound even at its
// zeros. Beyond kTrigFastLimit the lanes are recomputed with double-precision
// std::sin / std::cos (a cold, per-lane path: such arguments are rare in practice).
// sin(r) = r + r^3 S(r^2) and cos(r) = 1 + r^2 C(r^2) (C(0) = -1/2 exactly) on
// |r| <= pi/4 * 1.005 (the float 2/pi and rounding can push r slightly past pi/4);
// S, C are degree-2 and degree-3 minimax polynomials for relative error
// (approximation errors 4e-9 = 0.07 ULP and 1.2e-10).
inline constexpr float kTwoOverPi = 0.636619747f;
inline constexpr float kPiOver2Part1 = 1.57079637f;
inline constexpr float kPiOver2Part2 = -4.37113883e-08f;
inline constexpr float kPiOver2Part3 = -1.71512451e-15f;
inline constexpr float kSinPolynomial[] = {-0.166666538f, 0.00833213702f, -0.000195120199f};
inline constexpr float kCosPolynomial[] = {-0.5f, 0.0416666456f, -0.00138872839f, 2.44294297e-05f};
inline constexpr float kTrigFastLimit = 131072.0f;  // 2^17

struct QuadrantReduction {
  f32x16 r;         // x - j pi/2, |r| <= pi/4 (slightly more after rounding)
  u32x16 quadrant;  // j mod 2^32
};

// With FMA: float arithmetic, pi/2 in three floats (see above).
[[gnu::always_inline]] inline QuadrantReduction reduce_quadrant_fma(f32x16 x) {
  const f32x16 magic = broadcast(kRoundMagic);
  const f32x16 shifted = mul_add(x, broadcast(kTwoOverPi), magic);
  const f32x16 j = shifted - magic;
  f32x16 r = fma(j, broadcast(-kPiOver2Part1), x);  // -c, not -j: no negation op
  r = fma(j, broadcast(-kPiOver2Part2), r);
  r = fma(j, broadcast(-kPiOver2Part3), r);
  return {r, to_bits(shifted) - to_bits(magic)};
}

// Without FMA (where exact float products would cost a library call per lane): the
// same reduction in double precision, with pi/2 split into a 33-bit double (j * it is
// exact for |j| < 2^20, and so is x - j * it) and the rest; r is rounded to float once.
using f64x8 = double __attribute__((vector_size(64)));
using u64x8 = std::uint64_t __attribute__((vector_size(64)));
using u32x8 = std::uint32_t __attribute__((vector_size(32)));
using f32x8 = float __attribute__((vector_size(32)));
inline constexpr double kPiOver2High = 0x1.921fb544p+0;          // 33 significant bits
inline constexpr double kPiOver2Low = 0x1.0b4611a626331p-34;     // double(pi/2 - kPiOver2High)
inline constexpr double kTwoOverPiDouble = 0.63661977236758134;  // double(2/pi)
inline constexpr double kRoundMagicDouble = 0x1.8p52;            // as kRoundMagic, for doubles

[[gnu::always_inline]] inline void reduce_half_in_double(f32x8 x, f32x8& r, u32x8& quadrant) {
  const f64x8 value = __builtin_convertvector(x, f64x8);
  const f64x8 product = value * kTwoOverPiDouble;
  const f64x8 shifted = product + kRoundMagicDouble;
  const f64x8 j = shifted - kRoundMagicDouble;
  const f64x8 high = j * kPiOver2High;
  const f64x8 low = j * kPiOver2Low;
  const f64x8 reduced = (value - high) - low;
  r = __builtin_convertvector(reduced, f32x8);
  quadrant = __builtin_convertvector(__builtin_bit_cast(u64x8, shifted), u32x8);  // j in the low bits
}

[[gnu::always_inline]] inline QuadrantReduction reduce_quadrant_double(f32x16 x) {
  f32x8 r_low, r_high;
  u32x8 quadrant_low, quadrant_high;
  reduce_half_in_double(__builtin_shufflevector(x, x, 0, 1, 2, 3, 4, 5, 6, 7), r_low, quadrant_low);
  reduce_half_in_double(__builtin_shufflevector(x, x, 8, 9, 10, 11, 12, 13, 14, 15), r_high, quadrant_high);
  return {__builtin_shufflevector(r_low, r_high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
          __builtin_shufflevector(quadrant_low, quadrant_high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)};
}

// sin(x) if quadrant_offset is 0, cos(x) if it is 1.
[[gnu::always_inline]] inline f32x16 sin_cos_fast(f32x16 x, unsigned quadrant_offset) {
  QuadrantReduction reduced;
  if constexpr (kHardwareFma) {
    reduced = reduce_quadrant_fma(x);
  } else {
    reduced = reduce_quadrant_double(x);
  }
  const f32x16 r = reduced.r;
  const u32x16 quadrant = reduced.quadrant + quadrant_offset;
  const f32x16 r2 = r * r;
  const f32x16 r3 = r2 * r;
  const f32x16 sine = mul_add(r3, horner(r2, kSinPolynomial), r);
  const f32x16 cosine = mul_add(r2, horner(r2, kCosPolynomial), broadcast(1.0f));
  // Odd quadrants swap sin and cos; quadrants 2 and 3 negate.
  const f32x16 result = select((quadrant & 1u) != 0u, cosine, sine);
  return from_bits(to_bits(result) ^ ((quadrant & 2u) << 30));
}

// Recomputes the lanes with |x| > kTrigFastLimit in double precision. The one function
// here that is not inlined (it is cold); it takes plain arrays so that its ABI is the
// same whatever vector ISA a translation unit was built for: copies compiled with and
// without AVX-512 (a kernel library and a JIT module) may be merged by the linker.
[[gnu::noinline, gnu::cold]] inline void sin_cos_large_lanes(const float* x, float* result, bool cosine) {
  for (int lane = 0; lane < kLanes; ++lane) {
    const double value = static_cast<double>(x[lane]);
    if (std::fabs(value) > static_cast<double>(kTrigFastLimit)) {
      result[lane] = static_cast<float>(cosine ? std::cos(value) : std::sin(value));
    }
  }
}

[[gnu::always_inline]] inline f32x16 sin_cos_large(f32x16 x, f32x16 result, bool cosine) {
  float x_lanes[kLanes], result_lanes[kLanes];
  store(x_lanes, x);
  store(result_lanes, result);
  sin_cos_large_lanes(x_lanes, result_lanes, cosine);
  return load(result_lanes);
}

// ---- tanh -------------------------------------------------------------------------
// Odd, so computed on |x| and the sign bit of x is put back at the end (this also gives
// tanh(-0) = -0 and keeps NaN).
// |x| < 0.75: tanh(x) = x + x^3 S(x^2), S a degree-5 minimax polynomial for relative
//   error (approximation error 1.6e-9 = 0.03 ULP); the correction x^3 S is at most 15%
//   of the result, so its rounding errors are damped.
// |x| >= 0.75: tanh(x) = 1 - 2 / (1 + e^(2|x|)), with 2|x| clamped to 20 (there the
//   result rounds to 1, so tanh(inf) = 1). e^(2|x|) >= 4.48, so 2 / (1 + e) <= 0.37 and
//   its rounding errors shrink when subtracted from 1.
// This is slower than a single rational x P(x^2) / Q(x^2) (Eigen, XLA), but such a
// rational with float coefficients and float evaluation measured up to 6 ULP here, and
// overshoots 1 near |x| = 8; this version measures 1.07 ULP (docs/vector_math.md).
inline constexpr float kTanhSmallLimit = 0.75f;
inline constexpr float kTanhSmallPolynomial[] = {-0.333333164f, 0.133326948f,    -0.0538927242f,
                                                 0.0214520358f, -0.00765725644f, 0.00173693628f};
inline constexpr float kTanhExpClamp = 20.0f;

// ---- erf --------------------------------------------------------------------------
// Odd, computed on |x| like tanh.
// |x| < 1: erf(x) = x + x K(x^2), K a degree-6 minimax polynomial (K(0) = 2/sqrt(pi) - 1,
//   approximation error 1.2e-9 = 0.02 ULP relative to erf).
// 1 <= |x| <= 3.93: erf(x) = 1 - e^(-x^2) R(|x| - 1), R ~ erfc(x) e^(x^2) a degree-8
//   minimax polynomial for the absolute error of erf (2.4e-9 = 0.04 ULP). The rounding of
//   x^2 changes e^(-x^2) by a relative x^2 2^-24, i.e. by less than 0.1 ULP of the result
//   since erfc(x) x^2 <= 0.16 here.
// |x| > 3.93: erf rounds to 1 (erfc(3.92) < 2^-25).
inline constexpr float kErfSmallLimit = 1.0f;
inline constexpr float kErfSmallPolynomial[] = {0.128379166f,   -0.37612626f,     0.112835854f,   -0.026853811f,
                                                0.00518832775f, -0.000801019312f, 7.85386073e-05f};
inline constexpr float kErfcScaledPolynomial[] = {0.427583575f,   -0.273211062f,   0.154350549f,
                                                  -0.0790533423f, 0.036874976f,    -0.015110149f,
                                                  0.00491128257f, -0.00105705578f, 0.000106843225f};
inline constexpr float kErfSaturation = 3.93f;

[[gnu::always_inline]] inline f32x16 with_sign_of(f32x16 magnitude, f32x16 sign_source) {
  return from_bits(to_bits(magnitude) | (to_bits(sign_source) & 0x80000000u));
}

}  // namespace detail

// ---------------------------------------------------------------------------------
// Functions on 16 lanes.

// e^x. exp(-inf) = 0, exp(+inf) = inf, overflow -> inf, underflow -> 0 through denormals.
[[gnu::always_inline]] inline f32x16 exp(f32x16 x) {
  const detail::ExpFactors factors = detail::exp_factors(x);
  return factors.partial * factors.scale;
}

// Natural logarithm. log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf; denormal
// inputs are as accurate as normal ones.
[[gnu::always_inline]] inline f32x16 log(f32x16 x) {
  const i32x16 tiny = x < 0x1p-126f;
  const f32x16 scaled = select(tiny, x * 0x1p23f, x);
  const u32x16 bits = to_bits(scaled);
  const u32x16 offset = bits - detail::kSqrtHalfBits;
  const i32x16 exponent = __builtin_bit_cast(i32x16, offset) >> 23;
  const f32x16 m = from_bits(bits - (offset & 0xff800000u));
  const f32x16 k = __builtin_convertvector(exponent - (tiny & 23), f32x16);
  const f32x16 f = m - 1.0f;
  const f32x16 f2 = f * f;
  const f32x16 f3 = f2 * f;
  f32x16 tail = f3 * detail::horner(f, detail::kLogPolynomial);
  tail = mul_add(k, broadcast(detail::kLn2CoarseError), tail);
  tail = mul_add(f2, broadcast(-0.5f), tail);  // exact product: same bits fused or not
  f32x16 result = f + tail;
  result = mul_add(k, broadcast(detail::kLn2Coarse), result);    // exact product
  result = select((x > 0x1.fffffep127f) | (x != x), x, result);  // +inf, NaN
  result = select(x == 0.0f, broadcast(-detail::kInfinity), result);
  result = select(x < 0.0f, broadcast(detail::kQuietNaN), result);
  return result;
}

[[gnu::always_inline]] inline f32x16 sin(f32x16 x) {
  f32x16 result = detail::sin_cos_fast(x, 0u);
  // r + r^3 S(r^2) is +0 for r = -0 (the two zeros of a sum round to +0): keep the sign.
  result = select(x == 0.0f, x, result);
  if (any(abs(x) > detail::kTrigFastLimit)) [[unlikely]] {
    result = detail::sin_cos_large(x, result, false);
  }
  return result;
}

[[gnu::always_inline]] inline f32x16 cos(f32x16 x) {
  f32x16 result = detail::sin_cos_fast(x, 1u);
  if (any(abs(x) > detail::kTrigFastLimit)) [[unlikely]] {
    result = detail::sin_cos_large(x, result, true);
  }
  return result;
}

// Hyperbolic tangent; tanh(+-inf) = +-1, tanh(-0) = -0.
[[gnu::always_inline]] inline f32x16 tanh(f32x16 x) {
  const f32x16 a = abs(x);
  const f32x16 a2 = a * a;
  const f32x16 small = mul_add(a2 * a, detail::horner(a2, detail::kTanhSmallPolynomial), a);
  f32x16 twice = a + a;
  twice = select(twice > detail::kTanhExpClamp, broadcast(detail::kTanhExpClamp), twice);
  const f32x16 large = 1.0f - 2.0f / (detail::exp_normal_range(twice) + 1.0f);
  // Written so that NaN (a >= limit is false) takes the NaN-propagating small branch:
  // exp_normal_range's exponent arithmetic can turn a NaN into a number.
  return detail::with_sign_of(select(a >= detail::kTanhSmallLimit, large, small), x);
}

// Error function; erf(+-inf) = +-1, erf(-0) = -0.
[[gnu::always_inline]] inline f32x16 erf(f32x16 x) {
  const f32x16 a = abs(x);
  const f32x16 a2 = a * a;
  const f32x16 small = mul_add(a, detail::horner(a2, detail::kErfSmallPolynomial), a);
  // e^(-x^2) for |x| <= 3.93; larger lanes (clamped to keep the exponent arithmetic
  // in range) are replaced by 1 below.
  const f32x16 gauss = detail::exp_normal_range(-select(a2 > 16.0f, broadcast(16.0f), a2));
  const f32x16 large = mul_add(-gauss, detail::horner(a - 1.0f, detail::kErfcScaledPolynomial), broadcast(1.0f));
  f32x16 result = select(a >= detail::kErfSmallLimit, large, small);  // NaN: small
  result = select(a > detail::kErfSaturation, broadcast(1.0f), result);
  return detail::with_sign_of(result, x);
}

// Logistic sigmoid 1 / (1 + e^-x), computed as 1 / (1 + e^-|x|) for x >= 0 and
// e^-|x| / (1 + e^-|x|) for x < 0 so that e^-|x| never overflows: sigmoid(-inf) = 0,
// sigmoid(+inf) = 1, and tiny results keep their relative accuracy down to denormals.
[[gnu::always_inline]] inline f32x16 sigmoid(f32x16 x) {
  const detail::ExpFactors factors = detail::exp_factors(-abs(x));
  const f32x16 e = factors.partial * factors.scale;
  // 1 + e, rounded once where FMA is available (written explicitly, so no compiler's
  // contraction choice can change the bits).
  const f32x16 denominator = mul_add(factors.partial, factors.scale, broadcast(1.0f));
  return select(x < 0.0f, e, broadcast(1.0f)) / denominator;
}

// ---------------------------------------------------------------------------------
// Scalar overloads: the vector code on lane 0, hence bit-identical to the vector lanes.

[[gnu::always_inline]] inline float exp(float x) { return exp(broadcast(x))[0]; }
[[gnu::always_inline]] inline float log(float x) { return log(broadcast(x))[0]; }
[[gnu::always_inline]] inline float sin(float x) { return sin(broadcast(x))[0]; }
[[gnu::always_inline]] inline float cos(float x) { return cos(broadcast(x))[0]; }
[[gnu::always_inline]] inline float tanh(float x) { return tanh(broadcast(x))[0]; }
[[gnu::always_inline]] inline float erf(float x) { return erf(broadcast(x))[0]; }
[[gnu::always_inline]] inline float sigmoid(float x) { return sigmoid(broadcast(x))[0]; }

}  // namespace kiln::vector_math

#pragma GCC diagnostic pop

// Without AVX-512 the same warning also fires at every call of these functions in the
// including file (GCC and Clang attach it to the caller), which would break -Werror
// builds for AVX2 or baseline x86-64. It only concerns calls between code compiled with
// and without AVX-512 passing f32x16 by value, which kiln never makes (kernels and
// generated code exchange pointers), so it stays off for the rest of the translation
// unit. (GCC still prints one "ABI ... changed in GCC 4.6" note, which is not a warning.)
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__AVX512F__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#endif  // KILN_KERNELS_CPU_VECTOR_MATH_H_
