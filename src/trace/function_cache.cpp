#include "trace/function_cache.h"

#include "runtime/log.h"

namespace kiln::trace {

FunctionCache::FunctionCache(std::string name, std::string location, int retrace_warning_limit)
    : name_(std::move(name)), location_(std::move(location)), retrace_warning_limit_(retrace_warning_limit) {}

std::shared_ptr<const ConcreteFunction> FunctionCache::lookup_or_build(const Signature& signature,
                                                                       const Builder& build) {
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard lock(mutex_);
    auto& slot = entries_[signature];
    if (!slot) slot = std::make_shared<Entry>();
    entry = slot;
  }
  std::lock_guard entry_lock(entry->mutex);
  if (!entry->function || entry->function->captures_changed()) {
    warn_if_retracing(signature, entry->function ? "a tensor it captured was reassigned or released" : "");
    entry->function = nullptr;  // never reused once stale, even if the new trace fails
    entry->function = build(signature);
  }
  return entry->function;
}

void FunctionCache::warn_if_retracing(const Signature& signature, const std::string& change) {
  std::string message;
  {
    std::lock_guard lock(mutex_);
    if (last_traced_ && statistics_.traces >= retrace_warning_limit_ && !warned_about_retracing_) {
      warned_about_retracing_ = true;
      message = "kiln::function '" + name_ + "' (defined at " + location_ + ") is tracing ";
      if (change.empty()) {
        const SignatureChange changed = describe_change(*last_traced_, signature);
        message += "its " + std::to_string(statistics_.traces + 1) + "th input signature: " + changed.text;
        if (changed.of_static_argument)
          message +=
              ". Every new value of a static (non-tensor) argument traces (and with jit_compile, compiles) again; "
              "pass a value that changes from call to call as a tensor (kiln::full({}, value)) instead.";
        else
          message +=
              ". Every new shape or dtype traces (and with jit_compile, compiles) again; pass inputs of a few "
              "fixed shapes to avoid it.";
      } else {
        message += "for the " + std::to_string(statistics_.traces + 1) + "th time, for inputs " +
                   signature.to_string() + ": " + change +
                   " since its last trace. A captured tensor is part of the trace (and with jit_compile, of the "
                   "compiled code's inputs); pass a tensor that changes as an argument instead.";
      }
    }
    last_traced_ = signature;
  }
  if (!message.empty()) runtime::warn(message);
}

FunctionStatistics FunctionCache::statistics() const {
  std::lock_guard lock(mutex_);
  return statistics_;
}

void FunctionCache::record_call(int kernels) {
  std::lock_guard lock(mutex_);
  statistics_.calls += 1;
  statistics_.kernels_per_call = kernels;
}

void FunctionCache::record_trace(double seconds) {
  std::lock_guard lock(mutex_);
  statistics_.traces += 1;
  statistics_.trace_seconds += seconds;
}

void FunctionCache::record_compile(double seconds, bool from_disk_cache) {
  std::lock_guard lock(mutex_);
  (from_disk_cache ? statistics_.cache_hits : statistics_.compiles) += 1;
  statistics_.compile_seconds += seconds;
}

void FunctionCache::record_fallback() {
  std::lock_guard lock(mutex_);
  statistics_.fallbacks += 1;
}

}  // namespace kiln::trace
