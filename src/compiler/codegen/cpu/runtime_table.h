#pragma once
// kiln's side of the JIT runtime ABI: the table every generated CPU kernel
// receives (runtime_abi.h).

#include "compiler/codegen/cpu/runtime_abi.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

namespace kiln::compiler::cpu {

// An index out of range that a kernel of one call reported (kiln_runtime::index_out_of_range).
struct IndexOutOfRange {
  std::int64_t node = -1, position = 0, index = 0, extent = 0;
};

// What one call's kernels report: the index out of range at the lowest position, if any.
class CallState {
 public:
  void report(const IndexOutOfRange& found);
  std::optional<IndexOutOfRange> take();
  // Whether anything was reported (a cheap read, for a loop's driver after each iteration).
  bool reported() const { return reported_.load(std::memory_order_relaxed); }

 private:
  std::mutex mutex_;
  std::optional<IndexOutOfRange> first_;
  std::atomic<bool> reported_{false};
};

// The table for one call (the current thread count filled in), reporting into `state`.
kiln_runtime runtime_table(CallState& state);

}  // namespace kiln::compiler::cpu
