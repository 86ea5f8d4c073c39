// Readable printing of tensors, summarized like NumPy's for large ones.

#include "api/tensor_impl.h"

#include <kiln/tensor.h>

#include <cmath>
#include <cstdio>
#include <ostream>

namespace kiln {
namespace {

constexpr std::int64_t summarize_above = 1000;  // elements; NumPy's threshold
constexpr std::int64_t edge_items = 3;

std::string format_element(const runtime::Array& array, std::int64_t index) {
  char text[64];
  switch (array.dtype) {
    case DType::boolean: return array.data<std::uint8_t>()[index] ? "true" : "false";
    case DType::i32: return std::to_string(array.data<std::int32_t>()[index]);
    case DType::i64: return std::to_string(array.data<std::int64_t>()[index]);
    case DType::f32: std::snprintf(text, sizeof text, "%.6g", static_cast<double>(array.data<float>()[index])); break;
    case DType::f64: std::snprintf(text, sizeof text, "%.9g", array.data<double>()[index]); break;
    case DType::bf16:  // 8 significant bits: 3 digits tell the values apart
      std::snprintf(text, sizeof text, "%.3g", to_float(bfloat16{array.data<std::uint16_t>()[index]}));
      break;
    case DType::f16:
      std::snprintf(text, sizeof text, "%.4g", to_float(float16{array.data<std::uint16_t>()[index]}));
      break;
  }
  return text;
}

void format_axis(const runtime::Array& array, int axis, std::int64_t offset, bool summarize, std::string& out) {
  const Shape& shape = array.shape;
  std::int64_t size = shape[axis];
  std::int64_t stride = 1;
  for (int later = axis + 1; later < shape.rank(); ++later) stride *= shape[later];
  out += "[";
  for (std::int64_t i = 0; i < size; ++i) {
    if (summarize && size > 2 * edge_items && i == edge_items) {
      out += axis + 1 == shape.rank() ? "..., " : "...,\n" + std::string(static_cast<std::size_t>(axis + 1), ' ');
      i = size - edge_items;
    }
    if (axis + 1 == shape.rank()) out += format_element(array, offset + i);
    else format_axis(array, axis + 1, offset + i * stride, summarize, out);
    if (i + 1 < size) {
      if (axis + 1 == shape.rank()) out += ", ";
      else out += ",\n" + std::string(static_cast<std::size_t>(axis + 1), ' ');
    }
  }
  out += "]";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  std::string header = std::string(kiln::to_string(dtype())) + shape().to_string() + " " + device().to_string();
  if (is_traced()) return header + " (traced: no value until the graph runs)";
  // Values are read from host memory; the header names the tensor's own device.
  const Tensor host = impl().array.device().is_cpu() ? *this : to(Device::cpu());
  const runtime::Array& array = host.impl().array;
  std::string body;
  if (shape().rank() == 0) body = format_element(array, 0);
  else format_axis(array, 0, 0, shape().numel() > summarize_above, body);
  return header + "\n" + body;
}

std::ostream& operator<<(std::ostream& stream, const Tensor& tensor) { return stream << tensor.to_string(); }

}  // namespace kiln
