#pragma once
// A bf16 or f16 element chosen by its dtype, for code that handles both in one path (casts, to_vector, random
// draws); kiln/dtype.h has the conversions of each.

#include <kiln/dtype.h>

#include <cstdint>

namespace kiln {

// The exact value of the bits of a `dtype` (bf16 or f16) element.
inline float half_precision_value(DType dtype, std::uint16_t bits) {
  return dtype == DType::bf16 ? to_float(bfloat16{bits}) : to_float(float16{bits});
}

// The bits of `value` rounded once to `dtype` (bf16 or f16).
inline std::uint16_t half_precision_bits(DType dtype, double value) {
  return dtype == DType::bf16 ? to_bfloat16(value).bits : to_float16(value).bits;
}

}  // namespace kiln
