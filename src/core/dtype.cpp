#include <kiln/dtype.h>

#include <ostream>

namespace kiln {

std::string_view to_string(DType dtype) {
  switch (dtype) {
    case DType::boolean: return "bool";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
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

}  // namespace kiln
