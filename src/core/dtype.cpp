#include <kiln/dtype.h>
#include <kiln/error.h>

#include <bit>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>

namespace kiln {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::boolean: return "bool";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& stream, DType dtype) { return stream << to_string(dtype); }

bool parse_dtype(std::string_view text, DType* dtype) {
  for (int i = 0; i < dtype_count; ++i) {
    auto candidate = static_cast<DType>(i);
    if (to_string(candidate) == text) {
      *dtype = candidate;
      return true;
    }
  }
  return false;
}

namespace {

// `value` rounded to f32 toward zero, with the lowest bit of the significand set when that was inexact ("round to
// odd"): rounding this to a format of at most 22 significant bits, to nearest even, gives what rounding `value`
// directly would (f32 keeps two more bits than bf16's 8 and f16's 11), so a double reaches bf16 or f16 with one
// rounding, not two.
std::uint32_t round_to_odd_f32(double value) {
  float truncated = static_cast<float>(value);
  if (std::fabs(static_cast<double>(truncated)) > std::fabs(value))
    truncated = std::nextafter(truncated, 0.0f);  // toward zero (an overflow to infinity becomes the largest float)
  std::uint32_t bits = std::bit_cast<std::uint32_t>(truncated);
  if (static_cast<double>(truncated) != value) bits |= 1;
  return bits;
}

}  // namespace

float to_float(bfloat16 value) { return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16); }

float to_float(float16 value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value.bits & 0x8000u) << 16;
  const std::uint32_t exponent = (value.bits >> 10) & 0x1Fu;
  const std::uint32_t significand = value.bits & 0x3FFu;
  if (exponent == 0x1F)  // infinity or NaN (its payload kept)
    return std::bit_cast<float>(sign | 0x7F800000u | (significand << 13));
  if (exponent == 0) {  // zero or subnormal: significand x 2^-24, exact in f32
    const float magnitude = std::ldexp(static_cast<float>(significand), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (significand << 13));
}

bfloat16 to_bfloat16(double value) {
  if (std::isnan(value)) return {static_cast<std::uint16_t>(std::signbit(value) ? 0xFFC0u : 0x7FC0u)};
  const std::uint32_t bits = round_to_odd_f32(value);
  // To nearest, ties to even, on the upper 16 bits; a carry into the exponent is the right result (up to infinity).
  const std::uint32_t rounded = bits + 0x7FFFu + ((bits >> 16) & 1u);
  return {static_cast<std::uint16_t>(rounded >> 16)};
}

float16 to_float16(double value) {
  const bool negative = std::signbit(value);
  const std::uint16_t sign = negative ? 0x8000u : 0u;
  if (std::isnan(value)) return {static_cast<std::uint16_t>(sign | 0x7E00u)};
  const std::uint32_t bits = round_to_odd_f32(value) & 0x7FFFFFFFu;
  const int exponent = static_cast<int>(bits >> 23) - 127;
  if (exponent > 15) return {static_cast<std::uint16_t>(sign | 0x7C00u)};  // past the largest: infinity
  // The significand with its implicit bit (none for f32's zero and subnormals, all below f16's range), and how
  // many of its low bits f16 drops: 13 for a normal f16, more below 2^-14 (f16's subnormals).
  const std::uint32_t significand = exponent == -127 ? 0 : (bits & 0x7FFFFFu) | 0x800000u;
  const int dropped = exponent >= -14 ? 13 : std::min(13 + (-14 - exponent), 25);
  const std::uint32_t kept = significand >> dropped;
  const std::uint32_t rest = significand & ((1u << dropped) - 1u);
  const std::uint32_t half = 1u << (dropped - 1);
  std::uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  std::uint32_t result;
  if (exponent >= -14) {
    // kept = 1.m (11 bits): the exponent field counts from the implicit bit; a carry to 2.0 moves into it.
    result = (static_cast<std::uint32_t>(exponent + 15) << 10) + (rounded - 0x400u);
    if (result >= 0x7C00u) result = 0x7C00u;
  } else {
    result = rounded;  // subnormal (a carry into 0x400 is the smallest normal, as encoded)
  }
  return {static_cast<std::uint16_t>(sign | result)};
}

namespace detail {

void half_precision_unsupported(DType dtype) {
  throw DTypeError(std::string(to_string(dtype)),
                   "a kernel was handed bf16 or f16 data, which kernels do not compute in (they compute in f32: "
                   "kiln::cast(x, kiln::DType::f32))",
                   std::string());
}

}  // namespace detail

}  // namespace kiln
