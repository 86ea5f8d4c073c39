#pragma once
// The workloads of kiln-bench. Each has inputs, one body traced twice (as a
// standard and as a JIT function), and what it must compute and move, from
// which its floors follow.

#include <kiln/kiln.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::bench {

using Call = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Workload {
  std::string name;
  std::string shape;             // human-readable size, e.g. "2048x2048"
  std::vector<Tensor> inputs;
  Call standard;                 // kiln::function(body)
  Call jit;                      // kiln::function(body, {.jit_compile = true})
  std::function<Call()> fresh_jit;  // a new JIT function each call (for first-call timings)
  std::function<std::string()> traced_ir;     // the standard function's traced IR for these inputs
  std::function<FunctionStatistics()> jit_statistics;
  double flops = 0;              // useful floating-point work (matmul: 2mnk)
  double bytes = 0;              // inputs read once + outputs written once
};

struct WorkloadOptions {
  std::int64_t seed_size = 2048;
  std::int64_t elements = 16 << 20;  // gelu and Adam
  std::int64_t rows = 4096, columns = 4096;  // softmax and layernorm
};

std::vector<std::string> workload_names();
// Builds the workload `name` (one of workload_names()).
Workload make_workload(const std::string& name, const WorkloadOptions& options);

}  // namespace kiln::bench
