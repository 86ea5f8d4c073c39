#include "api/tensor_impl.h"
#include "core/half_precision.h"

#include <kiln/error.h>

#if KILN_HAVE_CUDA
#include "runtime/cuda/cuda_context.h"
#endif

#include <cstring>
#include <limits>

namespace kiln {
namespace detail {
namespace {
thread_local std::shared_ptr<trace::TraceContext> active_context;
}

Tensor make_tensor(runtime::Array array) {
  auto impl = std::make_shared<TensorImpl>();
  impl->dtype = array.dtype;
  impl->shape = array.shape;
  impl->device = array.device();
  impl->array = std::move(array);
  impl->made_by_trace = trace::TraceContext::current();
  return Tensor(std::move(impl));
}

Tensor make_traced_tensor(std::shared_ptr<trace::TraceContext> context, ir::ValueId value, Device device) {
  auto impl = std::make_shared<TensorImpl>();
  const ir::Type& type = context->graph().type(value);
  impl->dtype = type.dtype;
  impl->shape = type.shape;
  impl->device = device;
  impl->context = std::move(context);
  impl->value = value;
  return Tensor(std::move(impl));
}

ir::ValueId capture(trace::TraceContext& context, const Tensor& tensor) {
  const std::shared_ptr<const TensorImpl>& impl = tensor.impl_pointer();
  if (impl->made_by_trace && context.is_within(impl->made_by_trace)) return context.capture(impl->array);
  return context.capture(impl->array, std::shared_ptr<trace::TensorIdentity>(impl, &impl->identity));
}

ir::ValueId value_in_trace(trace::TraceContext& context, const Tensor& tensor) {
  if (!tensor.is_traced()) return capture(context, tensor);
  const TensorImpl& impl = tensor.impl();
  if (impl.context->finished()) return -1;
  return context.value_of(impl.context.get(), impl.value);
}

void note_reassignment(const TensorImpl& impl) noexcept { trace::note_reassignment(impl.identity); }

std::shared_ptr<trace::TraceContext> current_context() { return active_context; }

ContextActivation::ContextActivation(std::shared_ptr<trace::TraceContext> context)
    : previous_(active_context), activation_(context.get()) {
  active_context = std::move(context);
}

ContextActivation::~ContextActivation() { active_context = std::move(previous_); }

const runtime::Array& concrete_array(const Tensor& tensor, const char* op, const Location& location) {
  if (!tensor.defined()) throw ValueError(op, "the tensor is undefined (default-constructed)", location);
  if (tensor.is_traced())
    throw ValueError(op,
                     "cannot read the value of traced tensor " + std::string(to_string(tensor.dtype())) +
                         tensor.shape().to_string() +
                         " inside kiln::function: values exist only when the graph runs (return it, or use "
                         "kiln::host_call for host-side work)",
                     location);
  return tensor.impl().array;
}

}  // namespace detail

namespace {

const detail::TensorImpl& checked(const std::shared_ptr<const detail::TensorImpl>& impl, const char* what) {
  if (!impl) throw ValueError(what, "the tensor is undefined (default-constructed)", std::string());
  return *impl;
}

// Element conversion for to_vector/item: float to integer truncates and
// saturates (NaN gives 0) rather than invoking undefined behaviour.
template <class To, class From> To convert_element(From value) {
  if constexpr (std::is_same_v<To, bool>) {
    return value != From(0);
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (value != value) return 0;
    if (value <= static_cast<From>(std::numeric_limits<To>::lowest())) return std::numeric_limits<To>::lowest();
    if (value >= static_cast<From>(std::numeric_limits<To>::max())) return std::numeric_limits<To>::max();
    return static_cast<To>(value);
  } else {
    return static_cast<To>(value);
  }
}

}  // namespace

DType Tensor::dtype() const { return checked(impl_, "Tensor::dtype").dtype; }
const Shape& Tensor::shape() const { return checked(impl_, "Tensor::shape").shape; }
Device Tensor::device() const { return checked(impl_, "Tensor::device").device; }
bool Tensor::is_traced() const { return impl_ && impl_->traced(); }

std::int64_t Tensor::dim(int axis, Location location) const {
  int rank = shape().rank();
  int normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank)
    throw ShapeError("Tensor::dim", "axis " + std::to_string(axis) + " is out of range for shape " +
                                        shape().to_string(), location);
  return shape()[normalized];
}

const void* Tensor::data(Location location) const {
  const runtime::Array& array = detail::concrete_array(*this, "Tensor::data", location);
  if (!array.device().is_cpu())
    throw DeviceError("Tensor::data", "the tensor is on " + array.device().to_string() + "; copy it with .to(Device::cpu())",
                      location);
  return array.raw();
}

template <class T> std::vector<T> Tensor::to_vector(Location location) const {
  const runtime::Array& array = detail::concrete_array(*this, "Tensor::to_vector", location);
  if (!array.device().is_cpu()) return to(Device::cpu(), location).to_vector<T>(location);
  std::vector<T> values(static_cast<std::size_t>(array.shape.numel()));
  if (is_half_precision(array.dtype)) {  // through their exact f32 values
    const auto* bits = array.data<std::uint16_t>();
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = convert_element<T>(half_precision_value(array.dtype, bits[i]));
    return values;
  }
  visit_dtype(array.dtype, [&]<class Stored>() {
    const Stored* data = array.data<Stored>();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = convert_element<T>(data[i]);
  });
  return values;
}

template <class T> T Tensor::item(Location location) const {
  const runtime::Array& array = detail::concrete_array(*this, "Tensor::item", location);
  if (array.shape.numel() != 1)
    throw ValueError("Tensor::item", "needs a tensor with one element, got " + std::string(kiln::to_string(dtype())) +
                                         shape().to_string(), location);
  return to_vector<T>(location)[0];
}

Tensor Tensor::to(Device device, Location location) const {
  const runtime::Array& array = detail::concrete_array(*this, "Tensor::to", location);
  if (array.device() == device) return *this;
#if KILN_HAVE_CUDA  // kiln-cuda: host <-> device and device <-> device copies
  return detail::make_tensor(runtime::cuda::copy_to(array, device, "Tensor::to", kiln::to_string(location)));
#else
  throw DeviceError("Tensor::to", "cannot copy to " + device.to_string() + ": kiln was built without CUDA support",
                    location);
#endif
}

template std::vector<float> Tensor::to_vector<float>(Location) const;
template std::vector<double> Tensor::to_vector<double>(Location) const;
template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>(Location) const;
template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>(Location) const;
template std::vector<std::uint8_t> Tensor::to_vector<std::uint8_t>(Location) const;
template std::vector<bool> Tensor::to_vector<bool>(Location) const;
template float Tensor::item<float>(Location) const;
template double Tensor::item<double>(Location) const;
template std::int32_t Tensor::item<std::int32_t>(Location) const;
template std::int64_t Tensor::item<std::int64_t>(Location) const;
template bool Tensor::item<bool>(Location) const;

}  // namespace kiln
