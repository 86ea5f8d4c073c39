#pragma once
// The graph being traced. While a kiln::function traces its callable, one
// TraceContext is active on that thread: every op records a node into it,
// and concrete tensors used by the callable (captured from the enclosing
// scope) become extra parameters of the graph, holding a reference to their
// data rather than copying it into the IR.

#include "ir/graph.h"
#include "runtime/buffer.h"
#include "trace/capture_guard.h"
#include "trace/differentiation_marks.h"

#include <kiln/device.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace kiln::trace {

class TraceContext {
 public:
  TraceContext(std::string name, Device device);
  // A region's trace (a branch or loop body of cond, while_loop, scan) inside `parent`'s: what it uses of the
  // traces around it (their values, and concrete tensors, captured by the outermost) becomes its parameters after
  // its arguments, and outer_values() says which value of `parent` each stands for.
  TraceContext(std::string name, std::shared_ptr<TraceContext> parent);

  ir::Graph& graph() { return graph_; }
  Device device() const { return device_; }

  // A parameter for the next argument of the call.
  ir::ValueId add_argument(const ir::Type& type);
  // The parameter standing for a concrete array used inside the trace; the
  // same array captured twice gives the same parameter. `identity` (if any)
  // is the identity of the tensor holding it, to be guarded
  // (capture_guards()); none for a tensor made during this trace.
  ir::ValueId capture(const runtime::Array& array, const std::shared_ptr<TensorIdentity>& identity = {});
  // The captured arrays, in parameter order after the arguments.
  const std::vector<runtime::Array>& captures() const { return captures_; }
  // Guards on the captured tensors still alive, made when called: at the end
  // of the trace, so that assignments made while tracing do not count.
  std::vector<CaptureGuard> capture_guards() const;
  int argument_count() const { return argument_count_; }

  // The value standing in this trace for `value` of `owner`'s graph: `value` itself if `owner` is this trace, a
  // parameter importing it if `owner` encloses this region (through every region between), -1 otherwise.
  ir::ValueId value_of(const TraceContext* owner, ir::ValueId value);
  // Whether `context` is this trace or one enclosing it.
  bool is_within(const TraceContext* context) const;
  const TraceContext* parent() const { return parent_.get(); }
  // A region's trace: per parameter after the arguments, the value of the parent's graph it stands for.
  const std::vector<ir::ValueId>& outer_values() const { return outer_values_; }

  ir::ValueId add_node(ir::Node node) { return graph_.add(std::move(node)); }

  // What differentiating parts of this trace must know beyond the graph (kiln::stop_gradient, kiln::custom_vjp).
  DifferentiationMarks& differentiation_marks() { return differentiation_marks_; }

  // Once finished, tensors of this trace that escaped it are unusable. The marks go (their backward functions may
  // hold tensors of this trace, which would keep it alive).
  void finish() {
    finished_ = true;
    differentiation_marks_ = {};
  }
  bool finished() const { return finished_; }

  // The context active on this thread, or null outside tracing.
  static TraceContext* current();

  // Makes a context current for the lifetime of the Activation.
  class Activation {
   public:
    explicit Activation(TraceContext* context);
    ~Activation();
    Activation(const Activation&) = delete;
    Activation& operator=(const Activation&) = delete;

   private:
    TraceContext* previous_;
  };

 private:
  // A region's parameter for `value` of the parent's graph (one per value).
  ir::ValueId import(ir::ValueId value);

  ir::Graph graph_;
  Device device_;
  std::shared_ptr<TraceContext> parent_;  // a region's enclosing trace
  std::vector<ir::ValueId> outer_values_;
  std::map<ir::ValueId, ir::ValueId> imported_;  // a region's: parent's value -> its parameter
  int argument_count_ = 0;
  std::vector<runtime::Array> captures_;
  std::map<const runtime::Buffer*, std::vector<ir::ValueId>> captured_values_;
  // Held weakly: tracing keeps no captured tensor alive.
  std::set<std::weak_ptr<TensorIdentity>, std::owner_less<>> captured_identities_;
  DifferentiationMarks differentiation_marks_;
  bool finished_ = false;
};

}  // namespace kiln::trace
