#pragma once
// The workloads of kiln-bench. Each has inputs, one body traced twice (as a
// standard and as a JIT function), and what it must compute and move, from
// which its floors follow. The peers (bench/peers/) run the same bodies in
// TensorFlow, JAX and PyTorch on the inputs kiln-bench saves, so a body
// changed here must be changed there too.

#include "measure.h"

#include <kiln/kiln.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kiln::bench {

using Call = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Workload {
  std::string id;                // unique in a run, e.g. "seed-1024", "gelu"
  std::string name;              // the body: seed, gelu, softmax, layernorm, adam, attention
  std::string shape;             // human-readable size, e.g. "1024x1024"
  std::vector<Tensor> inputs;
  Call standard;                 // kiln::function(body)
  Call jit;                      // kiln::function(body, {.jit_compile = true})
  std::function<Call()> fresh_jit;  // a new JIT function each call (for first-call timings)
  std::function<std::string(Stage)> standard_ir;  // the standard function's IR for these inputs
  std::function<std::string(Stage)> jit_ir;       // the JIT function's IR for these inputs
  std::function<FunctionStatistics()> standard_statistics;
  std::function<FunctionStatistics()> jit_statistics;
  double flops = 0;              // useful floating-point work of the matmuls (2mnk each)
  double bytes = 0;              // inputs read once + outputs written once
  // Workloads with matmuls: OpenBLAS doing the same matmul work alone on the
  // same inputs (the compute floor), and kiln's standard matmuls alone.
  std::function<Timing(int runs)> blas_alone;
  std::function<void()> kiln_matmuls_alone;
  double matmul_output_bytes = 0;  // the largest matmul result, which a fused kernel need not write
};

struct WorkloadOptions {
  std::int64_t elements = 16 << 20;          // gelu and Adam
  std::int64_t rows = 4096, columns = 4096;  // softmax and layernorm
  // attention: Q, K, V f32[batch, heads, sequence, head_size]
  std::int64_t batch = 4, heads = 16, sequence = 512, head_size = 64;
  Device device = Device::cpu();
};

// The suite's workload ids, in order; `big` adds seed-8192.
std::vector<std::string> suite_ids(bool big);
// Builds a workload from its id: seed-<N> (the article's function on two
// N x N matrices), gelu, softmax, layernorm, adam or attention.
Workload make_workload(const std::string& id, const WorkloadOptions& options);

}  // namespace kiln::bench
