#pragma once
// The elementwise operations as device function objects, one per op, with
// the CPU kernels' semantics (kernels/cpu/elementwise.cpp,
// elementwise_binary.cpp): integer arithmetic wraps (unsigned math), float
// maximum/minimum propagate NaN, compares are IEEE, integer pow squares.
// Device code only, without the standard library (device_traits.cuh): the
// JIT's NVRTC prelude embeds this header.

#include "kernels/cuda/device_traits.cuh"
#include "kernels/cuda/erfc.cuh"

namespace kiln::kernels::cuda::ops {

// ---- float math by width -------------------------------------------------------------

#define KILN_CUDA_MATH(name, float_function, double_function)                      \
  __device__ __forceinline__ float name(float x) { return float_function(x); }     \
  __device__ __forceinline__ double name(double x) { return double_function(x); }
KILN_CUDA_MATH(math_sin, sinf, sin)
KILN_CUDA_MATH(math_cos, cosf, cos)
KILN_CUDA_MATH(math_exp, expf, exp)
KILN_CUDA_MATH(math_log, logf, log)
KILN_CUDA_MATH(math_tanh, tanhf, tanh)
KILN_CUDA_MATH(math_erf, erff, erf)
KILN_CUDA_MATH(math_log1p, log1pf, log1p)
KILN_CUDA_MATH(math_expm1, expm1f, expm1)
KILN_CUDA_MATH(math_atan, atanf, atan)
KILN_CUDA_MATH(math_sqrt, sqrtf, sqrt)
KILN_CUDA_MATH(math_floor, floorf, floor)
KILN_CUDA_MATH(math_ceil, ceilf, ceil)
KILN_CUDA_MATH(math_round, rintf, rint)  // the GPU rounds to nearest, ties to even
KILN_CUDA_MATH(math_abs, fabsf, fabs)
#undef KILN_CUDA_MATH
// f32 erfc is kiln's (erfc.cuh: fewer instructions than erfcf, none on the special-function unit); f64 CUDA's.
__device__ __forceinline__ float math_erfc(float x) { return erfc_float(x); }
__device__ __forceinline__ double math_erfc(double x) { return erfc(x); }
#define KILN_CUDA_MATH2(name, float_function, double_function)                                      \
  __device__ __forceinline__ float name(float x, float y) { return float_function(x, y); }         \
  __device__ __forceinline__ double name(double x, double y) { return double_function(x, y); }
KILN_CUDA_MATH2(math_pow, powf, pow)
KILN_CUDA_MATH2(math_fmod, fmodf, fmod)
KILN_CUDA_MATH2(math_copysign, copysignf, copysign)
#undef KILN_CUDA_MATH2

template <class T> inline constexpr bool is_float = ElementTraits<T>::is_float;

// ---- unary -------------------------------------------------------------------------------

struct Negate {
  template <class T> __device__ T operator()(T x) const {
    if constexpr (is_float<T>) return -x;
    else return static_cast<T>(Unsigned<T>(0) - static_cast<Unsigned<T>>(x));
  }
};
struct Absolute {
  template <class T> __device__ T operator()(T x) const {
    if constexpr (is_float<T>) return math_abs(x);
    else return x < 0 ? static_cast<T>(Unsigned<T>(0) - static_cast<Unsigned<T>>(x)) : x;
  }
};
// Floats: zeros keep their sign and NaN stays NaN.
struct Sign {
  template <class T> __device__ T operator()(T x) const {
    if constexpr (is_float<T>) return x > 0 ? T(1) : x < 0 ? T(-1) : x;
    else return static_cast<T>((x > 0) - (x < 0));
  }
};
struct Square {
  template <class T> __device__ T operator()(T x) const {
    if constexpr (is_float<T>) return x * x;
    else return static_cast<T>(static_cast<Unsigned<T>>(x) * static_cast<Unsigned<T>>(x));
  }
};
// relu(-0) = +0, and relu(NaN) = NaN (the comparison is false for NaN), as
// the CPU kernels.
struct Relu {
  template <class T>
  __device__ T operator()(T x) const {
    return x <= 0 ? T(0) : x;
  }
};
struct Floor {
  template <class T> __device__ T operator()(T x) const {
    if constexpr (is_float<T>) return math_floor(x);
    else return x;
  }
};
struct Ceil {
  template <class T> __device__ T operator()(T x) const {
    if constexpr (is_float<T>) return math_ceil(x);
    else return x;
  }
};
struct Round {
  template <class T> __device__ T operator()(T x) const {
    if constexpr (is_float<T>) return math_round(x);
    else return x;
  }
};
struct Sine {
  template <class T> __device__ T operator()(T x) const { return math_sin(x); }
};
struct Cosine {
  template <class T> __device__ T operator()(T x) const { return math_cos(x); }
};
struct Exponential {
  template <class T> __device__ T operator()(T x) const { return math_exp(x); }
};
struct Logarithm {
  template <class T> __device__ T operator()(T x) const { return math_log(x); }
};
struct HyperbolicTangent {
  template <class T> __device__ T operator()(T x) const { return math_tanh(x); }
};
struct SquareRoot {
  template <class T> __device__ T operator()(T x) const { return math_sqrt(x); }
};
// 1 / sqrt(x), both correctly rounded: equal to the CPU's (not rsqrtf, 2 ULP).
struct ReciprocalSquareRoot {
  template <class T> __device__ T operator()(T x) const { return T(1) / math_sqrt(x); }
};
// exp(-x) overflows to inf for very negative x, giving the correct limit 0.
struct Sigmoid {
  template <class T> __device__ T operator()(T x) const { return T(1) / (T(1) + math_exp(-x)); }
};
struct ErrorFunction {
  template <class T> __device__ T operator()(T x) const { return math_erf(x); }
};
struct ComplementaryErrorFunction {
  template <class T>
  __device__ T operator()(T x) const {
    return math_erfc(x);
  }
};
struct LogarithmOfOnePlus {
  template <class T> __device__ T operator()(T x) const { return math_log1p(x); }
};
struct ExponentialMinusOne {
  template <class T> __device__ T operator()(T x) const { return math_expm1(x); }
};
struct Arctangent {
  template <class T> __device__ T operator()(T x) const { return math_atan(x); }
};
// Bits of integers; on bools (0 or 1) logical not.
struct BitwiseNot {
  template <class T> __device__ T operator()(T x) const {
    if constexpr (sizeof(T) == 1) return static_cast<T>(x == 0);
    else return static_cast<T>(~x);
  }
};
struct LogicalNot {
  __device__ Bool operator()(Bool x) const { return static_cast<Bool>(x == 0); }
};

// ---- binary ------------------------------------------------------------------------------

struct Add {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (is_float<T>) return a + b;
    else return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
  }
};
struct Subtract {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (is_float<T>) return a - b;
    else return static_cast<T>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b));
  }
};
struct Multiply {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (is_float<T>) return a * b;
    else return static_cast<T>(static_cast<Unsigned<T>>(a) * static_cast<Unsigned<T>>(b));
  }
};
struct Divide {
  template <class T> __device__ T operator()(T a, T b) const { return a / b; }  // floats only
};
// Integer pow as XLA and TF (see the CPU kernel): squaring with wraparound; a
// negative exponent gives 0 except for bases 1 and -1.
struct Power {
  template <class T> __device__ T operator()(T base, T exponent) const {
    if constexpr (is_float<T>) {
      return math_pow(base, exponent);
    } else {
      if (exponent < 0) {
        if (base == 1) return 1;
        if (base == -1) return (exponent & 1) ? T(-1) : T(1);
        return 0;
      }
      using U = Unsigned<T>;
      U result = 1, factor = static_cast<U>(base);
      for (U remaining = static_cast<U>(exponent); remaining != 0; remaining >>= 1) {
        if (remaining & 1) result *= factor;
        factor *= factor;
      }
      return static_cast<T>(result);
    }
  }
};
// Python's // and %, C's fmod, as the CPU's (kernels/cpu/division.h says why each case is what it is): integers
// divided by 0 give 0, the most negative over -1 wraps; floats follow NumPy's divmod.
template <class T> __device__ __forceinline__ bool signs_differ(T remainder, T divisor) {
  return remainder != 0 && ((remainder < 0) != (divisor < 0));
}
struct FloorDivide {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (is_float<T>) {
      if (b == 0) return a / b;
      const T truncated_remainder = math_fmod(a, b);
      T quotient = (a - truncated_remainder) / b;
      if (signs_differ(truncated_remainder, b)) quotient -= 1;
      if (quotient == 0) return math_copysign(T(0), a / b);
      T whole = math_floor(quotient);
      if (quotient - whole > T(0.5)) whole += 1;
      return whole;
    } else {
      if (b == 0) return 0;
      if (b == -1) return static_cast<T>(Unsigned<T>(0) - static_cast<Unsigned<T>>(a));
      const T quotient = static_cast<T>(a / b);
      return signs_differ(static_cast<T>(a % b), b) ? static_cast<T>(quotient - 1) : quotient;
    }
  }
};
struct Remainder {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (is_float<T>) {
      const T truncated_remainder = math_fmod(a, b);
      if (truncated_remainder == 0) return math_copysign(T(0), b);
      return signs_differ(truncated_remainder, b) ? truncated_remainder + b : truncated_remainder;
    } else {
      if (b == 0 || b == -1) return 0;
      const T truncated_remainder = static_cast<T>(a % b);
      return signs_differ(truncated_remainder, b) ? static_cast<T>(truncated_remainder + b) : truncated_remainder;
    }
  }
};
struct TruncatedRemainder {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (is_float<T>) return math_fmod(a, b);
    else return (b == 0 || b == -1) ? T(0) : static_cast<T>(a % b);
  }
};
// Bits of integers and of bools' 0 and 1; shifts as the CPU's (kernels/cpu/shifts.h): a count outside [0, bits)
// gives 0 to the left and the sign to the right.
struct BitwiseAnd {
  template <class T> __device__ T operator()(T a, T b) const { return static_cast<T>(a & b); }
};
struct BitwiseOr {
  template <class T> __device__ T operator()(T a, T b) const { return static_cast<T>(a | b); }
};
struct BitwiseXor {
  template <class T> __device__ T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
};
template <class T> __device__ __forceinline__ bool shift_in_range(T count) {
  return count >= 0 && count < static_cast<T>(sizeof(T) * 8);
}
struct LeftShift {
  template <class T> __device__ T operator()(T a, T b) const {
    return shift_in_range(b) ? static_cast<T>(static_cast<Unsigned<T>>(a) << b) : T(0);
  }
};
struct RightShift {
  template <class T> __device__ T operator()(T a, T b) const {
    return shift_in_range(b) ? static_cast<T>(a >> b) : (a < 0 ? T(-1) : T(0));
  }
};
// NaN in either operand gives NaN (the first one if both are NaN).
struct Maximum {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (is_float<T>) return (a > b || a != a) ? a : b;
    else return a > b ? a : b;
  }
};
struct Minimum {
  template <class T> __device__ T operator()(T a, T b) const {
    if constexpr (is_float<T>) return (a < b || a != a) ? a : b;
    else return a < b ? a : b;
  }
};
struct Equal {
  template <class T> __device__ Bool operator()(T a, T b) const { return a == b; }
};
struct NotEqual {
  template <class T> __device__ Bool operator()(T a, T b) const { return a != b; }
};
struct Less {
  template <class T> __device__ Bool operator()(T a, T b) const { return a < b; }
};
struct LessEqual {
  template <class T> __device__ Bool operator()(T a, T b) const { return a <= b; }
};
struct Greater {
  template <class T> __device__ Bool operator()(T a, T b) const { return a > b; }
};
struct GreaterEqual {
  template <class T> __device__ Bool operator()(T a, T b) const { return a >= b; }
};
struct LogicalAnd {
  __device__ Bool operator()(Bool a, Bool b) const { return (a != 0) & (b != 0); }
};
struct LogicalOr {
  __device__ Bool operator()(Bool a, Bool b) const { return (a != 0) | (b != 0); }
};

// ---- cast --------------------------------------------------------------------------------

// Float to integer: truncation where the value fits, saturation beyond the
// range, NaN -> 0 (the CPU kernel's saturating_truncate).
template <class To, class From> __device__ To saturating_truncate(From x) {
  constexpr From limit = -static_cast<From>(ElementTraits<To>::lowest);  // 2^31 or 2^63, exact
  if (x != x) return To(0);
  if (x >= limit) return ElementTraits<To>::highest;
  if (x < -limit) return ElementTraits<To>::lowest;
  return static_cast<To>(x);
}

template <class To> struct Convert {
  template <class From> __device__ To operator()(From x) const {
    if constexpr (same_type<To, Bool>) return x != From(0);  // to bool (NaN is != 0: true)
    else if constexpr (is_float<From> && ElementTraits<To>::is_integer) return saturating_truncate<To>(x);
    else return static_cast<To>(x);  // bool 0/1; integers wrap; floats round to nearest
  }
};

}  // namespace kiln::kernels::cuda::ops
