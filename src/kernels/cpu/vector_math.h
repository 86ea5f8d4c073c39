// kiln's one shared choice of vectorized float math.
//
// This header is used by the standard CPU kernels and its text is embedded verbatim
// into every JIT-generated C++ translation unit, so that both executors compute
// transcendental functions with the same code and get the same bits. It is therefore
// self-contained (standard headers only), defines no macros besides its include guard,
// and is written with GCC/Clang vector extensions (one exception: the FMA builtin, see
// fma()): the same source compiles to 512-bit code with -march=native on AVX-512
// machines, to 256-bit code on AVX2, to 128-bit code on SSE and NEON, and to scalar
// code elsewhere. Method, measured accuracy and speed: docs/vector_math.md.
//
// Contracts
// - Every function works on a vector of kLanes floats (f32v: 16 with AVX-512, 8 with
//   AVX2, 4 with SSE), one register. Each has a scalar overload
//   that runs the vector code on a broadcast value and returns lane 0, so a value
//   gets the same bits whether it is computed in a vector, a tail or a scalar call.
//   (Tails should still use load_partial / store_partial: a scalar call costs a vector.)
// - Accuracy against double-precision std:: functions, over the whole float range,
//   denormals included: sin, cos, exp, log <= 2 ULP; tanh, erf, erfc, sigmoid, log1p, expm1
//   <= 4 ULP (measured: 1.54, 1.54, 1.01, 0.86, 1.07, 1.00, 3.74 (3.15 AVX-512), 2.40, 1.49,
//   2.37). IEEE special values follow C's <math.h>; NaN propagates; sin, tanh, erf keep the
//   sign of zero.
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

// Only <cstdint>: this header is the bulk of the JIT's prelude, parsed by every JIT
// compile, and <cmath> alone doubles that (0.2 s of GCC's 0.45 s for the seed's
// module); the few libm calls here are GCC/Clang builtins instead.
#include <cstdint>

// Passing vectors wider than the target's registers by value (vector_math_f64.h's f64v,
// the halves of a mask) makes GCC and Clang warn that the ABI of such calls differs from
// code built for wider registers (-Wpsabi). Every function taking or returning vectors
// here is always inlined, so no call with that ABI is ever emitted; silence the warning
// inside this header.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::vector_math {

// The register width of the target: 64 bytes with AVX-512, 32 with AVX, else 16 (SSE,
// NEON). Every vector here is one register of floats (f32v) or two of doubles (f64v,
// vector_math_f64.h): GCC (12) handles a vector wider than the registers poorly even
// where it splits the arithmetic (loads by scalar inserts, bit casts and joins through
// the stack), and kiln's f32 kernels ran 3-4x slower on AVX2 with 16-lane vectors than
// with 8 (docs/vector_math.md, "Vectors of the register width").
#if defined(__AVX512F__)
inline constexpr unsigned kRegisterBytes = 64;
#elif defined(__AVX__)
inline constexpr unsigned kRegisterBytes = 32;
#else
inline constexpr unsigned kRegisterBytes = 16;
#endif

// Lanes per vector: 16 with AVX-512, 8 with AVX, 4 else. Code that steps through memory
// steps by kLanes; nothing but the AVX-512 implementations below assumes a count.
inline constexpr int kLanes = kRegisterBytes / sizeof(float);

// kLanes floats, one register.
using f32v = float __attribute__((vector_size(kRegisterBytes)));
// Lane masks and bit patterns. A comparison of two f32v yields an i32v whose lanes are
// -1 (true) or 0 (false); `select` and `any` treat any nonzero lane as true.
using i32v = std::int32_t __attribute__((vector_size(kRegisterBytes)));
using u32v = std::uint32_t __attribute__((vector_size(kRegisterBytes)));

// True when the compiler targets hardware FMA, so `a * b + c` written as a fused
// multiply-add costs one instruction.
#if defined(__FMA__) || defined(__FP_FAST_FMAF) || defined(__ARM_FEATURE_FMA)
inline constexpr bool kHardwareFma = true;
#else
inline constexpr bool kHardwareFma = false;
#endif

// ---------------------------------------------------------------------------------
// Loads, stores, lane utilities.

// Unaligned load of kLanes floats.
[[gnu::always_inline]] inline f32v load(const float* source) {
  f32v value;
  __builtin_memcpy(&value, source, sizeof(value));
  return value;
}

// Unaligned store of kLanes floats.
[[gnu::always_inline]] inline void store(float* destination, f32v value) {
  __builtin_memcpy(destination, &value, sizeof(value));
}

// Loads the first `count` floats (0 <= count <= kLanes); the other lanes are 0.
// Reads only source[0, count); with count == 0 the pointer may be null.
[[gnu::always_inline]] inline f32v load_partial(const float* source, int count) {
  f32v value = {};
  if (count > 0) {
    __builtin_memcpy(&value, source, sizeof(float) * static_cast<unsigned>(count));
  }
  return value;
}

// Stores the first `count` lanes (0 <= count <= kLanes); writes only destination[0, count).
[[gnu::always_inline]] inline void store_partial(float* destination, f32v value, int count) {
  if (count > 0) {
    __builtin_memcpy(destination, &value, sizeof(float) * static_cast<unsigned>(count));
  }
}

// ---------------------------------------------------------------------------------
// Comparisons and selects, register by register.
//
// GCC (12) compiles arithmetic on a vector wider than the target's registers as one
// operation per register, but a comparison or a `mask ? a : b` on one lane by lane:
// 16 scalar compares and branches for the JIT's f64v (two registers) and for the
// boolean vectors of its f64 kernels. These helpers split wider vectors in halves down
// to the register width, where they are the plain operators, and join the results.
// Every comparison and select of vectors that may be wider than a register goes through
// them (`less(x, 0.0f)`, not `x < 0.0f`); for an f32v they are the plain operator.
namespace halves {
template <class V>
inline constexpr int lane_count = sizeof(V) / sizeof(V{}[0]);

template <class V>
[[gnu::always_inline]] inline auto low(V v) {
  constexpr int n = lane_count<V>;
  static_assert(n == 4 || n == 8 || n == 16 || n == 32, "halves of 4 to 32 lanes");
  if constexpr (n == 32)
    return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  else if constexpr (n == 16)
    return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  else if constexpr (n == 8)
    return __builtin_shufflevector(v, v, 0, 1, 2, 3);
  else
    return __builtin_shufflevector(v, v, 0, 1);
}
template <class V>
[[gnu::always_inline]] inline auto high(V v) {
  constexpr int n = lane_count<V>;
  if constexpr (n == 32)
    return __builtin_shufflevector(v, v, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
  else if constexpr (n == 16)
    return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  else if constexpr (n == 8)
    return __builtin_shufflevector(v, v, 4, 5, 6, 7);
  else
    return __builtin_shufflevector(v, v, 2, 3);
}
template <class H>
[[gnu::always_inline]] inline auto join(H low, H high) {
  constexpr int n = lane_count<H>;
  if constexpr (n == 16)
    return __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                   21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31);
  else if constexpr (n == 8)
    return __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  else if constexpr (n == 4)
    return __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7);
  else
    return __builtin_shufflevector(low, high, 0, 1, 2, 3);
}
}  // namespace halves

// ---- transposes in registers --------------------------------------------------------
// transpose_square(rows) transposes the n x n elements held in `rows`, one vector of n lanes each (n a power of
// two): level K swaps the off-diagonal K x K blocks of every 2K x 2K block, two two-input shuffles (vpermt2d for
// 4-byte lanes) per pair of rows. The standard transpose kernel's tiles and the JIT's transposed strips use it.
namespace square_transpose {
template <int... lane>
struct lane_list {};
template <int count, int... lane>
struct make_lane_list : make_lane_list<count - 1, count - 1, lane...> {};
template <int... lane>
struct make_lane_list<0, lane...> {
  using type = lane_list<lane...>;
};

// Of rows a and b, `high` false keeps a's lanes and takes b's lanes K earlier where (lane & K); `high` true the
// other way round. (__builtin_shufflevector, GCC >= 12 and clang, needs its lane indices as constants.)
template <int K, bool high, class V, int... lane>
[[gnu::always_inline]] inline V swap_blocks(V a, V b, lane_list<lane...>) {
  constexpr int width = sizeof...(lane);
  return __builtin_shufflevector(
      a, b, (high ? ((lane & K) ? width + lane : lane + K) : ((lane & K) ? width + lane - K : lane))...);
}

template <class V, int K>
[[gnu::always_inline]] inline void levels(V* rows) {
  constexpr int width = halves::lane_count<V>;
  using all = typename make_lane_list<width>::type;
  for (int i = 0; i < width; ++i) {
    if (i & K) continue;
    const V a = rows[i], b = rows[i + K];
    rows[i] = swap_blocks<K, false>(a, b, all{});
    rows[i + K] = swap_blocks<K, true>(a, b, all{});
  }
  if constexpr (K > 1) levels<V, K / 2>(rows);
}
}  // namespace square_transpose

template <class V>
[[gnu::always_inline]] inline void transpose_square(V* rows) {
  square_transpose::levels<V, halves::lane_count<V> / 2>(rows);
}

// `value` in every lane of a V, bit for bit (V{} + value would turn -0 into +0); a V
// passes through. (The JIT prelude's splat.)
template <class V, class S>
[[gnu::always_inline]] inline V lanes_of(S value) {
  if constexpr (__is_same(V, S)) {
    return value;
  } else {
    V result;
    for (int lane = 0; lane < halves::lane_count<V>; ++lane)
      result[lane] = static_cast<__typeof__(result[0] + 0)>(value);
    return result;
  }
}

[[gnu::always_inline]] inline f32v broadcast(float value) { return lanes_of<f32v>(value); }

// Lane masks (-1 where true, 0 where false) of a comparison; `b` may be a scalar.
template <class V, class S>
[[gnu::always_inline]] inline auto less(V a, S b_value) {
  const V b = lanes_of<V>(b_value);
  if constexpr (sizeof(V) > kRegisterBytes)
    return halves::join(less(halves::low(a), halves::low(b)), less(halves::high(a), halves::high(b)));
  else
    return a < b;
}
template <class V, class S>
[[gnu::always_inline]] inline auto less_equal(V a, S b_value) {
  const V b = lanes_of<V>(b_value);
  if constexpr (sizeof(V) > kRegisterBytes)
    return halves::join(less_equal(halves::low(a), halves::low(b)), less_equal(halves::high(a), halves::high(b)));
  else
    return a <= b;
}
template <class V, class S>
[[gnu::always_inline]] inline auto greater(V a, S b) {
  return less(lanes_of<V>(b), a);
}
template <class V, class S>
[[gnu::always_inline]] inline auto greater_equal(V a, S b) {
  return less_equal(lanes_of<V>(b), a);
}
template <class V, class S>
[[gnu::always_inline]] inline auto equal(V a, S b_value) {
  const V b = lanes_of<V>(b_value);
  if constexpr (sizeof(V) > kRegisterBytes)
    return halves::join(equal(halves::low(a), halves::low(b)), equal(halves::high(a), halves::high(b)));
  else
    return a == b;
}
template <class V, class S>
[[gnu::always_inline]] inline auto not_equal(V a, S b_value) {
  const V b = lanes_of<V>(b_value);
  if constexpr (sizeof(V) > kRegisterBytes)
    return halves::join(not_equal(halves::low(a), halves::low(b)), not_equal(halves::high(a), halves::high(b)));
  else
    return a != b;
}
// NaN lanes.
template <class V>
[[gnu::always_inline]] inline auto is_nan(V x) {
  return not_equal(x, x);
}

// Lane-wise `mask ? if_true : if_false` (nonzero mask lane = true) for any vector V and
// a mask of as many lanes of the same width.
template <class M, class V>
[[gnu::always_inline]] inline V select_lanes(M mask, V if_true, V if_false) {
  if constexpr (sizeof(V) > kRegisterBytes)
    return halves::join(select_lanes(halves::low(mask), halves::low(if_true), halves::low(if_false)),
                        select_lanes(halves::high(mask), halves::high(if_true), halves::high(if_false)));
  else
    return mask ? if_true : if_false;
}
[[gnu::always_inline]] inline f32v select(i32v mask, f32v if_true, f32v if_false) {
  return select_lanes(mask, if_true, if_false);
}
[[gnu::always_inline]] inline i32v select(i32v mask, i32v if_true, i32v if_false) {
  return select_lanes(mask, if_true, if_false);
}

// True if any lane of the mask is nonzero; used once per vector to detect rare slow
// cases. Wider than a register: the halves' lanes or-ed first. A 64-byte mask (AVX-512)
// narrowed to bytes lets Clang emit one kortest and GCC a short sequence; a 32-byte one
// is one vptest (_mm256_testz_si256); a 16-byte one is read as two words.
template <class M>
[[gnu::always_inline]] inline bool any_lane(M mask) {
  if constexpr (sizeof(M) > kRegisterBytes) {
    return any_lane(halves::low(mask) | halves::high(mask));
#if defined(__AVX__)  // a 32-byte mask is wider than the registers without AVX
  } else if constexpr (sizeof(M) == 32) {
    using i64x4 = long long __attribute__((vector_size(32)));
    const i64x4 bits = __builtin_bit_cast(i64x4, mask);
    return !__builtin_ia32_ptestz256(bits, bits);
#endif
  } else if constexpr (sizeof(M) == 64) {
    using i8x16 = std::int8_t __attribute__((vector_size(16)));
    using i8x8 = std::int8_t __attribute__((vector_size(8)));
    if constexpr (halves::lane_count<M> == 16) {
      const i8x16 narrow = __builtin_convertvector(not_equal(mask, 0), i8x16);
      std::uint64_t words[2];
      __builtin_memcpy(words, &narrow, sizeof(words));
      return (words[0] | words[1]) != 0;
    } else {
      const i8x8 narrow = __builtin_convertvector(not_equal(mask, 0), i8x8);
      std::uint64_t word;
      __builtin_memcpy(&word, &narrow, sizeof(word));
      return word != 0;
    }
  } else {
    static_assert(sizeof(M) == 16);
    std::uint64_t words[2];
    __builtin_memcpy(words, &mask, sizeof(words));
    return (words[0] | words[1]) != 0;
  }
}
[[gnu::always_inline]] inline bool any(i32v mask) { return any_lane(mask); }

[[gnu::always_inline]] inline u32v to_bits(f32v value) { return __builtin_bit_cast(u32v, value); }
[[gnu::always_inline]] inline f32v from_bits(u32v bits) { return __builtin_bit_cast(f32v, bits); }

[[gnu::always_inline]] inline f32v abs(f32v value) { return from_bits(to_bits(value) & 0x7fffffffu); }
// `if_set` where x's sign bit is set (x < 0, -0, a NaN with its sign set), else `if_clear`: with AVX an integer
// compare of x's bits and a vblendvps.
[[gnu::always_inline]] inline f32v select_by_sign(f32v x, f32v if_set, f32v if_clear) {
  return select(less(__builtin_bit_cast(i32v, to_bits(x)), 0), if_set, if_clear);
}
// max(x, limit) for a limit that is not NaN, where a NaN x passes through (the AVX-512 code has its own, in
// detail::avx512). With AVX one vmaxps, which GCC keeps as it is: written as a select, GCC merged it with a
// select_by_sign around it into compares and ands of their masks (sigmoid: 4 instructions more).
[[gnu::always_inline]] inline f32v max_keep_nan_vector(f32v x, f32v limit) {
#if defined(__AVX__) && !defined(__AVX512F__)
  return __builtin_ia32_maxps256(limit, x);
#else
  return select(less(x, limit), limit, x);
#endif
}

// Correctly rounded a * b + c in every lane (one rounding), on any target. Range
// reductions rely on it. On x86 with FMA this is the vfmadd instruction, through the
// compiler builtin behind _mm512_fmadd_ps / _mm256_fmadd_ps: GCC 12 has no generic
// vector FMA, and its vectorizers turn the portable lane loop below into one vfmadd
// only in some contexts (in larger kernels it fell back to 16 scalar FMAs). Elsewhere
// the lane loop: vectorized where the target has FMA, calls to fmaf where it has not.
[[gnu::always_inline]] inline f32v fma(f32v a, f32v b, f32v c) {
#if defined(__AVX512F__)
  return __builtin_ia32_vfmaddps512_mask(a, b, c, static_cast<unsigned short>(0xffff), 4);
#elif defined(__AVX__) && defined(__FMA__)
  return __builtin_ia32_vfmaddps256(a, b, c);
#else
  f32v result = {};
  for (int lane = 0; lane < kLanes; ++lane) {
    result[lane] = __builtin_fmaf(a[lane], b[lane], c[lane]);
  }
  return result;
#endif
}

// a * b + c for polynomial evaluation: fused where the hardware has FMA, otherwise a
// multiply and an add (where one extra rounding is harmless and a software fmaf is not).
[[gnu::always_inline]] inline f32v mul_add(f32v a, f32v b, f32v c) {
  if constexpr (kHardwareFma) {
    return fma(a, b, c);
  } else {
    const f32v product = a * b;
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
[[gnu::always_inline]] inline f32v horner(f32v x, const float (&coefficients)[N]) {
  if constexpr (First == N - 1) {
    return broadcast(coefficients[First]);
  } else {
    return mul_add(horner<First + 1>(x, coefficients), x, broadcast(coefficients[First]));
  }
}

// f32h and u32h: half an f32v; f64h and u64h: as many doubles, one register.
using f32h = float __attribute__((vector_size(kRegisterBytes / 2)));
using u32h = std::uint32_t __attribute__((vector_size(kRegisterBytes / 2)));
using f64h = double __attribute__((vector_size(kRegisterBytes)));
using u64h = std::uint64_t __attribute__((vector_size(kRegisterBytes)));
inline constexpr double kPiOver2High = 0x1.921fb544p+0;          // 33 significant bits
inline constexpr double kPiOver2Low = 0x1.0b4611a626331p-34;     // double(pi/2 - kPiOver2High)
inline constexpr double kTwoOverPiDouble = 0.63661977236758134;  // double(2/pi)
inline constexpr double kRoundMagicDouble = 0x1.8p52;            // as kRoundMagic, for doubles

// The math. A JIT module with no f32 transcendental defines KILN_JIT_FLOAT_MATH as 0 and leaves it out (up to
// the scalar overloads at the end): a tenth of such a module's compile time (adam: 167 -> 150 ms).
#if !defined(KILN_JIT_FLOAT_MATH) || KILN_JIT_FLOAT_MATH

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
// Every instruction that produces a subnormal float takes a microcode assist on x86 (some 150 cycles: gelu of
// inputs of standard deviation 16 ran 10-20x slower than of N(0, 1) ones). Where a subnormal intermediate
// cannot change the result, it is kept out: sigmoid of x >= 0 takes e^-|x| at most this far down, erfc of
// x < 0 (2 - erfc(|x|), which is 2 from |x| = 4 on) clamps |x| at kErfcNegativeClamp.
inline constexpr float kSigmoidPositiveLimit = 87.0f;
inline constexpr float kExpClampHigh = 89.0f;
inline constexpr float kExpClampLow = -104.0f;

struct ExpReduced {
  f32v mantissa;  // exp(r), in [0.70, 1.42] (AVX2: 2^(j/8) exp(r), in [0.95, 1.92])
  u32v n;         // exp(x) = mantissa * 2^n (two's complement)
};

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
#define KILN_VECTOR_MATH_EXP_TABLE 1
#else
#define KILN_VECTOR_MATH_EXP_TABLE 0
#endif
inline constexpr bool kExpTable = KILN_VECTOR_MATH_EXP_TABLE;

#if KILN_VECTOR_MATH_EXP_TABLE
// AVX2 with FMA: an 8-entry table held in one register shortens the polynomial, as AVX-512's 16-entry one does
// (below). k = round(8 x / ln2) / 8 by the 1.5 * 2^20 addend, whose sum keeps 8k mod 8 = j in its low bits;
// r = x - k ln2 in [-ln2/16, ln2/16] (ln2 in two floats; the first FMA is exact: k ln2High and x are multiples
// of 2^-28 and |r| < 2^-4); e^x = 2^floor(k) 2^(j/8) e^r with e^r - 1 ~ r + r^2/2 + r^3/6 + r^4/24 (Taylor's
// error r^5/120 is 1.3e-9 = 0.02 u there). m = T + T p is rounded once. `vpermps` reads the index from the low
// three bits of each lane. Two FMAs fewer on the dependency chain than the degree-6 polynomial: every
// elementwise kernel with an exponential (softmax, sigmoid, gelu, erf) waits on that chain.
inline constexpr float kExpEighthsMagic = 0x1.8p20f;
alignas(32) inline constexpr float kExp2Eighths[8] = {1.0f,        1.09050775f, 1.18920708f, 1.29683959f,
                                                      1.41421354f, 1.54221082f, 1.68179286f, 1.8340081f};
inline constexpr float kExpEighthsPolynomial[] = {0.5f, 0.166666672f, 0.0416666679f};

// Garbage (never undefined behaviour) for lanes outside [-2^18, 2^18]; NaN stays NaN.
[[gnu::always_inline]] inline ExpReduced exp_reduce_table(f32v x) {
  const f32v magic = broadcast(kExpEighthsMagic);
  const f32v shifted = fma(x, broadcast(kLog2e), magic);
  const f32v k = shifted - magic;
  f32v r = fma(k, broadcast(-kLn2High), x);
  r = fma(k, broadcast(-kLn2Low), r);
  const f32v table = __builtin_ia32_permvarsf256(load(kExp2Eighths), __builtin_bit_cast(i32v, to_bits(shifted)));
  const f32v r2 = r * r;
  const f32v p = fma(r2, horner(r, kExpEighthsPolynomial), r);
  const i32v eighths = __builtin_bit_cast(i32v, to_bits(shifted) - to_bits(magic));
  return {fma(table, p, table), __builtin_bit_cast(u32v, eighths >> 3)};
}
#endif

// Garbage (never undefined behaviour) for lanes outside [-2^22, 2^22]; NaN stays NaN.
[[gnu::always_inline]] inline ExpReduced exp_reduce_polynomial(f32v x) {
  const f32v magic = broadcast(kRoundMagic);
  const f32v shifted = mul_add(x, broadcast(kLog2e), magic);
  const f32v n = shifted - magic;
  f32v r;
  if constexpr (kHardwareFma) {
    r = fma(n, broadcast(-kLn2High), x);  // -c, not -n: no negation op
    r = fma(n, broadcast(-kLn2Low), r);
  } else {
    // Without FMA, Cephes' split of ln2: n * kLn2Coarse has at most 17 significant
    // bits, so it and x - n * kLn2Coarse are exact with plain operations.
    const f32v coarse = n * kLn2Coarse;
    r = x - coarse;
    const f32v correction = n * kLn2CoarseError;
    r = r - correction;
  }
  const f32v r2 = r * r;
  return {mul_add(r2, horner(r, kExpPolynomial), r) + 1.0f, to_bits(shifted) - to_bits(magic)};
}

// The table's reduction where the target has it (Table), else the polynomial's. erfc and tanh keep the
// polynomial: the table's rounded 2^(j/8) costs up to half an ULP more, and their e^(-a^2) and e^(2|x|) pass
// it on nearly whole (erfc measured 3.91 ULP against its bound of 4, tanh 1.16 against its measured 1.07).
template <bool Table = kExpTable>
[[gnu::always_inline]] inline ExpReduced exp_reduce(f32v x) {
#if KILN_VECTOR_MATH_EXP_TABLE
  if constexpr (Table) return exp_reduce_table(x);
#endif
  return exp_reduce_polynomial(x);
}

// e^x for any x, denormal results included: 2^n is applied as two exact powers of two
// 2^(n/2) * 2^(n - n/2), so results down in the denormal range round once and results
// above FLT_MAX overflow to inf. Returns the two factors of the last multiplication:
// exp(x) = partial * scale.
struct ExpFactors {
  f32v partial;  // exp(r) * 2^(n/2), exact
  f32v scale;    // 2^(n - n/2)
};
template <bool Table = kExpTable>
[[gnu::always_inline]] inline ExpFactors exp_factors(f32v x) {
  x = select(greater(x, kExpClampHigh), broadcast(kExpClampHigh), x);  // NaN passes through
  x = select(less(x, kExpClampLow), broadcast(kExpClampLow), x);
  const ExpReduced reduced = exp_reduce<Table>(x);
  const u32v half_n = __builtin_bit_cast(u32v, __builtin_bit_cast(i32v, reduced.n) >> 1);
  const u32v other_half_n = reduced.n - half_n;
  return {reduced.mantissa * from_bits((half_n + 127u) << 23), from_bits((other_half_n + 127u) << 23)};
}

// e^x for x in [-87, 88] (normal results; callers clamp): 2^n is added to the exponent
// bits, exactly. NaN does NOT propagate (the bit arithmetic can make it a number).
template <bool Table = kExpTable>
[[gnu::always_inline]] inline f32v exp_normal_range(f32v x) {
  const ExpReduced reduced = exp_reduce<Table>(x);
  return from_bits(to_bits(reduced.mantissa) + (reduced.n << 23));
}

// Whether any lane needs more than exp_normal_range: |x| > 87 (e^x near or past the ends of the normal floats),
// infinite or NaN. One integer comparison of |x|'s bits, which are above 87's for all of those.
inline constexpr std::uint32_t kExpNormalLimitBits = 0x42ae0000u;  // 87.0f
[[gnu::always_inline]] inline bool any_outside_exp_normal_range(f32v x) {
  const i32v magnitude_bits = __builtin_bit_cast(i32v, to_bits(x) & 0x7fffffffu);
  return any(greater(magnitude_bits, static_cast<std::int32_t>(kExpNormalLimitBits)));
}

// e^x for any x (the portable exp): usual arguments take exp_normal_range, which puts 2^n into the exponent bits:
// the same bits as the two exact multiplications of exp_factors, which are needed only where e^x is denormal or
// overflows (and for NaN).
template <bool Table = kExpTable>
[[gnu::always_inline]] inline f32v exp_any(f32v x) {
  if (!any_outside_exp_normal_range(x)) [[likely]]
    return exp_normal_range<Table>(x);
  const ExpFactors factors = exp_factors<Table>(x);
  return factors.partial * factors.scale;
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
// zeros. Beyond kTrigFastLimit the lanes are recomputed with libm's double-precision
// sin / cos (a cold, per-lane path: such arguments are rare in practice).
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
  f32v r;         // x - j pi/2, |r| <= pi/4 (slightly more after rounding)
  u32v quadrant;  // j mod 2^32
};

// With FMA: float arithmetic, pi/2 in three floats (see above).
[[gnu::always_inline]] inline QuadrantReduction reduce_quadrant_fma(f32v x) {
  const f32v magic = broadcast(kRoundMagic);
  const f32v shifted = mul_add(x, broadcast(kTwoOverPi), magic);
  const f32v j = shifted - magic;
  f32v r = fma(j, broadcast(-kPiOver2Part1), x);  // -c, not -j: no negation op
  r = fma(j, broadcast(-kPiOver2Part2), r);
  r = fma(j, broadcast(-kPiOver2Part3), r);
  return {r, to_bits(shifted) - to_bits(magic)};
}

// Without FMA (where exact float products would cost a library call per lane): the
// same reduction in double precision, with pi/2 split into a 33-bit double (j * it is
// exact for |j| < 2^20, and so is x - j * it) and the rest; r is rounded to float once
// (f32h, f64h and the double constants are above, before the math: vector_math_f64.h uses them too).

[[gnu::always_inline]] inline void reduce_half_in_double(f32h x, f32h& r, u32h& quadrant) {
  const f64h value = __builtin_convertvector(x, f64h);
  const f64h product = value * kTwoOverPiDouble;
  const f64h shifted = product + kRoundMagicDouble;
  const f64h j = shifted - kRoundMagicDouble;
  const f64h high = j * kPiOver2High;
  const f64h low = j * kPiOver2Low;
  const f64h reduced = (value - high) - low;
  r = __builtin_convertvector(reduced, f32h);
  quadrant = __builtin_convertvector(__builtin_bit_cast(u64h, shifted), u32h);  // j in the low bits
}

[[gnu::always_inline]] inline QuadrantReduction reduce_quadrant_double(f32v x) {
  f32h r_low, r_high;
  u32h quadrant_low, quadrant_high;
  reduce_half_in_double(halves::low(x), r_low, quadrant_low);
  reduce_half_in_double(halves::high(x), r_high, quadrant_high);
  return {halves::join(r_low, r_high), halves::join(quadrant_low, quadrant_high)};
}

// sin(x) if quadrant_offset is 0, cos(x) if it is 1.
[[gnu::always_inline]] inline f32v sin_cos_fast(f32v x, unsigned quadrant_offset) {
  QuadrantReduction reduced;
  if constexpr (kHardwareFma) {
    reduced = reduce_quadrant_fma(x);
  } else {
    reduced = reduce_quadrant_double(x);
  }
  const f32v r = reduced.r;
  const u32v quadrant = reduced.quadrant + quadrant_offset;
  const f32v r2 = r * r;
  const f32v r3 = r2 * r;
  const f32v sine = mul_add(r3, horner(r2, kSinPolynomial), r);
  const f32v cosine = mul_add(r2, horner(r2, kCosPolynomial), broadcast(1.0f));
  // Odd quadrants swap sin and cos; quadrants 2 and 3 negate.
  const f32v result = select(not_equal(quadrant & 1u, 0u), cosine, sine);
  return from_bits(to_bits(result) ^ ((quadrant & 2u) << 30));
}

// Recomputes the lanes with |x| > kTrigFastLimit in double precision. The one function
// here that is not inlined (it is cold); it takes plain arrays and their length so that
// it is the same function whatever vector ISA a translation unit was built for: copies
// compiled with and without AVX-512 (a kernel library and a JIT module, with different
// kLanes) may be merged by the linker.
[[gnu::noinline, gnu::cold]] inline void sin_cos_large_lanes(const float* x, float* result, int count, bool cosine) {
  for (int lane = 0; lane < count; ++lane) {
    const double value = static_cast<double>(x[lane]);
    if (__builtin_fabs(value) > static_cast<double>(kTrigFastLimit)) {
      result[lane] = static_cast<float>(cosine ? __builtin_cos(value) : __builtin_sin(value));
    }
  }
}

[[gnu::always_inline]] inline f32v sin_cos_large(f32v x, f32v result, bool cosine) {
  float x_lanes[kLanes], result_lanes[kLanes];
  store(x_lanes, x);
  store(result_lanes, result);
  sin_cos_large_lanes(x_lanes, result_lanes, kLanes, cosine);
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

// ---- erfc -------------------------------------------------------------------------
// 1 - erf(x), relatively accurate where that difference cancels: for x > 0 erfc falls
// to the denormals (it rounds to 0 from 10.06).
// |x| < 1: (1 - x) - x K(x^2) with erf's K: no cancellation, since erfc >= 0.157 there
//   and x K(x^2) is at most 0.157 (K's error, 1.2e-9 absolute, is 0.13 ULP of 0.157).
// a = |x| >= 1: erfc(a) = e^(-a^2) s(a), s = erfc e^(a^2) in [0.0557, 0.4276]: on [1, 2]
//   a degree-9 polynomial in a - 1.5; above, g(t) / a with t = 1/a and g a degree-8
//   polynomial (scripts/vector-math-erfc-coefficients: 2.9e-9 and 1.4e-8 relative). a^2 =
//   high + low exactly, and e^(-a^2) = e^(-high) (1 - low): rounding a^2 instead would
//   cost a^2 2^-24 relative, 100 ULP at a = 10. a is clamped to 10.1, where the result
//   rounds to 0 (erfc(+inf) = +0) and inf cannot make a NaN of high - high.
// x <= -1: 2 - erfc(a), in [1.84, 2].
inline constexpr float kErfcNearPolynomial[] = {0.321585417f,    -0.163622916f,   0.0761510283f,  -0.0329309031f,
                                                0.0133776357f,   -0.0051460471f,  0.00188285275f, -0.000660931517f,
                                                0.000238139604f, -7.71736522e-05f};
inline constexpr float kErfcFarPolynomial[] = {0.564195693f,   -0.000245840929f, -0.277915597f,
                                               -0.0390471034f, 0.640017688f,     -0.703923345f,
                                               0.0199311841f,  0.495990038f,     -0.284537733f};
inline constexpr float kErfcNearLimit = 2.0f, kErfcClamp = 10.1f, kErfcNegativeClamp = 9.0f;

// The low part of a * a = high + low, exactly: an FMA, or Dekker's product without one
// (a = top + bottom, 12 significant bits each, so every partial product is exact).
[[gnu::always_inline]] inline f32v square_error(f32v a, f32v high) {
  if constexpr (kHardwareFma) {
    return fma(a, a, -high);
  } else {
    const f32v split = a * 4097.0f;  // 2^12 + 1
    const f32v top = split - (split - a);
    const f32v bottom = a - top;
    return ((top * top - high) + 2.0f * top * bottom) + bottom * bottom;
  }
}

[[gnu::always_inline]] inline f32v with_sign_of(f32v magnitude, f32v sign_source) {
  return from_bits(to_bits(magnitude) | (to_bits(sign_source) & 0x80000000u));
}

// ---------------------------------------------------------------------------------
// AVX-512 implementations (docs/vector_math.md, "AVX-512"). Used when the target has
// AVX-512F; other targets use the portable code above. Same accuracy contract, other
// bits: a value computed for an AVX-512 target may differ by an ULP from the portable
// result, but every AVX-512 build (any compiler, -O level, contraction mode) gives the
// same bits, vector lanes and scalar overloads alike. The instructions are reached
// through the compiler builtins behind the <immintrin.h> intrinsics (named in the
// comments), not the header itself: with -march=native that header adds about 0.5 s to
// every JIT compilation.
#if defined(__AVX512F__)
namespace avx512 {
static_assert(kLanes == 16, "the AVX-512 implementations work on one zmm register");

using mask16 = unsigned short;
inline constexpr mask16 kAllLanes = 0xffff;
inline constexpr int kCurrentRounding = 4;  // _MM_FROUND_CUR_DIRECTION

// a * 2^floor(b), rounded once (denormal results included); inf / 0 on overflow /
// underflow; NaN in either gives NaN. (_mm512_scalef_ps)
[[gnu::always_inline]] inline f32v scalef(f32v a, f32v b) {
  return __builtin_ia32_scalefps512_mask(a, b, a, kAllLanes, kCurrentRounding);
}
// The significand of x scaled into [0.75, 1.5), NaN for negative x (including -inf);
// ±0 and +inf give ±1 and 1. Denormals are normalized. (_mm512_getmant_ps with
// _MM_MANT_NORM_p75_1p5, _MM_MANT_SIGN_nan)
[[gnu::always_inline]] inline f32v significand_075_15(f32v x) {
  return __builtin_ia32_getmantps512_mask(x, (2 << 2) | 3, x, kAllLanes, kCurrentRounding);
}
// floor(log2 |x|) as a float, exact for denormals; -inf for ±0, +inf for ±inf.
// (_mm512_getexp_ps)
[[gnu::always_inline]] inline f32v exponent(f32v x) {
  return __builtin_ia32_getexpps512_mask(x, x, kAllLanes, kCurrentRounding);
}
// 1/x with relative error < 2^-14; the bits are defined by the ISA (Intel publishes
// its reference implementation), not by the compiler. (_mm512_rcp14_ps)
[[gnu::always_inline]] inline f32v reciprocal_estimate(f32v x) {
  return __builtin_ia32_rcp14ps512_mask(x, x, kAllLanes);
}
// table[index & 15] in every lane. (_mm512_permutexvar_ps)
[[gnu::always_inline]] inline f32v lookup16(const float (&table)[16], u32v index) {
  const f32v values = load(table);
#if defined(__clang__)
  return __builtin_ia32_permvarsf512(values, __builtin_bit_cast(i32v, index));
#else
  return __builtin_ia32_permvarsf512_mask(values, __builtin_bit_cast(i32v, index), values, kAllLanes);
#endif
}
// table[index & 31] in every lane. (_mm512_permutex2var_ps)
[[gnu::always_inline]] inline f32v lookup32(const float (&table)[32], u32v index) {
  const f32v low = load(table), high = load(table + 16);
#if defined(__clang__)
  return __builtin_ia32_vpermi2varps512(low, __builtin_bit_cast(i32v, index), high);
#else
  return __builtin_ia32_vpermt2varps512_mask(__builtin_bit_cast(i32v, index), low, high, kAllLanes);
#endif
}
// Lanes where `input` is ±0 get `input` itself, the others keep `value`.
// (_mm512_fixupimm_ps; token 1 = "the input" for the zero class)
[[gnu::always_inline]] inline f32v zero_passes_through(f32v value, f32v input) {
  const i32v table = {0x100, 0x100, 0x100, 0x100, 0x100, 0x100, 0x100, 0x100,
                      0x100, 0x100, 0x100, 0x100, 0x100, 0x100, 0x100, 0x100};
  return __builtin_ia32_fixupimmps512_mask(value, input, table, 0, kAllLanes, kCurrentRounding);
}
// Lanes where `input` is NaN get it (quieted), the others keep `value`: a NaN that took several paths through a
// function comes out as the one it came in as, whichever operand order the compiler gave the operations it met.
// (_mm512_fixupimm_ps; token 1 = the input for the QNaN class, 2 = the input quieted for SNaN)
[[gnu::always_inline]] inline f32v nan_passes_through(f32v value, f32v input) {
  const i32v table = {0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21, 0x21};
  return __builtin_ia32_fixupimmps512_mask(value, input, table, 0, kAllLanes, kCurrentRounding);
}
// min(x, limit) and max(x, limit) where a NaN x passes through: vminps / vmaxps return
// their second operand when either is NaN. (_mm512_min_ps / _mm512_max_ps; written with
// builtins because GCC compiles the equivalent select to a compare and a blend)
[[gnu::always_inline]] inline f32v min_keep_nan_vector(f32v x, f32v limit) {
#if defined(__clang__)
  return __builtin_ia32_minps512(limit, x, kCurrentRounding);
#else
  return __builtin_ia32_minps512_mask(limit, x, x, kAllLanes, kCurrentRounding);
#endif
}
[[gnu::always_inline]] inline f32v min_keep_nan(f32v x, float limit) {
  return min_keep_nan_vector(x, broadcast(limit));
}
[[gnu::always_inline]] inline f32v max_keep_nan_vector(f32v x, f32v limit) {
#if defined(__clang__)
  return __builtin_ia32_maxps512(limit, x, kCurrentRounding);
#else
  return __builtin_ia32_maxps512_mask(limit, x, x, kAllLanes, kCurrentRounding);
#endif
}
[[gnu::always_inline]] inline f32v max_keep_nan(f32v x, float limit) { return max_keep_nan_vector(x, broadcast(limit)); }

// ---- exp: 16-entry table ----------------------------------------------------------
// k = round(16 x / ln2) / 16 (the 1.5 * 2^19 addend rounds to multiples of 1/16 and
// leaves 16 k mod 16 = j in the low bits of the sum), r = x - k ln2 in
// [-ln2/32, ln2/32] (ln2 in two floats; the first FMA step is exact because k ln2High
// and x are multiples of 2^-28 and |r| < 2^-5), e^x = 2^floor(k) * 2^(j/16) * e^r with
// e^r - 1 ~ r + c2 r^2 + c3 r^3 (minimax for the absolute error, 1.9e-9 = 0.03 u with
// float coefficients). m = T + T p is rounded once; scalef applies 2^floor(k) with one
// more rounding only for denormal results. T = 2^(j/16) rounded to float costs up to
// 0.5 u: the measured maximum is about 1 ULP.
inline constexpr float kExpTableMagic = 0x1.8p19f;
alignas(64) inline constexpr float kExp2Sixteenths[16] = {
    1.0f, 1.04427373f, 1.09050775f, 1.13878858f, 1.18920708f, 1.24185777f, 1.29683959f, 1.35425556f,
    1.41421354f, 1.47682619f, 1.54221082f, 1.61049032f, 1.68179286f, 1.75625217f, 1.8340081f, 1.91520655f};
inline constexpr float kExpTableC2 = 0.50001556f;
inline constexpr float kExpTableC3 = 0.16666794f;
inline constexpr float kExpLimit = 104.0f;  // |x| beyond: exp is inf or 0 anyway

struct ExpParts {
  f32v m;  // e^x = m * 2^floor(k), m in [0.97, 2.04]
  f32v k;
};
struct ExpReduction {
  f32v shifted;  // k = shifted - magic; its low bits index the table
  f32v k;
  f32v r;  // x - k ln2
};
// For x in [-104, 104] or NaN.
[[gnu::always_inline]] inline ExpReduction exp_reduction(f32v x) {
  const f32v magic = broadcast(kExpTableMagic);
  const f32v shifted = fma(x, broadcast(kLog2e), magic);
  const f32v k = shifted - magic;
  const f32v r = fma(k, broadcast(-kLn2High), x);
  return {shifted, k, fma(k, broadcast(-kLn2Low), r)};
}
[[gnu::always_inline]] inline ExpParts exp_parts(const ExpReduction& reduction) {
  const f32v r = reduction.r;
  const f32v table = lookup16(kExp2Sixteenths, to_bits(reduction.shifted));
  const f32v r2 = r * r;
  const f32v p = fma(r2, fma(broadcast(kExpTableC3), r, broadcast(kExpTableC2)), r);
  return {fma(table, p, table), reduction.k};
}
// For x in [-104, 104] or NaN.
[[gnu::always_inline]] inline ExpParts exp_parts(f32v x) { return exp_parts(exp_reduction(x)); }

// exp for x <= kExpLimit or NaN (softmax's x - max x <= 0): without the upper clamp, which changes nothing there.
[[gnu::always_inline]] inline f32v exp_of_nonpositive(f32v x) {
  const ExpParts parts = exp_parts(max_keep_nan(x, -kExpLimit));
  return scalef(parts.m, parts.k);
}
[[gnu::always_inline]] inline f32v exp(f32v x) { return exp_of_nonpositive(min_keep_nan(x, kExpLimit)); }

// sigmoid: e = e^-|x| in (0, 1] (never overflows), d = 1 + e, 1/d from the 14-bit
// estimate y0 and one Newton step folded into the last FMA:
// result = n y0 (2 - d y0) with n = 1 (x >= 0) or e (x < 0).
[[gnu::always_inline]] inline f32v sigmoid(f32v x) {
  // For x >= 0, e only makes d = 1 + e, which is 1 from x = 17 on: e^-87, normal, gives it as e^-|x| does, and
  // a subnormal e would cost a microcode assist (kSigmoidPositiveLimit).
  const f32v limit = select(x < 0.0f, broadcast(-kExpLimit), broadcast(-kSigmoidPositiveLimit));
  const f32v minus_abs = max_keep_nan_vector(from_bits(to_bits(x) | 0x80000000u), limit);
  const ExpParts parts = exp_parts(minus_abs);
  const f32v e = scalef(parts.m, parts.k);
  const f32v d = e + 1.0f;
  const f32v y0 = reciprocal_estimate(d);
  const f32v t = fma(-d, y0, broadcast(1.0f));  // 1 - d y0, |t| < 2^-14
  const f32v numerator_y0 = select(x < 0.0f, e * y0, y0);
  return fma(numerator_y0, t, numerator_y0);
}

// ---- log: 32-entry table ----------------------------------------------------------
// x = 2^k z with z in [0.75, 1.5) (getmant; k = getexp(x) - getexp(z) is exact), the
// index i = round(32 z) (the 1.5 * 2^23 addend leaves i in the low bits), and
// log x = k ln2 - log(invc_i) + log1p(z invc_i - 1). invc_i ~ 32 / i is chosen (among
// nearby floats) so that log(invc_i) is within 2^-35 relative of a float (Gal's
// accurate tables); invc = 1 for i = 32, so near x = 1, r = z - 1 exactly. |r| <= 0.021:
// log1p(r) ~ r + r^2 (c2 + c3 r + c4 r^2), 7.8e-9 = 0.13 u relative. Special inputs
// need no fix-up: getmant gives NaN for negative x, getexp -inf for ±0 and +inf for
// +inf, and the polynomial stays finite for them.
alignas(64) inline constexpr float kLogInverse[32] = {
    1.0f, 0.96957076f, 0.94131714f, 0.9144761f, 0.8888079f, 0.86498255f, 0.8420356f, 0.82066107f,
    0.8001206f, 0.78044915f, 0.76199967f, 0.7440316f, 0.7273897f, 0.7110863f, 0.695686f, 0.6810205f,
    0.6667929f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.333572f, 1.2802093f, 1.2309699f, 1.1851193f,
    1.1428059f, 1.1031071f, 1.0664537f, 1.0325149f};
alignas(64) inline constexpr float kLogOfCenter[32] = {  // -log(kLogInverse[i]) rounded to float
    0.0f, 0.030901825f, 0.06047517f, 0.08940395f, 0.11787416f, 0.14504595f, 0.171933f, 0.19764508f,
    0.22299282f, 0.24788569f, 0.27180916f, 0.29567176f, 0.31829292f, 0.34096152f, 0.3628569f, 0.38416287f,
    0.40527573f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, -0.28786108f, -0.24702358f, -0.2078024f,
    -0.16984342f, -0.13348658f, -0.09813083f, -0.06433884f, -0.031997506f};
inline constexpr float kLogTableC2 = -0.5000001f;
inline constexpr float kLogTableC3 = 0.33340025f;
inline constexpr float kLogTableC4 = -0.2494641f;

[[gnu::always_inline]] inline f32v log(f32v x) {
  const f32v z = significand_075_15(x);
  const f32v k = exponent(x) - exponent(z);
  const f32v shifted = fma(z, broadcast(32.0f), broadcast(kRoundMagic));
  const f32v inverse = lookup32(kLogInverse, to_bits(shifted));
  const f32v log_center = lookup32(kLogOfCenter, to_bits(shifted));
  const f32v r = fma(z, inverse, broadcast(-1.0f));
  const f32v r2 = r * r;
  const f32v q = fma(r2, broadcast(kLogTableC4), fma(broadcast(kLogTableC3), r, broadcast(kLogTableC2)));
  const f32v sum = log_center + fma(r2, q, r);
  return fma(k, broadcast(kLn2High), sum);
}

// ---- sin / cos ------------------------------------------------------------------------
// The portable algorithm (sin_cos_fast: reduction by pi/2, sin and cos polynomials on
// |r| <= pi/4, same bits); AVX-512 only replaces the signed-zero select of sin by a
// fixupimm and any() by one compare into a mask register. A reduction by pi with one
// polynomial on |r| <= pi/2 (3 operations fewer) was tried and measured 2.1 ULP near
// sin = 1: the correction r^3 S reaches 57% of the result there, so its rounding
// errors are not damped.
// Lanes of a where `mask` is set get b. (_mm512_mask_blend_ps)
[[gnu::always_inline]] inline f32v blend(mask16 mask, f32v a, f32v b) {
#if defined(__clang__)
  return __builtin_ia32_selectps_512(mask, b, a);
#else
  return __builtin_ia32_blendmps_512_mask(a, b, mask);
#endif
}
// Mask of the lanes where bits & `bit` is nonzero. (_mm512_test_epi32_mask; Clang's
// backend makes the same instruction from the generic form)
[[gnu::always_inline]] inline mask16 test_bits(u32v bits, std::uint32_t bit) {
#if defined(__clang__)
  const i32v zero = {};
  return __builtin_ia32_cmpd512_mask(__builtin_bit_cast(i32v, bits & bit), zero, 4 /* _MM_CMPINT_NE */, kAllLanes);
#else
  const u32v pattern = bits - bits + bit;
  return __builtin_ia32_ptestmd512(__builtin_bit_cast(i32v, bits), __builtin_bit_cast(i32v, pattern), kAllLanes);
#endif
}
// a ^ (b & c), bitwise, in one instruction. (_mm512_ternarylogic_epi32, 0x78)
[[gnu::always_inline]] inline u32v xor_and(u32v a, u32v b, u32v c) {
  return __builtin_bit_cast(u32v,
                            __builtin_ia32_pternlogd512_mask(__builtin_bit_cast(i32v, a), __builtin_bit_cast(i32v, b),
                                                             __builtin_bit_cast(i32v, c), 0x78, kAllLanes));
}

// sin_cos_fast with the same arithmetic (hence the same bits): the quadrant is read from
// the low bits of the rounding sum directly, the odd-quadrant swap is one test into a
// mask and a blend, the sign one shift and one ternary-logic op.
[[gnu::always_inline]] inline f32v sin_cos(f32v x, bool cosine) {
  const f32v magic = broadcast(kRoundMagic);
  const f32v shifted = fma(x, broadcast(kTwoOverPi), magic);
  const f32v j = shifted - magic;
  f32v r = fma(j, broadcast(-kPiOver2Part1), x);
  r = fma(j, broadcast(-kPiOver2Part2), r);
  r = fma(j, broadcast(-kPiOver2Part3), r);
  u32v quadrant = to_bits(shifted);  // j mod 4 in the low bits (those of magic are 0)
  if (cosine) quadrant += 1u;
  const f32v r2 = r * r;
  const f32v r3 = r2 * r;
  const f32v sine = fma(r3, horner(r2, kSinPolynomial), r);
  const f32v cosine_r = fma(r2, horner(r2, kCosPolynomial), broadcast(1.0f));
  const f32v result = blend(test_bits(quadrant, 1u), sine, cosine_r);
  const u32v sign = to_bits(broadcast(-0.0f));
  return from_bits(xor_and(to_bits(result), quadrant << 30, sign));
}

// True if some lane has |x| >= 2^17 (NaN: false), from the exponent: one getexp and one
// compare into a mask. (_mm512_cmp_ps_mask)
[[gnu::always_inline]] inline bool any_large_trig_argument(f32v x) {
  return __builtin_ia32_cmpps512_mask(exponent(x), broadcast(16.0f), 0x1e /* _CMP_GT_OQ */, kAllLanes,
                                      kCurrentRounding) != 0;
}

[[gnu::always_inline]] inline f32v sin_fast(f32v x) {
  // r + r^3 S is +0 for r = -0: sin(-0) = -0 is restored from the input.
  return zero_passes_through(sin_cos(x, false), x);
}

[[gnu::always_inline]] inline f32v cos_fast(f32v x) { return sin_cos(x, true); }

// ---- tanh, erf: piecewise polynomials from tables -------------------------------------
// |x| (clamped where the function has rounded to 1) is split into intervals of width
// w centred at i w (the first is [0, w/2]); on each, f(i w + t) ~ c0 + c1 t + ... by
// Horner with the coefficients of interval i fetched by permutes (one register or two per
// coefficient). Minimax fits for relative error per interval; c0 = 0 on the first, so
// tiny arguments keep their relative accuracy. tanh: 32 intervals of 0.2907 up to 9.1,
// degree 6 (0.6 u with float coefficients); erf: 16 intervals of 0.2557 up to 3.95,
// degree 5 (1.15 u). These replaced expm1 / exp-based forms: no division, no exp, and
// the polynomial cannot overshoot 1 near saturation.
inline constexpr float kTanhWidth = 0.29073483f;
inline constexpr float kTanhInverseWidth = 3.4395604f;
inline constexpr float kTanhClamp = 9.1f;  // tanh rounds to 1 from 9.0109
alignas(64) inline constexpr float kTanhTable[7][32] = {
    {
      0.0f, 0.282811016f, 0.523732781f, 0.702492416f, 0.821995497f, 0.896416962f, 0.940735877f,
      0.96642822f, 0.981090844f, 0.989384115f, 0.99405098f, 0.99666965f, 0.998136699f, 0.998957872f,
      0.999417245f, 0.999674141f, 0.999817789f, 0.999898136f, 0.999943078f, 0.999968171f, 0.999982178f,
      0.999990046f, 0.999994457f, 0.999996901f, 0.999998271f, 0.999999046f, 0.999999464f, 0.999999702f,
      0.999999821f, 0.999999881f, 0.99999994f, 1.0f},
    {
      1.0f, 0.920017958f, 0.725704014f, 0.506504357f, 0.324323446f, 0.196436569f, 0.115016058f,
      0.0660165399f, 0.0374607332f, 0.0211191159f, 0.0118626552f, 0.0066495575f, 0.00372307398f,
      0.00208319281f, 0.00116519874f, 0.000651602168f, 0.000364347565f, 0.000203714386f, 0.00011389696f,
      6.36786717e-05f, 3.56017226e-05f, 1.99042297e-05f, 1.11280278e-05f, 6.22142989e-06f,
      3.47825767e-06f, 1.94461222e-06f, 1.08718666e-06f, 6.07820255e-07f, 3.39817831e-07f, 1.8998405e-07f,
      1.06215552e-07f, 1.15461432e-07f},
    {
      -8.94982506e-08f, -0.260194004f, -0.380073607f, -0.355805665f, -0.266601145f, -0.176077873f,
      -0.108209863f, -0.0638091117f, -0.0367479138f, -0.0209032502f, -0.0117930248f, -0.00661730301f,
      -0.00370507641f, -0.00208569411f, -0.00117026945f, -0.000649643654f, -0.000355967f,
      -0.000202918687f, -0.00012483132f, -6.80112862e-05f, -2.73875939e-05f, -1.91875424e-05f,
      -1.93526103e-05f, -1.06815442e-05f, -7.66844005e-06f, -9.31302748e-06f, -3.91543472e-06f,
      -2.9359071e-06f, 3.1818056e-06f, 9.38711219e-06f, 2.46307354e-06f, -1.42750605e-05f},
    {
      -0.333324969f, -0.23309043f, -0.0428573862f, 0.0811224878f, 0.111029804f, 0.0923729241f,
      0.0634492338f, 0.0396527275f, 0.0235706884f, 0.0136332642f, 0.00776761211f, 0.00438883109f,
      0.00246816198f, 0.00138444698f, 0.000775428547f, 0.000433976005f, 0.000242763417f, 0.000135766706f,
      7.59179529e-05f, 4.24477148e-05f, 2.37330678e-05f, 1.32688892e-05f, 7.41850818e-06f, 4.1475414e-06f,
      2.31879517e-06f, 1.29639443e-06f, 7.2479213e-07f, 4.05211807e-07f, 2.26544401e-07f, 1.26654996e-07f,
      7.08093211e-08f, -5.74974001e-05f},
    {
      -0.000260310277f, 0.15288946f, 0.149001151f, 0.0606675372f, -0.00155053847f, -0.0251992587f,
      -0.0226342808f, -0.0161905047f, -0.0113099469f, -0.00571109774f, -0.0036990128f, -0.00315087847f,
      -0.00230342126f, -0.000233716113f, 0.00017388101f, -0.00038698464f, -0.000932056515f,
      -0.000143425321f, 0.00102895347f, 0.000401474448f, -0.000812810322f, -7.65030927e-05f,
      0.000798322726f, 0.000432859291f, 0.000407449785f, 0.000717888179f, 0.000275436236f,
      0.000226822434f, -0.00034352683f, -0.000933980569f, -0.000250581419f, 0.00137012871f},
    {
      0.136916474f, 0.0549474508f, -0.0465057492f, -0.0587927923f, -0.0279051233f, -0.0050042998f,
      0.00356279709f, 0.00472301897f, 0.0036376256f, 0.00238612527f, 0.00144841452f, 0.000843931106f,
      0.000484477525f, 0.000274301477f, 0.000154783411f, 8.66752962e-05f, 4.86304161e-05f,
      2.72284306e-05f, 1.52201137e-05f, 8.52872745e-06f, 4.76126661e-06f, 2.66635425e-06f,
      1.48876984e-06f, 8.32700607e-07f, 4.6586095e-07f, 2.60195804e-07f, 1.45201682e-07f, 8.12680057e-08f,
      4.54342342e-08f, 2.54233328e-08f, 1.42292382e-08f, 0.00812210236f},
    {
      -0.022627132f, -0.0775821581f, -0.0296808444f, 0.0389003716f, -0.00579420058f, 0.0386464521f,
      -0.0251925103f, -0.0241661072f, 0.011275976f, -0.0230867751f, -0.00296815066f, 0.0269625969f,
      0.0296336357f, -0.0126743224f, -0.0155377565f, 0.00467447564f, 0.0223776307f, 0.00207822071f,
      -0.0294736233f, -0.0116779627f, 0.0221210141f, 0.00192893483f, -0.0221531279f, -0.0120134056f,
      -0.0112862019f, -0.0198465195f, -0.00761778234f, -0.00627060374f, 0.00948528666f, 0.0257953815f,
      0.0069202357f, 0.00133515743f},
};
inline constexpr float kErfWidth = 0.25566342f;
inline constexpr float kErfInverseWidth = 3.9113925f;
inline constexpr float kErfClamp = 3.95f;  // erf rounds to 1 from 3.9192
alignas(64) inline constexpr float kErfTable[6][16] = {
    {
      0.0f, 0.282321125f, 0.530397117f, 0.72194016f, 0.851893127f, 0.929364443f, 0.969945848f,
      0.988624215f, 0.99617815f, 0.998862326f, 0.999700367f, 0.999930263f, 0.999985695f, 0.999997377f,
      0.999999583f, 0.99999994f},
    {
      0.128379166f, 1.05698276f, 0.86877346f, 0.626571894f, 0.396516234f, 0.220179424f, 0.107279882f,
      0.0458654389f, 0.017205948f, 0.00566366222f, 0.00163584424f, 0.000414583832f, 9.21952887e-05f,
      1.79899962e-05f, 3.08020526e-06f, 4.59730472e-07f},
    {
      2.69660006e-07f, -0.270222396f, -0.444217622f, -0.480572581f, -0.40550375f, -0.281458497f,
      -0.164564714f, -0.0820798278f, -0.0351976752f, -0.0130295241f, -0.00417917408f, -0.00116504298f,
      -0.000289078889f, -5.32956947e-05f, -1.04791752e-05f, -1.43026625e-06f},
    {
      -0.376141012f, -0.306254745f, -0.138168395f, 0.0368585736f, 0.144277528f, 0.166473016f,
      0.132535473f, 0.0826459751f, 0.0422499962f, 0.0181029569f, 0.00658290647f, 0.00204764167f,
      0.000547714008f, 0.000126459083f, 2.5271871e-05f, 5.53701784e-06f},
    {
      0.000275592261f, 0.128063127f, 0.182086244f, 0.145540297f, 0.0617567934f, -0.0122483419f,
      -0.0465213135f, -0.0466192961f, -0.0311692823f, -0.0166558493f, -0.00722011551f, -0.0025591494f,
      -0.000440032716f, -0.000522564456f, -7.00765377e-05f, -2.84212529e-05f},
    {
      0.111016907f, 0.0777781308f, 0.00441180961f, -0.0548347831f, -0.0678105429f, -0.0436357446f,
      -0.0112444395f, 0.008372779f, 0.0130083859f, 0.00972859096f, 0.005222979f, 0.00220415695f,
      0.000760163239f, 0.000218551912f, 5.30473735e-05f, -7.11578323e-05f},
};

[[gnu::always_inline]] inline f32v tanh(f32v x) {
  const f32v a = min_keep_nan(abs(x), kTanhClamp);
  const f32v magic = broadcast(kRoundMagic);
  const f32v shifted = fma(a, broadcast(kTanhInverseWidth), magic);
  const f32v t = fma(shifted - magic, broadcast(-kTanhWidth), a);
  const u32v index = to_bits(shifted);
  f32v p = lookup32(kTanhTable[6], index);
  p = fma(p, t, lookup32(kTanhTable[5], index));
  p = fma(p, t, lookup32(kTanhTable[4], index));
  p = fma(p, t, lookup32(kTanhTable[3], index));
  p = fma(p, t, lookup32(kTanhTable[2], index));
  p = fma(p, t, lookup32(kTanhTable[1], index));
  p = fma(p, t, lookup32(kTanhTable[0], index));
  return with_sign_of(p, x);
}

[[gnu::always_inline]] inline f32v erf(f32v x) {
  const f32v a = min_keep_nan(abs(x), kErfClamp);
  const f32v magic = broadcast(kRoundMagic);
  const f32v shifted = fma(a, broadcast(kErfInverseWidth), magic);
  const f32v t = fma(shifted - magic, broadcast(-kErfWidth), a);
  const u32v index = to_bits(shifted);
  f32v q = lookup16(kErfTable[5], index);
  q = fma(q, t, lookup16(kErfTable[4], index));
  q = fma(q, t, lookup16(kErfTable[3], index));
  q = fma(q, t, lookup16(kErfTable[2], index));
  q = fma(q, t, lookup16(kErfTable[1], index));  // c1, or c1 - 1 on the first interval
  // c0 + t q, except on the first interval: t + t q. There c0 = 0 and t = |x| >= 0,
  // elsewhere |t| < w/2 < c0, so max(c0, t) picks the right addend. The leading term t
  // is then exact near 0 and only the correction t q (at most 13% of the result)
  // carries rounding errors; 2/sqrt(pi) as one float would cost 0.9 u there.
  const f32v c0 = lookup16(kErfTable[0], index);
  return with_sign_of(fma(q, t, select(t > c0, t, c0)), x);
}

// ---- erfc: e^(-a^2) times a piecewise polynomial from tables ---------------------------
// a = |x|: erfc(a) = e^(-a^2) s(a) with s = erfc(a) e^(a^2), which falls from 1 at 0 to
// 0.0534 at 10.5 and varies on the scale of a (about 1/(a sqrt(pi)) for large a), so the
// intervals widen with a: the exponent and the top three significand bits of a + 1 pick
// one of 28, 1/8 wide on [0, 1), 1/4 on [1, 3), 1/2 on [3, 7) and 1 on [7, 11). On each,
// s(c + t) is a degree-5 polynomial in t = a - c about the centre c (scripts/
// vector-math-erfc-coefficients: 0.98 u with float coefficients, nearly all of it c0's
// rounding); the first is centred at 0 with c0 = 1, so erfc(0) = 1 and tiny arguments
// give 1 - 2x/sqrt(pi). a^2 = high + low exactly, and e^(-a^2) is exp's table method
// with -low taken into its reduced argument: rounding a^2 would cost a^2 2^-24 relative
// (100 ULP at a = 10). The product m s is scaled by 2^k last, so an erfc below the
// normal range (a > 9.19) rounds once, and no subnormal intermediate costs an assist.
// No division and no branch, where the portable form divides for a > 2 and adds a
// polynomial in x for |x| < 1. x < 0: 2 - erfc(a) with a clamped at 9, where it is 2.
alignas(64) inline constexpr float kErfcCenter[32] = {
    0.0f,   0.1875f, 0.3125f, 0.4375f, 0.5625f, 0.6875f, 0.8125f, 0.9375f, 1.125f, 1.375f, 1.625f,
    1.875f, 2.125f,  2.375f,  2.625f,  2.875f,  3.25f,   3.75f,   4.25f,   4.75f,  5.25f,  5.75f,
    6.25f,  6.75f,   7.5f,    8.5f,    9.5f,    10.5f,   0.0f,    0.0f,    0.0f,   0.0f};
alignas(64) inline constexpr float kErfcTable[6][32] = {
    {1.0f,          0.819181323f,  0.726085961f,  0.649193227f,  0.584998608f,  0.530870855f,  0.484810829f,
     0.44528228f,   0.395698071f,  0.343295902f,  0.302261204f,  0.269429982f,  0.242670357f,  0.2205057f,
     0.201887548f,  0.18605493f,   0.166335344f,  0.145589724f,  0.129345268f,  0.116302706f,  0.105612732f,
     0.0966987759f, 0.0891566351f, 0.0826950595f, 0.0745736957f, 0.0659251213f, 0.0590646788f, 0.0534919016f,
     0.0f,          0.0f,          0.0f,          0.0f},
    {-1.12837911f,
     -0.821186185f,
     -0.674575448f,
     -0.5603351f,
     -0.470255733f,
     -0.398431718f,
     -0.340561569f,
     -0.293474913f,
     -0.238058493f,
     -0.184315473f,
     -0.146030232f,
     -0.11801672f,
     -0.0970301181f,
     -0.080977127f,
     -0.068469502f,
     -0.058563292f,
     -0.047199402f,
     -0.0364562571f,
     -0.0289443322f,
     -0.0235034488f,
     -0.0194454454f,
     -0.0163432173f,
     -0.0139212701f,
     -0.0119959004f,
     -0.00977377128f,
     -0.00765208481f,
     -0.00615027826f,
     -0.00504927244f,
     0.0f,
     0.0f,
     0.0f,
     0.0f},
    {0.999996603f,
     0.665208161f,
     0.515280664f,
     0.404046327f,
     0.320479572f,
     0.256948918f,
     0.208104447f,
     0.170149475f,
     0.127881601f,
     0.0898617655f,
     0.0649618804f,
     0.048148524f,
     0.0364813022f,
     0.0281849727f,
     0.02215508f,
     0.0176854543f,
     0.0129371705f,
     0.00887870137f,
     0.00633184006f,
     0.00466131279f,
     0.00352414371f,
     0.00272526965f,
     0.00214869343f,
     0.00172272604f,
     0.00127039757f,
     0.000882398279f,
     0.000637031102f,
     0.000474538101f,
     0.0f,
     0.0f,
     0.0f,
     0.0f},
    {-0.752033949f,
     -0.464305967f,
     -0.342366487f,
     -0.255709618f,
     -0.193323791f,
     -0.147852764f,
     -0.114317708f,
     -0.0893064365f,
     -0.062793687f,
     -0.0405032411f,
     -0.0269778445f,
     -0.0184919927f,
     -0.0130047929f,
     -0.00935847498f,
     -0.00687490264f,
     -0.00514504407f,
     -0.00343544269f,
     -0.00210727123f,
     -0.00135592802f,
     -0.000908096437f,
     -0.00062910025f,
     -0.000448595063f,
     -0.000327946909f,
     -0.000244993105f,
     -0.000163798846f,
     -0.000101103018f,
     -6.5639324e-05f,
     -4.44059697e-05f,
     0.0f,
     0.0f,
     0.0f,
     0.0f},
    {0.495023906f,
     0.289580762f,
     0.204476789f,
     0.146306783f,
     0.106015652f,
     0.0777511224f,
     0.0576804094f,
     0.0432610624f,
     0.0287358575f,
     0.0171455052f,
     0.0105942171f,
     0.00675638719f,
     0.00443369802f,
     0.00298564648f,
     0.00205812557f,
     0.00144917774f,
     0.000891126634f,
     0.000490528299f,
     0.000285688962f,
     0.000174499743f,
     0.000110992885f,
     7.3098905e-05f,
     4.96154607e-05f,
     3.45738845e-05f,
     2.10796643e-05f,
     1.15665607e-05f,
     6.75501724e-06f,
     4.15107388e-06f,
     0.0f,
     0.0f,
     0.0f,
     0.0f},
    {-0.253859043f,
     -0.164289668f,
     -0.111585617f,
     -0.0768197626f,
     -0.0535752065f,
     -0.037830811f,
     -0.0270326789f,
     -0.0195376035f,
     -0.0122835506f,
     -0.00682649389f,
     -0.0039373436f,
     -0.00234917109f,
     -0.00144553569f,
     -0.000914874894f,
     -0.000594075362f,
     -0.000394912728f,
     -0.000223606374f,
     -0.000111080531f,
     -5.88168332e-05f,
     -3.28802271e-05f,
     -1.92562638e-05f,
     -1.17398213e-05f,
     -7.41203712e-06f,
     -4.82526775e-06f,
     -2.67554378e-06f,
     -1.30874309e-06f,
     -6.88947409e-07f,
     -3.85161229e-07f,
     0.0f,
     0.0f,
     0.0f,
     0.0f},
};

[[gnu::always_inline]] inline f32v erfc(f32v x) {
  const f32v a = min_keep_nan_vector(abs(x), select(x < 0.0f, broadcast(kErfcNegativeClamp), broadcast(kErfcClamp)));
  const u32v index = (to_bits(a + 1.0f) >> 20) - (127u << 3);
  const f32v t = a - lookup32(kErfcCenter, index);
  f32v s = lookup32(kErfcTable[5], index);
  s = fma(s, t, lookup32(kErfcTable[4], index));
  s = fma(s, t, lookup32(kErfcTable[3], index));
  s = fma(s, t, lookup32(kErfcTable[2], index));
  s = fma(s, t, lookup32(kErfcTable[1], index));
  s = fma(s, t, lookup32(kErfcTable[0], index));
  const f32v high = a * a;
  ExpReduction reduction = exp_reduction(-high);
  reduction.r = reduction.r - fma(a, a, -high);
  const ExpParts decay = exp_parts(reduction);
  const f32v tail = scalef(decay.m * s, decay.k);
  // 2 - tail only from lanes where tail is normal (x < 0): a subnormal operand costs an assist.
  const f32v negative_tail = select(x < 0.0f, tail, broadcast(0.0f));
  return nan_passes_through(select(x < 0.0f, 2.0f - negative_tail, tail), x);
}

}  // namespace avx512
#endif  // __AVX512F__

#endif  // KILN_JIT_FLOAT_MATH

}  // namespace detail

#if !defined(KILN_JIT_FLOAT_MATH) || KILN_JIT_FLOAT_MATH

// ---------------------------------------------------------------------------------
// Functions on kLanes lanes.

// e^x. exp(-inf) = 0, exp(+inf) = inf, overflow -> inf, underflow -> 0 through denormals.
[[gnu::always_inline]] inline f32v exp(f32v x) {
#if defined(__AVX512F__)
  return detail::avx512::exp(x);
#else
  return detail::exp_any(x);
#endif
}

// exp(x) for x <= 0 or NaN (x minus a maximum of values x is among: softmax's exponent), the same bits as exp,
// with one instruction fewer on AVX-512 (no upper clamp); anything else for larger x.
[[gnu::always_inline]] inline f32v exp_of_nonpositive(f32v x) {
#if defined(__AVX512F__)
  return detail::avx512::exp_of_nonpositive(x);
#else
  return exp(x);
#endif
}

// Natural logarithm. log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf; denormal
// inputs are as accurate as normal ones.
[[gnu::always_inline]] inline f32v log(f32v x) {
#if defined(__AVX512F__)
  return detail::avx512::log(x);
#else
  // Vectors of positive normal finite floats only (the usual case: one unsigned comparison of the bits, which
  // wrap below the smallest normal) need neither the denormal scaling nor the fix-ups of the special inputs.
  const bool usual = !any(greater_equal(to_bits(x) - 0x00800000u, 0x7f000000u));
  const i32v tiny = usual ? i32v{} : less(x, 0x1p-126f);
  const f32v scaled = usual ? x : select(tiny, x * 0x1p23f, x);
  const u32v bits = to_bits(scaled);
  const u32v offset = bits - detail::kSqrtHalfBits;
  const i32v exponent = __builtin_bit_cast(i32v, offset) >> 23;
  const f32v m = from_bits(bits - (offset & 0xff800000u));
  const f32v k = __builtin_convertvector(exponent - (tiny & 23), f32v);
  const f32v f = m - 1.0f;
  const f32v f2 = f * f;
  const f32v f3 = f2 * f;
  f32v tail = f3 * detail::horner(f, detail::kLogPolynomial);
  tail = mul_add(k, broadcast(detail::kLn2CoarseError), tail);
  tail = mul_add(f2, broadcast(-0.5f), tail);  // exact product: same bits fused or not
  f32v result = f + tail;
  result = mul_add(k, broadcast(detail::kLn2Coarse), result);    // exact product
  if (usual) [[likely]]
    return result;
  // +inf and NaN: not <= the largest float (an unordered compare; `greater | is_nan` compiled slower in GCC 12)
  result = select(~less_equal(x, 0x1.fffffep127f), x, result);
  result = select(equal(x, 0.0f), broadcast(-detail::kInfinity), result);
  result = select(less(x, 0.0f), broadcast(detail::kQuietNaN), result);
  return result;
#endif
}

[[gnu::always_inline]] inline f32v sin(f32v x) {
#if defined(__AVX512F__)
  f32v result = detail::avx512::sin_fast(x);
  if (detail::avx512::any_large_trig_argument(x)) [[unlikely]] {
    result = detail::sin_cos_large(x, result, false);
  }
  return result;
#else
  f32v result = detail::sin_cos_fast(x, 0u);
  // r + r^3 S(r^2) is +0 for r = -0 (the two zeros of a sum round to +0): keep the sign.
  result = select(equal(x, 0.0f), x, result);
  if (any(greater(abs(x), detail::kTrigFastLimit))) [[unlikely]] {
    result = detail::sin_cos_large(x, result, false);
  }
  return result;
#endif
}

[[gnu::always_inline]] inline f32v cos(f32v x) {
#if defined(__AVX512F__)
  f32v result = detail::avx512::cos_fast(x);
  if (detail::avx512::any_large_trig_argument(x)) [[unlikely]] {
    result = detail::sin_cos_large(x, result, true);
  }
  return result;
#else
  f32v result = detail::sin_cos_fast(x, 1u);
  if (any(greater(abs(x), detail::kTrigFastLimit))) [[unlikely]] {
    result = detail::sin_cos_large(x, result, true);
  }
  return result;
#endif
}

// Hyperbolic tangent; tanh(+-inf) = +-1, tanh(-0) = -0.
[[gnu::always_inline]] inline f32v tanh(f32v x) {
#if defined(__AVX512F__)
  return detail::avx512::tanh(x);
#else
  const f32v a = abs(x);
  const f32v a2 = a * a;
  const f32v small = mul_add(a2 * a, detail::horner(a2, detail::kTanhSmallPolynomial), a);
  f32v twice = a + a;
  twice = select(greater(twice, detail::kTanhExpClamp), broadcast(detail::kTanhExpClamp), twice);
  // The polynomial reduction, as erfc's (exp_reduce): with the table tanh measured 1.16 ULP against 1.07.
  const f32v large = 1.0f - 2.0f / (detail::exp_normal_range<false>(twice) + 1.0f);
  // Written so that NaN (a >= limit is false) takes the NaN-propagating small branch:
  // exp_normal_range's exponent arithmetic can turn a NaN into a number.
  return detail::with_sign_of(select(greater_equal(a, detail::kTanhSmallLimit), large, small), x);
#endif
}

// Error function; erf(+-inf) = +-1, erf(-0) = -0.
[[gnu::always_inline]] inline f32v erf(f32v x) {
#if defined(__AVX512F__)
  return detail::avx512::erf(x);
#else
  const f32v a = abs(x);
  const f32v a2 = a * a;
  const f32v small = mul_add(a, detail::horner(a2, detail::kErfSmallPolynomial), a);
  // e^(-x^2) for |x| <= 3.93; larger lanes (clamped to keep the exponent arithmetic
  // in range) are replaced by 1 below.
  const f32v gauss = detail::exp_normal_range(-select(greater(a2, 16.0f), broadcast(16.0f), a2));
  const f32v large = mul_add(-gauss, detail::horner(a - 1.0f, detail::kErfcScaledPolynomial), broadcast(1.0f));
  f32v result = select(greater_equal(a, detail::kErfSmallLimit), large, small);  // NaN: small
  result = select(greater(a, detail::kErfSaturation), broadcast(1.0f), result);
  return detail::with_sign_of(result, x);
#endif
}

// Complementary error function 1 - erf(x), without its cancellation (detail's erfc
// comment); erfc(-inf) = 2, erfc(+inf) = +0, NaN stays NaN.
[[gnu::always_inline]] inline f32v erfc(f32v x) {
#if defined(__AVX512F__)
  return detail::avx512::erfc(x);
#else
  const f32v small = mul_add(-x, detail::horner(x * x, detail::kErfSmallPolynomial), 1.0f - x);
  const f32v magnitude = abs(x);
  const i32v large = greater_equal(magnitude, 1.0f);  // NaN takes the small path, which keeps it
  if (!any(large)) return small;
  // 2 - erfc(a) is 2 from a = 4 on: below 9 in a, e^(-a^2) stays normal (detail::kSigmoidPositiveLimit's comment).
  const f32v clamp = select(less(x, 0.0f), broadcast(detail::kErfcNegativeClamp), broadcast(detail::kErfcClamp));
  const f32v a = select(greater(magnitude, clamp), clamp, magnitude);
  const f32v high = a * a;
  const f32v low = detail::square_error(a, high);
  const f32v decay = detail::exp_any<false>(-high);  // exp_reduce's comment
  const f32v exact_decay = mul_add(decay, -low, decay);
  f32v scaled = detail::horner(a - 1.5f, detail::kErfcNearPolynomial);
  // The far piece only for vectors that need it: its two divisions cost as much as the rest of the tail, and
  // in gelu's erfc(-x / sqrt 2) of normal data about 4% of 8-lane vectors have a lane beyond 2.
  const i32v far = greater_equal(a, detail::kErfcNearLimit);
  if (any(far)) {
    // g(t) / a, not t g(t): g hardly depends on t's rounding (t^2 / 4 of it at most), and dividing rounds
    // once where multiplying by t rounds twice.
    scaled = select(far, detail::horner(1.0f / a, detail::kErfcFarPolynomial) / a, scaled);
  }
  const f32v tail = exact_decay * scaled;
  return select(large, select(less(x, 0.0f), 2.0f - tail, tail), small);
#endif
}

// Logistic sigmoid 1 / (1 + e^-x), computed as 1 / (1 + e^-|x|) for x >= 0 and
// e^-|x| / (1 + e^-|x|) for x < 0 so that e^-|x| never overflows: sigmoid(-inf) = 0,
// sigmoid(+inf) = 1, and tiny results keep their relative accuracy down to denormals.
[[gnu::always_inline]] inline f32v sigmoid(f32v x) {
#if defined(__AVX512F__)
  return detail::avx512::sigmoid(x);
#else
  // For x >= 0, e only makes the denominator 1 + e, which is 1 from x = 17 on: e^-87 (normal) gives it as
  // e^-|x| does, without a subnormal e (kSigmoidPositiveLimit). The choices go by x's sign bit (one mask for both,
  // no float compares): where it is set and x is not below 0 (-0, a NaN), both choices are the same value. With
  // the compares of x < 0, gelu (tanh form) took 0.91 ns an element on one Zen 3 core, 0.80 without (the same
  // bits).
  const f32v floor = broadcast(-detail::kSigmoidPositiveLimit), negative = from_bits(to_bits(x) | 0x80000000u);
  const f32v minus_abs = select_by_sign(x, negative, max_keep_nan_vector(negative, floor));  // -|x|; NaN stays
  f32v e, denominator;
  if (!detail::any_outside_exp_normal_range(minus_abs)) [[likely]] {
    // e is exact here, so e + 1 has the bits of the general path's single rounding of partial * scale + 1.
    e = detail::exp_normal_range(minus_abs);
    denominator = e + 1.0f;
  } else {
    const detail::ExpFactors factors = detail::exp_factors(minus_abs);
    e = factors.partial * factors.scale;
    // 1 + e, rounded once where FMA is available (written explicitly, so no compiler's
    // contraction choice can change the bits).
    denominator = mul_add(factors.partial, factors.scale, broadcast(1.0f));
  }
  return select_by_sign(x, e, broadcast(1.0f)) / denominator;  // x = -0: e is 1
#endif
}

// log(1 + x), accurate where 1 + x rounds away most of x. With u = 1 + x rounded, c = x - (u - 1) is that
// rounding's error exactly (u - 1 is exact for u in [0.5, 2], and the error of a rounded sum is a float), and
// log(1 + x) = log(u + c) = log(u) + c / u to well below an ULP. Where u is 1 the result is x (x^2 / 2 is then
// under half its ULP), which keeps -0. log1p(-1) = -inf, x < -1 gives NaN, log1p(inf) = inf.
[[gnu::always_inline]] inline f32v log1p(f32v x) {
  const f32v u = x + 1.0f;
  const f32v correction = x - (u - 1.0f);
  f32v result = log(u) + correction / u;
  result = select(equal(u, 1.0f) | equal(x, detail::kInfinity), x, result);  // inf: c would be inf - inf
  return select(equal(u, 0.0f), broadcast(-detail::kInfinity), result);      // -1: c / u would be 0 / 0
}

// e^x - 1, accurate where e^x is near 1, by Kahan's method: with u = e^x rounded, (u - 1) (x / log(u)). u - 1
// is exact near 1, and x / log(u) corrects for u's rounding (whatever u is, (u - 1) / log(u) is evaluated at that
// same u), so e^x's own error counts only half. Where u is 1 the result is x (keeping -0); where u - 1 rounds to
// -1 (x below -17.3, -inf included) it is -1; where e^x overflows, +inf. x is raised to -80 first: e^x would be
// subnormal below -87.3, and every instruction producing one costs a microcode assist, for a result of -1 anyway.
[[gnu::always_inline]] inline f32v expm1(f32v x) {
  const f32v u = exp(select(less(x, -80.0f), broadcast(-80.0f), x));  // NaN is not less: it stays
  const f32v u_minus_one = u - 1.0f;
  f32v result = u_minus_one * (x / log(u));
  result = select(equal(u, 1.0f), x, result);  // x / log(1) would be x / 0
  result = select(equal(u_minus_one, -1.0f), broadcast(-1.0f), result);
  return select(equal(u, detail::kInfinity), u, result);  // inf * (x / inf) would be NaN
}

namespace detail {
// atan(t) = t + t z g(z), z = t^2, for |t| <= 1/2: g a degree-5 polynomial (least-squares Chebyshev fit,
// scripts/vector-math-atan-coefficients: 4.5e-9 relative to atan with these float coefficients).
inline constexpr float kAtanPolynomial[] = {-0.333333343f, 0.199998751f,   -0.142798007f,
                                            0.110068806f,  -0.0823550597f, 0.0422568582f};
inline constexpr float kTan3PiOver8 = 2.41421356f;
inline constexpr float kPiOver4High = 0.785398185f, kPiOver4Low = -2.18556941e-08f;  // float(pi/4), the rest
}  // namespace detail

// Arctangent, in [-pi/2, pi/2]. |x| is reduced to t in [-1/2, 1/2]: t = |x| up to 1/2, (|x| - 1) / (|x| + 1) up
// to tan(3 pi/8) (atan(|x|) = pi/4 + atan(t); |x| - 1 is exact there), -1 / |x| beyond (pi/2 + atan(t)); one
// division serves all three. The offset's low part joins the small terms before its high part is added, so the
// sum rounds once. Why 1/2 rather than the usual tan(pi/8): the script's comment (1.2 ULP rather than 1.9).
// atan(+-inf) = +-pi/2 (the float nearest), atan(-0) = -0, tiny x gives x, NaN stays NaN.
[[gnu::always_inline]] inline f32v atan(f32v x) {
  const f32v a = abs(x);
  const i32v beyond = greater(a, detail::kTan3PiOver8);
  const i32v middle = greater(a, 0.5f) & ~beyond;  // NaN: neither, so t stays NaN
  const f32v numerator = select(beyond, broadcast(-1.0f), select(middle, a - 1.0f, a));
  const f32v denominator = select(beyond, a, select(middle, a + 1.0f, broadcast(1.0f)));
  const f32v t = numerator / denominator;
  const f32v z = t * t;
  const f32v high = select(beyond, broadcast(detail::kPiOver2Part1),
                           select(middle, broadcast(detail::kPiOver4High), broadcast(0.0f)));
  const f32v low =
      select(beyond, broadcast(detail::kPiOver2Part2), select(middle, broadcast(detail::kPiOver4Low), broadcast(0.0f)));
  const f32v tail = mul_add(t * z, detail::horner(z, detail::kAtanPolynomial), low);
  return detail::with_sign_of(high + (t + tail), x);
}

// ---------------------------------------------------------------------------------
// Scalar overloads: the vector code on lane 0, hence bit-identical to the vector lanes.

[[gnu::always_inline]] inline float exp(float x) { return exp(broadcast(x))[0]; }
[[gnu::always_inline]] inline float log(float x) { return log(broadcast(x))[0]; }
[[gnu::always_inline]] inline float sin(float x) { return sin(broadcast(x))[0]; }
[[gnu::always_inline]] inline float cos(float x) { return cos(broadcast(x))[0]; }
[[gnu::always_inline]] inline float tanh(float x) { return tanh(broadcast(x))[0]; }
[[gnu::always_inline]] inline float erf(float x) { return erf(broadcast(x))[0]; }
[[gnu::always_inline]] inline float erfc(float x) { return erfc(broadcast(x))[0]; }
[[gnu::always_inline]] inline float sigmoid(float x) { return sigmoid(broadcast(x))[0]; }
[[gnu::always_inline]] inline float log1p(float x) { return log1p(broadcast(x))[0]; }
[[gnu::always_inline]] inline float expm1(float x) { return expm1(broadcast(x))[0]; }
[[gnu::always_inline]] inline float atan(float x) { return atan(broadcast(x))[0]; }

#endif  // KILN_JIT_FLOAT_MATH

}  // namespace kiln::vector_math

#pragma GCC diagnostic pop

// Without AVX-512 the same warning also fires at every call of these functions in the
// including file (GCC and Clang attach it to the caller), which would break -Werror
// builds for AVX2 or baseline x86-64. It only concerns calls between code compiled with
// and without AVX-512 passing vectors by value, which kiln never makes (kernels and
// generated code exchange pointers), so it stays off for the rest of the translation
// unit. (GCC still prints one "ABI ... changed in GCC 4.6" note, which is not a warning.)
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__AVX512F__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#endif  // KILN_KERNELS_CPU_VECTOR_MATH_H_
