#pragma once
// What each elementwise op of meaning `scalar` in the op table (ir/ops.def) computes on one element, written once:
// kiln::scalar::<op>, a function object whose call operator takes elements of one dtype. Every executor applies
// these same functions, so they agree to the bit:
//   - the standard CPU kernels (kernels/cpu/elementwise*.cpp), in plain loops that GCC vectorizes;
//   - the CPU JIT's generated code, whose prelude (codegen/cpu/prelude.h, which embeds this header) applies them
//     to its vectors: a register at a time where the call operator takes a vector too, else lane by lane;
//   - the CUDA kernels and the CUDA JIT's prelude (codegen/cuda/prelude.cuh), as device functions.
// The ops a fused kernel is mostly made of (arithmetic, maximum, comparisons, ...) are written with the operators
// GCC and Clang define on vectors as well (`mask ? a : b`, `!`, `&`, an element's constant converted to a vector),
// and say so by taking T = a number or a vector of them (the concepts ...Lanes below). Applied a register at a
// time they compile to what a hand-written vector form would (a compare, a masked compare and a masked move for a
// float maximum); applied lane by lane GCC would vectorize them too, but a module's compile took 15 ms more per op
// (120 ops: 1.9 s against 0.12 s). Lane by lane are the ops that need the math library's builtins (floor, sqrt,
// copysign), integer division (x86 has no vector form) or control flow.
//
// A device may compute an op with other code that gives the same bits, where that is faster: the standard CPU
// kernels take floor, ceil, round, sqrt and rsqrt of floats from AVX-512 instructions (GCC does not vectorize
// the builtins under -ftrapping-math and -fmath-errno), and both CPU executors take f32 pow from vector_math.h.
//
// The header compiles as host C++ (GCC and Clang), inside the CPU JIT's modules (embedded into their prelude: no
// standard library, builtins only), under nvcc and NVRTC (device code, embedded into the CUDA prelude), and in
// kiln's CUDA simulator (host C++ standing in for device code). Elements are float, double, int32_t, int64_t
// (long, or long long in the CUDA prelude) and kiln's bool, a byte holding 0 or 1. Integer arithmetic wraps modulo
// 2^bits: it is computed in the unsigned type, never undefined. Each call operator admits the dtypes its op's
// type rule admits (ir/type_rules.cpp): the kernels build an op for every dtype it accepts.

// CUDA code: compiled by nvcc or NVRTC, or by the host compiler for kiln's CUDA simulator, whose
// emulated_device.h defines __device__ (tools/cuda-simulator).
#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(__device__)
#define KILN_SCALAR_CUDA 1
#define KILN_SCALAR_FUNCTION __host__ __device__ __forceinline__
#else
#define KILN_SCALAR_CUDA 0
#define KILN_SCALAR_FUNCTION [[gnu::always_inline]] inline
#endif

namespace kiln::scalar {

// ---- element types ---------------------------------------------------------------------------

// The element type of T: T itself, or the lanes' type of a GCC vector.
template <class T>
struct ElementOf {
  using type = T;
};
template <class T>
using element_of = typename ElementOf<T>::type;

template <class T>
inline constexpr bool is_float = false;
template <>
inline constexpr bool is_float<float> = true;
template <>
inline constexpr bool is_float<double> = true;
template <class T>
inline constexpr bool is_bool = false;  // kiln's bool: a byte of 0 or 1
template <>
inline constexpr bool is_bool<unsigned char> = true;

// The signed integers kiln has, their unsigned types (where they wrap) and their ranges.
template <class T>
struct IntegerTraits {
  static constexpr bool is_integer = false;
};
template <>
struct IntegerTraits<int> {
  static constexpr bool is_integer = true;
  using unsigned_type = unsigned int;
  static constexpr int lowest = -2147483647 - 1, highest = 2147483647;
};
template <>
struct IntegerTraits<long> {
  static constexpr bool is_integer = sizeof(long) == 8;  // kiln's i64 is `long` only where long has 64 bits
  using unsigned_type = unsigned long;
  static constexpr long lowest = -9223372036854775807L - 1, highest = 9223372036854775807L;
};
template <>
struct IntegerTraits<long long> {
  static constexpr bool is_integer = true;
  using unsigned_type = unsigned long long;
  static constexpr long long lowest = -9223372036854775807LL - 1, highest = 9223372036854775807LL;
};
template <class T>
struct UnsignedOf {
  using type = typename IntegerTraits<T>::unsigned_type;
};
template <class T>
using Unsigned = typename UnsignedOf<T>::type;

#if !KILN_SCALAR_CUDA
// GCC vectors (the CPU JIT's): their lanes' type, and the vector of as many unsigned lanes.
template <class T>
requires requires(T x) { x[0]; }
struct ElementOf<T> {
  using type = __typeof__(T{}[0]);
};
template <class T>
requires requires(T x) { x[0]; }
struct UnsignedOf<T> {
  using type __attribute__((vector_size(sizeof(T)))) = Unsigned<element_of<T>>;
};
#endif

// The dtype families of the type rules, of one element.
template <class T>
concept Float = is_float<T>;
template <class T>
concept Integer = IntegerTraits<T>::is_integer;
template <class T>
concept Number = Float<T> || Integer<T>;  // every dtype but bool
template <class T>
concept Bits = Integer<T> || is_bool<T>;  // integers and bools
template <class T>
concept Boolean = is_bool<T>;
template <class T>
concept Element = Number<T> || Boolean<T>;
// The same, of one element or of a vector of them: the ops written with operators that vectors have too.
template <class T>
concept FloatLanes = Float<element_of<T>>;
template <class T>
concept NumberLanes = Number<element_of<T>>;
template <class T>
concept BitsLanes = Bits<element_of<T>>;
template <class T>
concept ElementLanes = Element<element_of<T>>;

// Whether `Function` takes operands of these types (an element type its op admits; a vector where it is written
// for vectors too).
template <class Function, class... Operands>
inline constexpr bool accepts = requires(Function function, Operands... operands) {
  function(operands...);
};

// The two's-complement value of `bits` (C++20 defines the conversion as modular), and back. Functional casts:
// for vectors, they reinterpret the lanes as static_cast does a number.
template <class T>
KILN_SCALAR_FUNCTION Unsigned<T> bits_of(T value) {
  return Unsigned<T>(value);
}
template <class T>
KILN_SCALAR_FUNCTION T wrapped(Unsigned<T> bits) {
  return T(bits);
}

// ---- float functions of each device, all exact (IEEE defines one result) -------------------------

namespace math {
#if KILN_SCALAR_CUDA
#define KILN_SCALAR_MATH(name, float_function, double_function)            \
  KILN_SCALAR_FUNCTION float name(float x) { return ::float_function(x); } \
  KILN_SCALAR_FUNCTION double name(double x) { return ::double_function(x); }
#define KILN_SCALAR_MATH2(name, float_function, double_function)                       \
  KILN_SCALAR_FUNCTION float name(float x, float y) { return ::float_function(x, y); } \
  KILN_SCALAR_FUNCTION double name(double x, double y) { return ::double_function(x, y); }
KILN_SCALAR_MATH(floor, floorf, floor)
KILN_SCALAR_MATH(ceil, ceilf, ceil)
KILN_SCALAR_MATH(round_half_even, rintf, rint)  // the GPU rounds to nearest, ties to even, in every mode
KILN_SCALAR_MATH(sqrt, sqrtf, sqrt)
KILN_SCALAR_MATH(abs, fabsf, fabs)
KILN_SCALAR_MATH2(fmod, fmodf, fmod)
KILN_SCALAR_MATH2(copysign, copysignf, copysign)
KILN_SCALAR_MATH2(pow, powf, pow)
#else
// No <cmath>: the JIT's prelude has no standard library.
#define KILN_SCALAR_MATH(name, float_builtin, double_builtin)           \
  KILN_SCALAR_FUNCTION float name(float x) { return float_builtin(x); } \
  KILN_SCALAR_FUNCTION double name(double x) { return double_builtin(x); }
#define KILN_SCALAR_MATH2(name, float_builtin, double_builtin)                      \
  KILN_SCALAR_FUNCTION float name(float x, float y) { return float_builtin(x, y); } \
  KILN_SCALAR_FUNCTION double name(double x, double y) { return double_builtin(x, y); }
KILN_SCALAR_MATH(floor, __builtin_floorf, __builtin_floor)
KILN_SCALAR_MATH(ceil, __builtin_ceilf, __builtin_ceil)
KILN_SCALAR_MATH(sqrt, __builtin_sqrtf, __builtin_sqrt)
KILN_SCALAR_MATH(abs, __builtin_fabsf, __builtin_fabs)
KILN_SCALAR_MATH2(fmod, __builtin_fmodf, __builtin_fmod)
KILN_SCALAR_MATH2(copysign, __builtin_copysignf, __builtin_copysign)
KILN_SCALAR_FUNCTION double pow(double x, double y) { return __builtin_pow(x, y); }
// f32 pow on the CPU is vector_math.h's, computed in double, in both executors: not libm's powf.
float pow(float x, float y) = delete;

// floor and copysign of a GCC vector (the CPU JIT's), lane by lane: GCC vectorizes the builtins where the target
// has the instruction (vrndscaleps, vroundps; a bit select).
template <class V>
requires requires(V x) { x[0]; }
KILN_SCALAR_FUNCTION V floor(V x) {
  V result;
  for (unsigned lane = 0; lane < sizeof(V) / sizeof(x[0]); ++lane) result[lane] = floor(x[lane]);
  return result;
}
template <class V>
requires requires(V x) { x[0]; }
KILN_SCALAR_FUNCTION V copysign(V x, V sign) {
  V result;
  for (unsigned lane = 0; lane < sizeof(V) / sizeof(x[0]); ++lane) result[lane] = copysign(x[lane], sign[lane]);
  return result;
}

// To the nearest integer, halfway cases to the even one, in any rounding mode and under any compiler (Clang 14 has
// no __builtin_roundeven, and rint follows the caller's rounding mode): from floor, which compilers vectorize, up
// where the part above it is more than 1/2, or exactly 1/2 above an odd integer; the sign copied from x, so
// round(-0.4) is -0. NaN and infinities come through floor as they are (their fraction is NaN, which compares
// false). Of a number or of a vector.
template <class T>
KILN_SCALAR_FUNCTION T round_half_even(T x) {
  using E = element_of<T>;
  const T below = floor(x), fraction = x - below;  // exact
  const T halved = floor(below * E(0.5));
  const auto odd = below - (halved + halved) != 0;
  const auto up = (fraction > E(0.5)) | ((fraction == E(0.5)) & odd);
  return copysign(up ? below + E(1) : below, x);
}
#endif
#undef KILN_SCALAR_MATH2
#undef KILN_SCALAR_MATH
}  // namespace math

// ---- unary ops ---------------------------------------------------------------------------------
// (In the ops of ...Lanes operands, a constant is the element type's, E(1): a vector takes it in every lane. Those
// that compare say so, `compares`: the JIT applies them to a vector wider than a register a register at a time.)

struct neg {
  template <NumberLanes T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    if constexpr (FloatLanes<T>)
      return -x;
    else
      return wrapped<T>(Unsigned<T>{} - bits_of(x));
  }
};
// Floats: the sign bit cleared (abs(-0) = 0, NaN stays NaN). Integers: abs of the most negative is itself.
struct abs {
  template <Number T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    if constexpr (is_float<T>)
      return math::abs(x);
    else
      return x < 0 ? wrapped<T>(Unsigned<T>{} - bits_of(x)) : x;
  }
};
// Floats: zeros keep their sign and NaN stays NaN.
struct sign {
  static constexpr bool compares = true;
  template <NumberLanes T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    using E = element_of<T>;
    if constexpr (FloatLanes<T>)
      return x > 0 ? E(1) : x < 0 ? E(-1) : x;
    else
      return x > 0 ? E(1) : x < 0 ? E(-1) : E(0);
  }
};
struct square {
  template <NumberLanes T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    if constexpr (FloatLanes<T>)
      return x * x;
    else
      return wrapped<T>(bits_of(x) * bits_of(x));
  }
};
// relu(-0) = +0, as max(-0, +0) with +0 above -0 (docs/design-notes.md, "Floating point"); relu(NaN) = NaN: the
// comparison is false for NaN, which passes through.
struct relu {
  static constexpr bool compares = true;
  template <NumberLanes T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    return x <= 0 ? element_of<T>(0) : x;
  }
};
// floor, ceil and round are the identity on integers.
struct floor {
  template <Number T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    if constexpr (is_float<T>)
      return math::floor(x);
    else
      return x;
  }
};
struct ceil {
  template <Number T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    if constexpr (is_float<T>)
      return math::ceil(x);
    else
      return x;
  }
};
// To the nearest integer, halfway cases to the even one (IEEE roundToIntegralTiesToEven).
struct round {
  static constexpr bool compares = true;
  template <NumberLanes T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    if constexpr (FloatLanes<T>)
      return math::round_half_even(x);
    else
      return x;
  }
};
struct sqrt {
  template <Float T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    return math::sqrt(x);
  }
};
// Both steps correctly rounded (not a hardware reciprocal square root, which errs by an ULP or two).
struct rsqrt {
  template <Float T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    return T(1) / math::sqrt(x);
  }
};
struct logical_not {
  template <Boolean T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    return static_cast<T>(x == 0);
  }
};
// Bits of integers; on bools, logical not.
struct bitwise_not {
  template <BitsLanes T>
  KILN_SCALAR_FUNCTION T operator()(T x) const {
    if constexpr (is_bool<T>)
      return static_cast<T>(x == 0);
    else
      return T(~x);
  }
};

// ---- binary ops --------------------------------------------------------------------------------

struct add {
  template <NumberLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    if constexpr (FloatLanes<T>)
      return a + b;
    else
      return wrapped<T>(bits_of(a) + bits_of(b));
  }
};
struct sub {
  template <NumberLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    if constexpr (FloatLanes<T>)
      return a - b;
    else
      return wrapped<T>(bits_of(a) - bits_of(b));
  }
};
struct mul {
  template <NumberLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    if constexpr (FloatLanes<T>)
      return a * b;
    else
      return wrapped<T>(bits_of(a) * bits_of(b));
  }
};
struct div {
  template <FloatLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    return a / b;
  }
};
// Integers as XLA and TF (NumPy raises instead): exponentiation by squaring, wrapping on overflow like the other
// integer ops; a negative exponent gives the truncated value of 1 / base^-exponent, which is 0 except for base 1
// (1) and base -1 (-1 for odd exponents, 1 for even); 0 to a negative power gives 0. Floats: the math library's.
struct pow {
  template <Number T>
  KILN_SCALAR_FUNCTION T operator()(T base, T exponent) const {
    if constexpr (is_float<T>) {
      return math::pow(base, exponent);
    } else {
      if (exponent < 0) return base == 1 ? T(1) : base == -1 ? ((exponent & 1) ? T(-1) : T(1)) : T(0);
      Unsigned<T> result = 1, factor = bits_of(base);
      for (Unsigned<T> remaining = bits_of(exponent); remaining != 0; remaining >>= 1) {
        if (remaining & 1) result *= factor;
        factor *= factor;
      }
      return wrapped<T>(result);
    }
  }
};

// floor_divide, remainder and fmod. Integers: the quotient rounded down and the remainder that goes with it,
// whose sign is the divisor's (Python's // and %); fmod truncates instead, its remainder taking the dividend's
// sign (C's %). A zero divisor gives 0 for all three (NumPy's result; NumPy also warns, TF and PyTorch raise, XLA
// gives -1 and the dividend, and a kernel cannot raise). The one quotient that overflows, the most negative value
// over -1, wraps to itself (NumPy's), and its remainder is 0; C's `/` and `%` are undefined there, so -1 is taken
// apart.
//
// Floats: NumPy's divmod. fmod is exact; the remainder is fmod moved into the divisor's sign (a zero one takes the
// divisor's sign too); the quotient is (a - fmod(a, b)) / b, one less where the remainder moved, which is an
// integer up to rounding, rounded to it. So a == floor_divide(a, b) * b + remainder(a, b) as closely as floats
// allow, and 7.0 // 0.1 is 69 (the remainder is 0.0999...), as in Python, not floor(7.0 / 0.1) = 70. A zero
// divisor gives a / b (inf or NaN) as quotient and NaN as remainders; an infinite dividend gives NaN.

// The divisor's sign and the remainder's differ: the truncated quotient is one above the floor.
template <Number T>
KILN_SCALAR_FUNCTION bool signs_differ(T remainder, T divisor) {
  return remainder != 0 && ((remainder < 0) != (divisor < 0));
}
struct floor_divide {
  template <Number T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    if constexpr (is_float<T>) {
      if (b == 0) return a / b;
      const T truncated_remainder = math::fmod(a, b);
      T quotient = (a - truncated_remainder) / b;
      if (signs_differ(truncated_remainder, b)) quotient -= 1;
      if (quotient == 0) return math::copysign(T(0), a / b);
      T whole = math::floor(quotient);
      if (quotient - whole > T(0.5)) whole += 1;
      return whole;
    } else {
      if (b == 0) return 0;
      if (b == -1) return wrapped<T>(Unsigned<T>{} - bits_of(a));  // wraps, never overflows
      const T quotient = static_cast<T>(a / b);
      return signs_differ(static_cast<T>(a % b), b) ? static_cast<T>(quotient - 1) : quotient;
    }
  }
};
struct remainder {
  template <Number T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    if constexpr (is_float<T>) {
      const T truncated_remainder = math::fmod(a, b);
      if (truncated_remainder == 0) return math::copysign(T(0), b);
      return signs_differ(truncated_remainder, b) ? truncated_remainder + b : truncated_remainder;
    } else {
      if (b == 0 || b == -1) return 0;
      const T truncated_remainder = static_cast<T>(a % b);
      return signs_differ(truncated_remainder, b) ? static_cast<T>(truncated_remainder + b) : truncated_remainder;
    }
  }
};
struct fmod {
  template <Number T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    if constexpr (is_float<T>)
      return math::fmod(a, b);
    else
      return (b == 0 || b == -1) ? T(0) : static_cast<T>(a % b);
  }
};

// The magnitude of a with the sign bit of b (IEEE copySign): copysign(3, -0.0) = -3, and a NaN's sign bit counts
// as any other.
struct copysign {
  template <Float T>
  KILN_SCALAR_FUNCTION T operator()(T magnitude, T sign) const {
    return math::copysign(magnitude, sign);
  }
};

// Bits of integers, and of bools' 0 and 1 (where they are logical and, or and not-equal).
struct bitwise_and {
  template <BitsLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    return T(a & b);
  }
};
struct bitwise_or {
  template <BitsLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    return T(a | b);
  }
};
struct bitwise_xor {
  template <BitsLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    return T(a ^ b);
  }
};

// A count in [0, bits) shifts as C++20 defines it on two's complement (left: zeros in, the bits shifted out
// lost; right: arithmetic, copies of the sign in). C leaves any other count undefined; here it gives what
// shifting one bit at a time would, as XLA and JAX define it: 0 to the left, the sign (0 or -1) to the right.
// NumPy's and PyTorch's results for such counts depend on the CPU.
template <Integer T>
KILN_SCALAR_FUNCTION bool shift_in_range(T count) {
  return count >= 0 && count < static_cast<T>(sizeof(T) * 8);
}
struct left_shift {
  template <Integer T>
  KILN_SCALAR_FUNCTION T operator()(T x, T count) const {
    // Through the unsigned value: a left shift of a negative signed value is undefined before C++20.
    return shift_in_range(count) ? wrapped<T>(bits_of(x) << count) : T(0);
  }
};
struct right_shift {
  template <Integer T>
  KILN_SCALAR_FUNCTION T operator()(T x, T count) const {
    return shift_in_range(count) ? static_cast<T>(x >> count) : (x < 0 ? T(-1) : T(0));
  }
};

// 64 random bits for a key and a counter: Philox-4x32-10 (Salmon, Moraes, Dror and Shaw, SC'11; the generator of
// JAX's and TensorFlow's stateless ops and of cuRAND's Philox) of the block (counter's low word, its high word, 0, 0)
// under the key (its low word, its high word); the result is the block's first two words, the second one high.
// Ten rounds of two 32 x 32 -> 64-bit products, each word pair mixed with the other pair's high half and a key word,
// the key advanced by the Weyl constants between rounds (philox_block: the whole block, which the seeded
// kiln::random::normal and uniform draw from too). random_bits: only i64, keys and counters are kiln::random's.
struct PhiloxBlock {
  unsigned int word[4];
};
KILN_SCALAR_FUNCTION PhiloxBlock philox_block(unsigned long long counter, unsigned long long key) {
  using Word = unsigned int;
  using Wide = unsigned long long;
  Word x0 = Word(counter), x1 = Word(counter >> 32), x2 = 0, x3 = 0;
  Word key0 = Word(key), key1 = Word(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const Wide product0 = Wide(0xD2511F53u) * x0, product2 = Wide(0xCD9E8D57u) * x2;
    const Word mixed0 = Word(product2 >> 32) ^ x1 ^ key0, mixed2 = Word(product0 >> 32) ^ x3 ^ key1;
    x1 = Word(product2);
    x3 = Word(product0);
    x0 = mixed0;
    x2 = mixed2;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return PhiloxBlock{{x0, x1, x2, x3}};
}
#if !KILN_SCALAR_CUDA && defined(__AVX2__)
// philox_block's first two words for the 64-bit lanes of GCC vectors (the CPU JIT's), a register at a time, every
// word in its lane's low half: what a lane's high half holds beside a word (carries of the key's additions, a
// product's high half) is never read, since the products take the low halves only (vpmuludq) and the result is
// assembled from two words. GCC compiles a vector's 64-bit multiply to three vpmuludq with shifts and adds (by a
// constant: to shifts and adds), and keeps a vector wider than a register in memory across the rounds: either way
// slower than the scalar loop (2.5x), and the JIT applied the scalar form lane by lane to its two-register vectors.
// One vpmuludq per product, a register at a time: nn::dropout over 4096^2 floats in the JIT 113-131 -> 29-32 ms (Zen 3,
// two threads). The standard kernels keep the scalar loop, which GCC compiles well (this form there was slower).
namespace philox_vectors {
#if defined(__AVX512F__)
inline constexpr int register_bytes = 64;
#else
inline constexpr int register_bytes = 32;
#endif
typedef int Halves __attribute__((vector_size(register_bytes)));
typedef unsigned long long Words __attribute__((vector_size(register_bytes)));
typedef long long Products __attribute__((vector_size(register_bytes)));
[[gnu::always_inline]] inline Words word_products(Words words, unsigned int multiplier) {
  Halves factor;
  for (int lane = 0; lane < register_bytes / 4; ++lane) factor[lane] = static_cast<int>(multiplier);
  const Halves halves = reinterpret_cast<Halves>(words);
#if defined(__AVX512F__) && defined(__clang__)
  return reinterpret_cast<Words>(__builtin_ia32_pmuludq512(halves, factor));
#elif defined(__AVX512F__)
  return reinterpret_cast<Words>(__builtin_ia32_pmuludq512_mask(halves, factor, Products{}, 0xFF));
#else
  return reinterpret_cast<Words>(__builtin_ia32_pmuludq256(halves, factor));
#endif
}
[[gnu::always_inline]] inline Words first_words(Words counter, Words key) {
  Words x0 = counter, x1 = counter >> 32, x2 = Words{}, x3 = Words{};
  Words key0 = key, key1 = key >> 32;
  for (int round = 0; round < 10; ++round) {
    const Words product0 = word_products(x0, 0xD2511F53u), product2 = word_products(x2, 0xCD9E8D57u);
    const Words mixed0 = (product2 >> 32) ^ x1 ^ key0, mixed2 = (product0 >> 32) ^ x3 ^ key1;
    x1 = product2;
    x3 = product0;
    x0 = mixed0;
    x2 = mixed2;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return (x1 << 32) | (x0 & 0xFFFFFFFFu);
}
}  // namespace philox_vectors
#endif
struct random_bits {
  template <Integer T>
  requires(sizeof(T) == 8)
  KILN_SCALAR_FUNCTION T operator()(T key, T counter) const {
    const PhiloxBlock block = philox_block(bits_of(counter), bits_of(key));
    return wrapped<T>((Unsigned<T>(block.word[1]) << 32) | block.word[0]);
  }
#if !KILN_SCALAR_CUDA && defined(__AVX2__)
  template <class V>
  requires(requires(V x) { x[0]; } && Integer<element_of<V>> && sizeof(element_of<V>) == 8 &&
           sizeof(V) % philox_vectors::register_bytes == 0) KILN_SCALAR_FUNCTION V
  operator()(V key, V counter) const {
    using philox_vectors::Words;
    V result;
    for (unsigned part = 0; part < sizeof(V) / sizeof(Words); ++part) {
      Words part_key, part_counter;
      __builtin_memcpy(&part_key, reinterpret_cast<const char*>(&key) + part * sizeof(Words), sizeof(Words));
      __builtin_memcpy(&part_counter, reinterpret_cast<const char*>(&counter) + part * sizeof(Words), sizeof(Words));
      const Words words = philox_vectors::first_words(part_counter, part_key);
      __builtin_memcpy(reinterpret_cast<char*>(&result) + part * sizeof(Words), &words, sizeof(Words));
    }
    return result;
  }
#endif
};

// A NaN in either operand gives NaN (the first one if both are NaN), as NumPy's maximum and minimum. Of equal
// operands the second (maximum(-0, +0) = +0, maximum(+0, -0) = -0, as PyTorch). On bools: or and and. For floats,
// (a > b || a != a) ? a : b written as "b where b is not below a and a is a number, else a", the same bits: on
// vectors the two masks combine in one masked compare, where the `||` costs an or of the masks, and GCC 12 took
// 20 ms to compile each `||` of vector masks (a 3x3 max pool's module: 0.24 s against 0.08 s).
struct maximum {
  static constexpr bool compares = true;
  template <ElementLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    if constexpr (FloatLanes<T>)
      return (!(b < a) & (a == a)) ? b : a;
    else
      return a > b ? a : b;
  }
};
struct minimum {
  static constexpr bool compares = true;
  template <ElementLanes T>
  KILN_SCALAR_FUNCTION T operator()(T a, T b) const {
    if constexpr (FloatLanes<T>)
      return (!(b > a) & (a == a)) ? b : a;
    else
      return a < b ? a : b;
  }
};

// Comparisons are IEEE: every comparison with NaN is false, except ne. They give bool (of vectors, a mask).
struct eq {
  static constexpr bool compares = true;
  template <ElementLanes T>
  KILN_SCALAR_FUNCTION auto operator()(T a, T b) const {
    return a == b;
  }
};
struct ne {
  static constexpr bool compares = true;
  template <ElementLanes T>
  KILN_SCALAR_FUNCTION auto operator()(T a, T b) const {
    return a != b;
  }
};
struct lt {
  static constexpr bool compares = true;
  template <ElementLanes T>
  KILN_SCALAR_FUNCTION auto operator()(T a, T b) const {
    return a < b;
  }
};
struct le {
  static constexpr bool compares = true;
  template <ElementLanes T>
  KILN_SCALAR_FUNCTION auto operator()(T a, T b) const {
    return a <= b;
  }
};
struct gt {
  static constexpr bool compares = true;
  template <ElementLanes T>
  KILN_SCALAR_FUNCTION auto operator()(T a, T b) const {
    return a > b;
  }
};
struct ge {
  static constexpr bool compares = true;
  template <ElementLanes T>
  KILN_SCALAR_FUNCTION auto operator()(T a, T b) const {
    return a >= b;
  }
};
// The logical ops of bools, which the JIT's vectors of booleans take through their truth tables.
struct logical_and {
  template <Boolean T>
  KILN_SCALAR_FUNCTION bool operator()(T a, T b) const {
    return (a != 0) & (b != 0);
  }
};
struct logical_or {
  template <Boolean T>
  KILN_SCALAR_FUNCTION bool operator()(T a, T b) const {
    return (a != 0) | (b != 0);
  }
};

// ---- cast --------------------------------------------------------------------------------------

// x converted to To. Float to integer: truncation toward zero where the value fits; values beyond the integer's
// range saturate to its minimum or maximum and NaN becomes 0 (C++ leaves all three undefined; this is what NumPy's
// and TF's CPU kernels produce for most inputs, made well-defined for all). To bool: x != 0 (NaN is true). Bool to
// a number: 0 or 1; integers wrap modulo 2^bits; floats round to nearest.
template <Element To>
struct convert {
  template <Element From>
  KILN_SCALAR_FUNCTION To operator()(From x) const {
    if constexpr (is_bool<To>) {
      return x != From(0);
    } else if constexpr (is_float<From> && Integer<To>) {
      constexpr From limit = -static_cast<From>(IntegerTraits<To>::lowest);  // 2^31 or 2^63, exact
      if (x != x) return To(0);
      if (x >= limit) return IntegerTraits<To>::highest;
      if (x < -limit) return IntegerTraits<To>::lowest;
      return static_cast<To>(x);
    } else {
      return static_cast<To>(x);
    }
  }
};

}  // namespace kiln::scalar
