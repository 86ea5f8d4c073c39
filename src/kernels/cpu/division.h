#pragma once
// floor_divide, remainder and fmod of one pair of elements: shared by the standard CPU kernels and the CPU JIT's
// prelude (which embeds this header), so that both executors compute the same bits. Self-contained: compiler
// builtins only, no standard header.
//
// Integers (signed): the quotient rounded down and the remainder that goes with it, whose sign is the divisor's
// (Python's // and %); fmod truncates instead, its remainder taking the dividend's sign (C's %). A zero divisor
// gives 0 for all three (NumPy's result; NumPy also warns, TF and PyTorch raise, XLA gives -1 and the dividend,
// and a kernel cannot raise). The one quotient that overflows, the most negative value over -1, wraps to itself
// (NumPy's), and its remainder is 0; C's `/` and `%` are undefined there, so -1 is taken apart.
//
// Floats: NumPy's divmod. fmod is exact; the remainder is fmod moved into the divisor's sign (a zero one takes the
// divisor's sign too); the quotient is (a - fmod(a, b)) / b, one less where the remainder moved, which is an
// integer up to rounding, rounded to it. So a == floor_divide(a, b) * b + remainder(a, b) as closely as floats
// allow, and 7.0 // 0.1 is 69 (the remainder is 0.0999...), as in Python, not floor(7.0 / 0.1) = 70. A zero
// divisor gives a / b (inf or NaN) as quotient and NaN as remainders; an infinite dividend gives NaN.

namespace kiln::division {

template <class T>
constexpr bool is_float_type = static_cast<T>(0.5) != 0;

// The math by width, through builtins (no <cmath> in the JIT's prelude).
[[gnu::always_inline]] inline float float_fmod(float a, float b) { return __builtin_fmodf(a, b); }
[[gnu::always_inline]] inline double float_fmod(double a, double b) { return __builtin_fmod(a, b); }
[[gnu::always_inline]] inline float float_floor(float x) { return __builtin_floorf(x); }
[[gnu::always_inline]] inline double float_floor(double x) { return __builtin_floor(x); }
[[gnu::always_inline]] inline float float_copysign(float x, float sign) { return __builtin_copysignf(x, sign); }
[[gnu::always_inline]] inline double float_copysign(double x, double sign) { return __builtin_copysign(x, sign); }

// The divisor's sign and the remainder's differ: the truncated quotient is one above the floor.
template <class T>
[[gnu::always_inline]] inline bool signs_differ(T remainder, T divisor) {
  return remainder != 0 && ((remainder < 0) != (divisor < 0));
}

template <class T>
[[gnu::always_inline]] inline T floor_divide(T a, T b) {
  if constexpr (is_float_type<T>) {
    if (b == 0) return a / b;
    const T truncated_remainder = float_fmod(a, b);
    T quotient = (a - truncated_remainder) / b;
    if (signs_differ(truncated_remainder, b)) quotient -= 1;
    if (quotient == 0) return float_copysign(T(0), a / b);
    T whole = float_floor(quotient);
    if (quotient - whole > T(0.5)) whole += 1;
    return whole;
  } else {
    if (b == 0) return 0;
    if (b == -1) return static_cast<T>(0ull - static_cast<unsigned long long>(a));  // wraps, never overflows
    const T quotient = static_cast<T>(a / b);
    return signs_differ(static_cast<T>(a % b), b) ? static_cast<T>(quotient - 1) : quotient;
  }
}

template <class T>
[[gnu::always_inline]] inline T remainder(T a, T b) {
  if constexpr (is_float_type<T>) {
    const T truncated_remainder = float_fmod(a, b);
    if (truncated_remainder == 0) return float_copysign(T(0), b);
    return signs_differ(truncated_remainder, b) ? truncated_remainder + b : truncated_remainder;
  } else {
    if (b == 0 || b == -1) return 0;
    const T truncated_remainder = static_cast<T>(a % b);
    return signs_differ(truncated_remainder, b) ? static_cast<T>(truncated_remainder + b) : truncated_remainder;
  }
}

template <class T>
[[gnu::always_inline]] inline T fmod(T a, T b) {
  if constexpr (is_float_type<T>) {
    return float_fmod(a, b);
  } else {
    if (b == 0 || b == -1) return 0;
    return static_cast<T>(a % b);
  }
}

}  // namespace kiln::division
