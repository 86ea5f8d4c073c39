#pragma once
// The seed article's experiment (the article kiln grew from): tf.function vs
// tf.function(jit_compile=True) on matmul -> z + sin(z) -> relu -> reduce_sum,
// redone with kiln::function, printed the way the article prints it, plus
// medians, the floor and the first-call and memory lines.

#include <kiln/kiln.h>

#include <cstdint>

namespace kiln::bench {

struct SeedOptions {
  std::int64_t size = 8192;  // the article's SIZE
  int runs = 10;             // the article's NUM_RUNS
  Device device = Device::cpu();
};

// Runs the experiment and prints it; returns the process exit status (1 when
// the JIT's result disagrees with the standard executor's).
int run_seed_experiment(const SeedOptions& options);

}  // namespace kiln::bench
