#pragma once
// Element types of kiln tensors and the promotion rules between them.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace kiln {

// `boolean` is printed as "bool" (the keyword cannot be an enumerator); it is
// stored as one byte holding 0 or 1. bf16 (bfloat16: f32's exponent, 8 bits of
// significand) and f16 (IEEE half precision) are stored as 2 bytes; an op on
// them computes in f32 on their exact values and rounds once at its output (XLA's
// and PyTorch's semantics; reductions and matmul accumulate in f32). In this
// version the standard executor computes them on the CPU; the JIT leaves
// functions holding them to it.
enum class DType : std::uint8_t { boolean, i32, i64, f32, f64, bf16, f16 };

inline constexpr int dtype_count = 7;

std::string_view to_string(DType dtype);
// Prints what to_string gives: std::cout << DType::f32 prints "f32".
std::ostream& operator<<(std::ostream& stream, DType dtype);
// Parses "bool", "i32", "i64", "f32", "f64", "bf16", "f16"; returns false on anything else.
bool parse_dtype(std::string_view text, DType* dtype);

constexpr std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::boolean: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16:
    case DType::f16: return 2;
  }
  return 0;
}

// The 16-bit floats, which this kiln stores and converts but does not compute on.
constexpr bool is_half_precision(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16; }
constexpr bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || is_half_precision(dtype);
}
constexpr bool is_integral(DType dtype) { return dtype == DType::i32 || dtype == DType::i64; }

// Type promotion for binary ops (documented in README "dtype promotion"), JAX's
// lattice: bool < i32 < i64 < {bf16, f16} < f32 < f64, the larger of the two,
// and bf16 with f16 gives f32. Like JAX and PyTorch (and unlike NumPy), an
// integer meeting f32 stays f32 rather than widening to f64.
constexpr int promotion_rank(DType dtype) {
  switch (dtype) {
    case DType::boolean: return 0;
    case DType::i32: return 1;
    case DType::i64: return 2;
    case DType::bf16:
    case DType::f16: return 3;
    case DType::f32: return 4;
    case DType::f64: return 5;
  }
  return 0;
}
constexpr DType promote_types(DType a, DType b) {
  if (is_half_precision(a) && is_half_precision(b) && a != b) return DType::f32;
  return promotion_rank(a) < promotion_rank(b) ? b : a;
}

// The dtype that float-only math (sin, exp, division, mean, ...) computes in:
// floats keep their width, bool and integers become f32.
constexpr DType floating_result(DType dtype) { return is_floating(dtype) ? dtype : DType::f32; }

// A bf16 or f16 element as stored: its 16 bits.
struct bfloat16 {
  std::uint16_t bits;
};
struct float16 {
  std::uint16_t bits;
};
// Their values (exact).
float to_float(bfloat16 value);
float to_float(float16 value);
// `value` rounded once to the nearest bf16 or f16 (ties to even): NaN stays NaN (quiet), a magnitude past the
// largest finite value rounds to infinity.
bfloat16 to_bfloat16(double value);
float16 to_float16(double value);

// Maps C++ element types to DTypes; `bool` tensors are stored as std::uint8_t.
template <class T> struct dtype_of_t;
template <> struct dtype_of_t<bool> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of_t<std::uint8_t> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of_t<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of_t<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of_t<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of_t<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of_t<bfloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of_t<float16> { static constexpr DType value = DType::f16; };
template <class T> inline constexpr DType dtype_of = dtype_of_t<T>::value;

namespace detail {
// Throws kiln::DTypeError: a kernel met a bf16 or f16 array, which only the cast kernel reads and writes
// (kernels::run runs every other op on them in f32).
[[noreturn]] void half_precision_unsupported(DType dtype);
}  // namespace detail

// Calls `function.template operator()<T>()` with T the storage type of `dtype`
// (std::uint8_t for bool), for the dtypes kernels compute in: bf16 and f16 throw
// kiln::DTypeError (kernels::run widens them to f32 first; code that reads them
// converts them itself). One switch for every dtype-generic piece of code.
template <class Function> decltype(auto) visit_dtype(DType dtype, Function&& function) {
  switch (dtype) {
    case DType::boolean: return function.template operator()<std::uint8_t>();
    case DType::i32: return function.template operator()<std::int32_t>();
    case DType::i64: return function.template operator()<std::int64_t>();
    case DType::f32: return function.template operator()<float>();
    case DType::bf16:
    case DType::f16: detail::half_precision_unsupported(dtype);
    case DType::f64: break;
  }
  return function.template operator()<double>();
}

}  // namespace kiln
