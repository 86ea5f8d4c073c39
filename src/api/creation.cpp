#include "api/dispatch.h"
#include "api/tensor_impl.h"

#include <kiln/creation.h>
#include <kiln/error.h>
#include <kiln/ops.h>

#if KILN_HAVE_CUDA
#include "runtime/cuda/cuda_context.h"
#endif

#include <cmath>
#include <cstring>

namespace kiln {
namespace {

void check_static(const Shape& shape, const char* op, const Location& location) {
  if (!shape.is_static()) throw ShapeError(op, "shape " + shape.to_string() + " has an unknown dimension", location);
}

void check_host(Device device, const char* op, const Location& location) {
#if KILN_HAVE_CUDA  // kiln-cuda: any device kiln can reach (a missing GPU or bad index throws here)
  if (device.is_cuda()) runtime::cuda::context(device, op, to_string(location));
#else
  if (!device.is_cpu())
    throw DeviceError(op, "cannot create tensors on " + device.to_string() + ": kiln was built without CUDA support",
                      location);
#endif
}

// The tensor `host` (on the CPU) as a tensor on `device`.
Tensor place_on(Tensor host, Device device, const char* op, const Location& location) {
  if (device.is_cpu()) return host;
#if KILN_HAVE_CUDA  // kiln-cuda
  return detail::make_tensor(runtime::cuda::copy_to(host.impl().array, device, op, to_string(location)));
#else
  (void)op;
  (void)location;
  return host;
#endif
}

// A concrete tensor holding a copy of `count` elements at `data`.
template <class T>
Tensor copy_from(const T* data, const Shape& shape, Device device, const char* op, const Location& location) {
  check_static(shape, op, location);
  check_host(device, op, location);
  constexpr DType dtype = dtype_of<T>;
  runtime::Array array = runtime::allocate_array(dtype, shape, Device::cpu());
  auto count = static_cast<std::size_t>(shape.numel());
  if constexpr (std::is_same_v<T, bool>) {
    auto* out = array.mutable_data<std::uint8_t>();
    for (std::size_t i = 0; i < count; ++i) out[i] = data[i] ? 1 : 0;
  } else if (count > 0) {
    std::memcpy(array.mutable_raw(), data, count * sizeof(T));
  }
  return place_on(detail::make_tensor(std::move(array)), device, op, location);
}

}  // namespace

Tensor zeros(const Shape& shape, DType dtype, Device device, Location location) {
  return full(shape, 0, dtype, device, location);
}

Tensor ones(const Shape& shape, DType dtype, Device device, Location location) {
  return full(shape, 1, dtype, device, location);
}

Tensor full(const Shape& shape, Scalar value, DType dtype, Device device, Location location) {
  // bf16 and f16 are made by a cast (kiln/dtype.h): the value rounded once.
  if (is_half_precision(dtype))
    return detail::cast_to(full(shape, value, DType::f64, device, location), dtype, location);
  check_static(shape, "full", location);
  if (!trace::TraceContext::current()) check_host(device, "full", location);
  return detail::constant(value, dtype, shape, device, location);
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device, Location location) {
  check_static(shape, "from_vector", location);
  if (static_cast<std::int64_t>(values.size()) != shape.numel())
    throw ShapeError("from_vector",
                     std::to_string(values.size()) + " values do not fill shape " + shape.to_string() + " (" +
                         std::to_string(shape.numel()) + " elements)",
                     location);
  if constexpr (std::is_same_v<T, bool>) {
    check_host(device, "from_vector", location);
    std::vector<std::uint8_t> bytes(values.begin(), values.end());
    runtime::Array array = runtime::allocate_array(DType::boolean, shape, Device::cpu());
    if (!bytes.empty()) std::memcpy(array.mutable_raw(), bytes.data(), bytes.size());
    return place_on(detail::make_tensor(std::move(array)), device, "from_vector", location);
  } else {
    return copy_from(values.data(), shape, device, "from_vector", location);
  }
}

template <class T>
Tensor from_vector(const std::vector<T>& values, Location location) {
  return from_vector(values, Shape({static_cast<std::int64_t>(values.size())}), Device::cpu(), location);
}

template <class T>
Tensor from_pointer(const T* data, const Shape& shape, Device device, Location location) {
  if (!data && shape.numel() > 0) throw ValueError("from_pointer", "the data pointer is null", location);
  return copy_from(data, shape, device, "from_pointer", location);
}

Tensor arange(double start, double stop, double step, DType dtype, Device device, Location location) {
  if (step == 0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
    throw ValueError("arange", "start, stop and step must be finite and step nonzero", location);
  check_host(device, "arange", location);
  if (is_half_precision(dtype))
    return detail::cast_to(arange(start, stop, step, DType::f64, device, location), dtype, location);
  double span = std::ceil((stop - start) / step);
  if (span > 1e12) throw ValueError("arange", "too many elements (" + std::to_string(span) + ")", location);
  std::int64_t count = span > 0 ? static_cast<std::int64_t>(span) : 0;
  if (trace::TraceContext::current()) {
    // Inside a traced function, an iota node (as jnp.arange under jax.jit), not a captured input: recomputed
    // wherever it is read, so a mask built from positions (causal attention) is index arithmetic in its
    // consumer's kernel. The values are the eager ones: start + i * step in double, then `dtype`.
    detail::check_created_on_trace_device(device, "arange", "a range", location);
    ir::Attributes along;
    along.axis = 0;
    if (start == 0 && step == 1 && dtype != DType::boolean)
      return detail::apply(ir::Op::iota, {}, along, location, ir::Type{dtype, Shape({count})});
    Tensor positions = detail::apply(ir::Op::iota, {}, along, location, ir::Type{DType::f64, Shape({count})});
    return detail::cast_to(add(mul(positions, step, location), start, location), dtype, location);
  }
  std::vector<double> values(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) values[static_cast<std::size_t>(i)] = start + static_cast<double>(i) * step;
  Tensor result = copy_from(values.data(), Shape({count}), device, "arange", location);
  return detail::cast_to(result, dtype, location);
}

Tensor arange(std::int64_t count, DType dtype, Location location) {
  if (count < 0) throw ValueError("arange", "count " + std::to_string(count) + " is negative", location);
  return arange(0.0, static_cast<double>(count), 1.0, dtype, Device::cpu(), location);
}

Tensor linspace(double start, double stop, std::int64_t count, DType dtype, Device device, Location location) {
  if (count < 0) throw ValueError("linspace", "count " + std::to_string(count) + " is negative", location);
  if (!std::isfinite(start) || !std::isfinite(stop))
    throw ValueError("linspace", "start and stop must be finite", location);
  const Tensor positions = arange(0.0, static_cast<double>(count), 1.0, DType::f64, device, location);
  if (count <= 1) return detail::cast_to(add(positions, start, location), dtype, location);
  const double step = (stop - start) / static_cast<double>(count - 1);
  const Tensor values = add(mul(positions, step, location), start, location);
  // The last value is stop itself, as NumPy makes it: start + (count - 1) * step may round away from it.
  const Tensor exact = where(eq(positions, static_cast<double>(count - 1), location), stop, values, location);
  return detail::cast_to(exact, dtype, location);
}

Tensor eye(std::int64_t rows, std::int64_t columns, std::int64_t diagonal, DType dtype, Device device,
           Location location) {
  if (columns == -1) columns = rows;
  if (rows < 0 || columns < 0)
    throw ValueError("eye",
                     "rows and columns must be >= 0 (columns may be -1: as many as rows), got " + std::to_string(rows) +
                         " and " + std::to_string(columns),
                     location);
  const Tensor row =
      reshape(arange(0.0, static_cast<double>(rows), 1.0, DType::i64, device, location), {rows, 1}, location);
  const Tensor column =
      reshape(arange(0.0, static_cast<double>(columns), 1.0, DType::i64, device, location), {1, columns}, location);
  return detail::cast_to(eq(sub(column, row, location), diagonal, location), dtype, location);
}

#define KILN_INSTANTIATE(T)                                                              \
  template Tensor from_vector<T>(const std::vector<T>&, const Shape&, Device, Location); \
  template Tensor from_vector<T>(const std::vector<T>&, Location);                       \
  template Tensor from_pointer<T>(const T*, const Shape&, Device, Location);
KILN_INSTANTIATE(float)
KILN_INSTANTIATE(double)
KILN_INSTANTIATE(std::int32_t)
KILN_INSTANTIATE(std::int64_t)
KILN_INSTANTIATE(bfloat16)  // raw 16-bit patterns
KILN_INSTANTIATE(float16)
#undef KILN_INSTANTIATE
template Tensor from_vector<bool>(const std::vector<bool>&, const Shape&, Device, Location);
template Tensor from_vector<bool>(const std::vector<bool>&, Location);
template Tensor from_pointer<bool>(const bool*, const Shape&, Device, Location);

}  // namespace kiln
