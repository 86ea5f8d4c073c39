#pragma once
// What a kiln::Tensor holds: either concrete data (a runtime::Array) or, while
// tracing, a value of the graph being traced.

#include "ir/graph.h"
#include "runtime/buffer.h"
#include "trace/trace_context.h"

#include <kiln/tensor.h>

#include <memory>

namespace kiln::detail {

struct TensorImpl {
  DType dtype = DType::f32;
  Shape shape;
  Device device;
  runtime::Array array;                          // concrete tensors
  std::shared_ptr<trace::TraceContext> context;  // traced tensors: their trace ...
  ir::ValueId value = -1;                        // ... and their value in its graph
  // Concrete tensors: what a trace capturing it guards (trace/capture_guard.h) ...
  mutable trace::TensorIdentity identity;
  // ... unless that trace made it (a from_vector inside the callable): made anew by each trace, it is part of it.
  const trace::TraceContext* made_by_trace = nullptr;

  bool traced() const { return context != nullptr; }
};

Tensor make_tensor(runtime::Array array);
Tensor make_traced_tensor(std::shared_ptr<trace::TraceContext> context, ir::ValueId value, Device device);

// What `context` captures of a concrete tensor used in its trace: the
// parameter standing for its data, guarded unless this trace made the tensor.
ir::ValueId capture(trace::TraceContext& context, const Tensor& tensor);

// The value standing for `tensor` in `context`'s graph: a traced tensor's own, or imported where it belongs to a
// trace enclosing this region's; a concrete tensor's capture. -1 for a traced tensor of any other trace (one that
// escaped its function, or a finished one).
ir::ValueId value_in_trace(trace::TraceContext& context, const Tensor& tensor);

// The shared_ptr of the active trace context (null outside tracing).
std::shared_ptr<trace::TraceContext> current_context();
// Makes `context` current for this thread while alive.
class ContextActivation {
 public:
  explicit ContextActivation(std::shared_ptr<trace::TraceContext> context);
  ~ContextActivation();
  ContextActivation(const ContextActivation&) = delete;
  ContextActivation& operator=(const ContextActivation&) = delete;

 private:
  std::shared_ptr<trace::TraceContext> previous_;
  trace::TraceContext::Activation activation_;
};

// The concrete array of a tensor; throws ValueError for a traced or
// undefined tensor, naming `op`.
const runtime::Array& concrete_array(const Tensor& tensor, const char* op, const Location& location);

}  // namespace kiln::detail
