#pragma once
// What a traced function runs: the standard executor's plan or a compiled
// module. The trace layer holds one per input signature.

#include "runtime/buffer.h"

#include <span>
#include <vector>

namespace kiln::exec {

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs on concrete inputs (the graph's parameters in order: the call's
  // arguments, then captured tensors) and returns the graph's outputs.
  // Safe to call from several threads at once.
  virtual std::vector<runtime::Array> run(std::span<const runtime::Array> inputs) const = 0;
  // Kernels one run launches (for FunctionStatistics).
  virtual int kernels_per_call() const = 0;
};

}  // namespace kiln::exec
