#include "trace/trace_context.h"

#include <kiln/error.h>

namespace kiln::trace {
namespace {
thread_local TraceContext* active_context = nullptr;
}

TraceContext::TraceContext(std::string name, Device device) : device_(device) { graph_.name = std::move(name); }

TraceContext::TraceContext(std::string name, std::shared_ptr<TraceContext> parent)
    : device_(parent->device()), parent_(std::move(parent)) {
  graph_.name = std::move(name);
}

ir::ValueId TraceContext::value_of(const TraceContext* owner, ir::ValueId value) {
  if (owner == this) return value;
  if (!parent_) return -1;
  const ir::ValueId outer = parent_->value_of(owner, value);
  return outer < 0 ? -1 : import(outer);
}

bool TraceContext::is_within(const TraceContext* context) const {
  for (const TraceContext* enclosing = this; enclosing; enclosing = enclosing->parent_.get())
    if (enclosing == context) return true;
  return false;
}

ir::ValueId TraceContext::import(ir::ValueId value) {
  if (const auto found = imported_.find(value); found != imported_.end()) return found->second;
  const ir::ValueId parameter = graph_.add_parameter(parent_->graph().type(value));
  imported_.emplace(value, parameter);
  outer_values_.push_back(value);
  return parameter;
}

ir::ValueId TraceContext::add_argument(const ir::Type& type) {
  if (!captures_.empty() || !outer_values_.empty())
    throw InternalError("trace", "arguments must be added before anything is captured", std::string());
  argument_count_ += 1;
  return graph_.add_parameter(type);
}

ir::ValueId TraceContext::capture(const runtime::Array& array, const std::shared_ptr<TensorIdentity>& identity) {
  // A region's concrete tensors are the outermost trace's inputs, passed in through each region between.
  if (parent_) return import(parent_->capture(array, identity));
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
