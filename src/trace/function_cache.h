#pragma once
// The per-function cache of concrete functions: one traced graph (and its
// executable) per input signature, built exactly once even when many threads
// call with a new signature at the same moment, plus the function's
// statistics and the warning when it keeps retracing.

#include "exec/executable.h"
#include "ir/graph.h"
#include "trace/capture_guard.h"
#include "trace/signature.h"

#include <kiln/function_options.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::trace {

// One traced signature of a function, ready to run.
struct ConcreteFunction {
  Signature signature;
  ir::Graph traced;                       // canonical layout: arguments, then captures
  std::vector<runtime::Array> captures;   // data of the captured parameters
  std::vector<CaptureGuard> capture_guards;  // the captured tensors as the trace left them
  std::shared_ptr<const exec::Executable> executable;
  bool compiled = false;                  // true: the JIT's; false: the standard executor's
  std::string fallback_reason;            // why the JIT was not used, if it was asked for
  std::vector<std::pair<Stage, std::string>> stages;  // compiler IR text by stage (JIT only)

  // Whether a captured tensor changed since the trace: the graph may hold the wrong one.
  bool captures_changed() const {
    for (const CaptureGuard& guard : capture_guards)
      if (guard.changed()) return true;
    return false;
  }
};

class FunctionCache {
 public:
  FunctionCache(std::string name, std::string location, int retrace_warning_limit);

  using Builder = std::function<std::shared_ptr<ConcreteFunction>(const Signature&)>;
  // The concrete function for `signature`; `build` traces and compiles a new
  // one. It runs at most once per signature (other callers with that
  // signature wait), and again when a tensor the signature's trace captured
  // changed (ConcreteFunction::captures_changed); such a retrace counts toward
  // the retrace warning. If it throws, nothing is cached (a changed trace
  // stays replaced by nothing) and the next call tries again.
  std::shared_ptr<const ConcreteFunction> lookup_or_build(const Signature& signature, const Builder& build);

  const std::string& name() const { return name_; }
  const std::string& location() const { return location_; }

  FunctionStatistics statistics() const;
  void record_call(int kernels);
  void record_trace(double seconds);
  void record_compile(double seconds, bool from_disk_cache);
  void record_fallback();

 private:
  struct Entry {
    std::mutex mutex;
    std::shared_ptr<const ConcreteFunction> function;
  };

  // `change`: why it traces again, when it is not a new signature.
  void warn_if_retracing(const Signature& signature, const std::string& change);

  std::string name_;
  std::string location_;
  int retrace_warning_limit_;
  mutable std::mutex mutex_;
  std::unordered_map<Signature, std::shared_ptr<Entry>, SignatureHash> entries_;
  std::optional<Signature> last_traced_;
  bool warned_about_retracing_ = false;
  FunctionStatistics statistics_;
};

}  // namespace kiln::trace
