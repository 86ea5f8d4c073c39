#pragma once
// The bit arithmetic of bf16 and f16 conversions, in one place for both executors: the standard kernels
// (core/dtype.cpp, kernels/cpu/elementwise.cpp) and the CPU JIT's prelude, which embeds this header, so a fused
// kernel rounds exactly as the standard executor does. Plain C++ on integers and one float multiply: no library
// header, nothing the prelude does not have. The CUDA side uses it too: the standard CUDA cast kernel (nvcc, or the
// host compiler for kiln's CUDA simulator) and the CUDA JIT's prelude (NVRTC, which has no <stdint.h>).

#if defined(__CUDACC__) || defined(__CUDACC_RTC__) || defined(__device__)
#define KILN_HALF_BITS_FUNCTION __host__ __device__ inline
#else
#define KILN_HALF_BITS_FUNCTION inline
#endif

#if !defined(__CUDACC_RTC__)
#include <stdint.h>
#endif

namespace kiln::half_bits {

#if defined(__CUDACC_RTC__)
using uint16_t = unsigned short;
using uint32_t = unsigned int;
#endif

// The f32 bits of a bf16: the bits moved up (exact).
KILN_HALF_BITS_FUNCTION constexpr uint32_t f32_from_bf16(uint16_t bits) { return static_cast<uint32_t>(bits) << 16; }

// f32 bits rounded to bf16: to nearest, ties to even, on the upper half of the bits (a carry into the exponent is
// right, up to infinity). A NaN keeps its sign and the upper bits of its payload, made quiet. `Bits` is uint32_t
// or a vector of them (the prelude's, whose lanes GCC would not always vectorize from a loop over this scalar
// form); the bf16 is in the low 16 bits of each.
template <class Bits>
KILN_HALF_BITS_FUNCTION constexpr Bits bf16_rounded(Bits bits) {
  return (bits & 0x7FFFFFFFu) > 0x7F800000u ? (bits >> 16) | 0x40u : (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}
KILN_HALF_BITS_FUNCTION constexpr uint16_t bf16_from_f32(uint32_t bits) {
  return static_cast<uint16_t>(bf16_rounded(bits));
}

// The f32 bits of an f16 (exact); a NaN keeps its payload.
KILN_HALF_BITS_FUNCTION uint32_t f32_from_f16(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t significand = bits & 0x3FFu;
  if (exponent == 0x1F) return sign | 0x7F800000u | (significand << 13);  // infinity or NaN
  if (exponent == 0) {  // zero or subnormal: significand x 2^-24, exact in f32
    const float magnitude = static_cast<float>(significand) * 0x1p-24f;
    return sign | __builtin_bit_cast(uint32_t, magnitude);
  }
  return sign | ((exponent + 112) << 23) | (significand << 13);
}

// f32 bits (exact, or rounded to odd from a double: round_to_odd_f32) rounded to f16, to nearest, ties to even;
// past the largest finite f16, infinity; a NaN is f16's quiet NaN with the sign kept.
KILN_HALF_BITS_FUNCTION uint16_t f16_from_f32(uint32_t bits) {
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude_bits = bits & 0x7FFFFFFFu;
  if (magnitude_bits > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);
  const int exponent = static_cast<int>(magnitude_bits >> 23) - 127;
  if (exponent > 15) return static_cast<uint16_t>(sign | 0x7C00u);
  // The significand with its implicit bit (none for f32's zero and subnormals, all below f16's range), and how
  // many of its low bits f16 drops: 13 for a normal f16, more below 2^-14 (f16's subnormals).
  const uint32_t significand = exponent == -127 ? 0 : (magnitude_bits & 0x7FFFFFu) | 0x800000u;
  const int dropped = exponent >= -14 ? 13 : (13 + (-14 - exponent) < 25 ? 13 + (-14 - exponent) : 25);
  const uint32_t kept = significand >> dropped;
  const uint32_t rest = significand & ((1u << dropped) - 1u);
  const uint32_t half = 1u << (dropped - 1);
  const uint32_t rounded = kept + ((rest > half || (rest == half && (kept & 1u))) ? 1u : 0u);
  uint32_t result;
  if (exponent >= -14) {
    // kept = 1.m (11 bits): the exponent field counts from the implicit bit; a carry to 2.0 moves into it.
    result = (static_cast<uint32_t>(exponent + 15) << 10) + (rounded - 0x400u);
    if (result >= 0x7C00u) result = 0x7C00u;
  } else {
    result = rounded;  // subnormal (a carry into 0x400 is the smallest normal, as encoded)
  }
  return static_cast<uint16_t>(sign | result);
}

// A double (not NaN) rounded to f32 toward zero, with the lowest bit of the significand set where that was
// inexact ("round to odd"): rounding this to a format of at most 22 significant bits, to nearest even, gives what
// rounding the double directly would (f32 keeps two more bits than bf16's 8 and f16's 11), so a double reaches
// bf16 or f16 with one rounding, not two. Past the largest float: the largest float, odd.
KILN_HALF_BITS_FUNCTION uint32_t round_to_odd_f32(double value) {
  const float nearest = static_cast<float>(value);
  uint32_t bits = __builtin_bit_cast(uint32_t, nearest);
  const double back = static_cast<double>(nearest);
  if (back != value) {
    // Rounded away from zero: one step back toward it (the bits are sign and magnitude).
    if ((back < 0 ? -back : back) > (value < 0 ? -value : value)) bits -= 1;
    bits |= 1;
  }
  return bits;
}

// Whether a double's sign bit is set (NVRTC has no __builtin_signbit).
KILN_HALF_BITS_FUNCTION bool sign_bit(double value) {
  return (__builtin_bit_cast(unsigned long long, value) >> 63) != 0;
}

// A double rounded once to bf16 or f16; NaN becomes the format's quiet NaN with the sign kept.
KILN_HALF_BITS_FUNCTION uint16_t bf16_from_f64(double value) {
  if (value != value) return sign_bit(value) ? 0xFFC0u : 0x7FC0u;
  return bf16_from_f32(round_to_odd_f32(value));
}
KILN_HALF_BITS_FUNCTION uint16_t f16_from_f64(double value) {
  if (value != value) return sign_bit(value) ? 0xFE00u : 0x7E00u;
  return f16_from_f32(round_to_odd_f32(value));
}

}  // namespace kiln::half_bits
