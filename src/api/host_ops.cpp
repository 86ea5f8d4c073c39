// The two ops the JIT can never compile: host_call and nonzero.

#include "api/dispatch.h"
#include "api/tensor_impl.h"
#include "kernels/kernels.h"

#include <kiln/error.h>
#include <kiln/ops.h>

namespace kiln {
namespace {

// Wraps a user callback for the executor: arrays in, the checked array out.
class UserHostFunction final : public ir::HostFunction {
 public:
  UserHostFunction(HostCallback callback, ir::Type type, std::string location)
      : callback_(std::move(callback)), type_(std::move(type)), location_(std::move(location)) {}

  runtime::Array call(std::span<const runtime::Array> inputs) const override {
    std::vector<Tensor> tensors;
    for (const runtime::Array& input : inputs) tensors.push_back(detail::make_tensor(input));
    Tensor result = callback_(tensors);
    if (!result.defined() || result.is_traced())
      throw ValueError("host_call", "the callback must return a concrete tensor", location_);
    if (result.dtype() != type_.dtype || !(result.shape() == type_.shape))
      throw ValueError("host_call",
                       "the callback returned " + std::string(to_string(result.dtype())) + result.shape().to_string() +
                           " but was declared to return " + type_.to_string(),
                       location_);
    return result.impl().array;
  }

 private:
  HostCallback callback_;
  ir::Type type_;
  std::string location_;
};

}  // namespace

Tensor host_call(HostCallback callback, const std::vector<Tensor>& inputs, DType dtype, const Shape& shape,
                 Location location) {
  if (!callback) throw ValueError("host_call", "the callback is empty", location);
  if (!shape.is_static()) throw ShapeError("host_call", "the declared shape must be static", location);
  ir::Type type{dtype, shape};
  auto function = std::make_shared<UserHostFunction>(std::move(callback), type, to_string(location));
  if (trace::TraceContext* context = trace::TraceContext::current()) {
    ir::Attributes attributes;
    attributes.index = static_cast<std::int64_t>(context->graph().host_functions.size());
    context->graph().host_functions.push_back(function);
    return detail::apply(ir::Op::host_call, inputs, attributes, location, type);
  }
  std::vector<runtime::Array> arrays;
  for (const Tensor& input : inputs) arrays.push_back(detail::concrete_array(input, "host_call", location));
  return detail::make_tensor(function->call(arrays));
}

Tensor nonzero(const Tensor& x, Location location) { return detail::apply(ir::Op::nonzero, {x}, {}, location); }

}  // namespace kiln
