#pragma once
// Element types of kiln tensors and the promotion rules between them.

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace kiln {

// The order is the promotion lattice: bool < i32 < i64 < f32 < f64.
// `boolean` is printed as "bool" (the keyword cannot be an enumerator); it is
// stored as one byte holding 0 or 1.
enum class DType : std::uint8_t { boolean, i32, i64, f32, f64 };

inline constexpr int dtype_count = 5;

std::string_view to_string(DType dtype);
// Prints what to_string gives: std::cout << DType::f32 prints "f32".
std::ostream& operator<<(std::ostream& stream, DType dtype);
// Parses "bool", "i32", "i64", "f32", "f64"; returns false on anything else.
bool parse_dtype(std::string_view text, DType* dtype);

constexpr std::size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::boolean: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::f32: return 4;
    case DType::f64: return 8;
  }
  return 0;
}

constexpr bool is_floating(DType dtype) { return dtype == DType::f32 || dtype == DType::f64; }
constexpr bool is_integral(DType dtype) { return dtype == DType::i32 || dtype == DType::i64; }

// Type promotion for binary ops (documented in README "dtype promotion"): the
// larger of the two in the lattice. Like JAX and PyTorch (and unlike NumPy),
// an integer meeting f32 stays f32 rather than widening to f64.
constexpr DType promote_types(DType a, DType b) { return a < b ? b : a; }

// The dtype that float-only math (sin, exp, division, mean, ...) computes in:
// floats keep their width, bool and integers become f32.
constexpr DType floating_result(DType dtype) { return is_floating(dtype) ? dtype : DType::f32; }

// Maps C++ element types to DTypes; `bool` tensors are stored as std::uint8_t.
template <class T> struct dtype_of_t;
template <> struct dtype_of_t<bool> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of_t<std::uint8_t> { static constexpr DType value = DType::boolean; };
template <> struct dtype_of_t<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of_t<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of_t<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of_t<double> { static constexpr DType value = DType::f64; };
template <class T> inline constexpr DType dtype_of = dtype_of_t<T>::value;

// Calls `function.template operator()<T>()` with T the storage type of `dtype`
// (std::uint8_t for bool). One switch for every dtype-generic piece of code.
template <class Function> decltype(auto) visit_dtype(DType dtype, Function&& function) {
  switch (dtype) {
    case DType::boolean: return function.template operator()<std::uint8_t>();
    case DType::i32: return function.template operator()<std::int32_t>();
    case DType::i64: return function.template operator()<std::int64_t>();
    case DType::f32: return function.template operator()<float>();
    case DType::f64: break;
  }
  return function.template operator()<double>();
}

}  // namespace kiln
