#include "kernels/scan_shape.h"

#include <kiln/error.h>

#include <string>

namespace kiln::kernels {

ScanShape scan_shape(ir::Op op, const ir::Attributes& attributes, const runtime::Array& input,
                     const runtime::Array& output) {
  const std::string name(ir::name(op));
  const Shape& dims = input.shape;
  const std::int64_t axis = attributes.axis;
  if (!ir::is_scan(op) || axis < 0 || axis >= dims.rank() || output.dtype != input.dtype || !(output.shape == dims))
    throw InternalError(name, "scan kernel called with a bad op, axis or output", std::string());
  if ((op == ir::Op::cumsum || op == ir::Op::cumprod) && input.dtype == DType::boolean)
    throw DTypeError(name, "does not accept bool operands (the api layer counts them in i32)", std::string());
  ScanShape shape;
  shape.length = dims[static_cast<int>(axis)];
  for (int i = 0; i < axis; ++i) shape.outer *= dims[i];
  for (int i = static_cast<int>(axis) + 1; i < dims.rank(); ++i) shape.inner *= dims[i];
  shape.exclusive = attributes.exclusive;
  shape.reverse = attributes.reverse;
  return shape;
}

}  // namespace kiln::kernels
