#include <kiln/dtype.h>
#include <kiln/error.h>

#include "core/half_precision_bits.h"

#include <bit>
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

float to_float(bfloat16 value) { return std::bit_cast<float>(half_bits::f32_from_bf16(value.bits)); }

float to_float(float16 value) { return std::bit_cast<float>(half_bits::f32_from_f16(value.bits)); }

bfloat16 to_bfloat16(double value) { return {half_bits::bf16_from_f64(value)}; }

float16 to_float16(double value) { return {half_bits::f16_from_f64(value)}; }

namespace detail {

void half_precision_unsupported(DType dtype) {
  throw DTypeError(std::string(to_string(dtype)),
                   "a kernel was handed bf16 or f16 data, which kernels do not compute in (they compute in f32: "
                   "kiln::cast(x, kiln::DType::f32))",
                   std::string());
}

}  // namespace detail

}  // namespace kiln
