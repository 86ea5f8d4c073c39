#include "trace/trace_context.h"

#include <kiln/error.h>

namespace kiln::trace {
namespace {
thread_local TraceContext* active_context = nullptr;
}

TraceContext::TraceContext(std::string name, Device device) : device_(device) { graph_.name = std::move(name); }

ir::ValueId TraceContext::add_argument(const ir::Type& type) {
  if (!captures_.empty())
    throw InternalError("trace", "arguments must be added before anything is captured", std::string());
  argument_count_ += 1;
  return graph_.add_parameter(type);
}

ir::ValueId TraceContext::capture(const runtime::Array& array, const std::shared_ptr<TensorIdentity>& identity) {
  if (identity) {
    identity->captured.store(true, std::memory_order_release);
    captured_identities_.insert(identity);
  }
  ir::Type type{array.dtype, array.shape};
  auto& values = captured_values_[array.buffer.get()];
  for (ir::ValueId value : values)
    if (graph_.type(value) == type) return value;
  ir::ValueId value = graph_.add_parameter(type);
  values.push_back(value);
  captures_.push_back(array);
  return value;
}

std::vector<CaptureGuard> TraceContext::capture_guards() const {
  std::vector<CaptureGuard> guards;
  for (const std::weak_ptr<TensorIdentity>& weak : captured_identities_)
    if (std::shared_ptr<TensorIdentity> identity = weak.lock()) guards.emplace_back(identity);
  return guards;
}

TraceContext* TraceContext::current() { return active_context; }

TraceContext::Activation::Activation(TraceContext* context) : previous_(active_context) { active_context = context; }
TraceContext::Activation::~Activation() { active_context = previous_; }

}  // namespace kiln::trace
