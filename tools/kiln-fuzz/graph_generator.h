#pragma once
// Random valid graphs: op chains over every op of the op table except host
// ops, with broadcasting, reductions over random axes (with and without
// keepdims), matmuls (transposed, batched, broadcast batches, every numeric
// dtype), every shape op (slices with negative and >1 steps), every dtype (bf16 and f16 with --half-precision),
// rank 0..4, odd and zero-size shapes, and constants with special values
// (+-0, +-inf, NaN, subnormals, integer extremes); and control flow (cond,
// while_loop, scan_loop and their result nodes) whose regions hold random ops
// of their own, nested up to two deep.

#include "fuzz_case.h"
#include "random_source.h"

#include <cstdint>
#include <map>
#include <string>

namespace kiln::fuzz {

struct GeneratorOptions {
  int max_nodes = 12;                 // non-source nodes per graph (at least 1)
  std::int64_t max_elements = 4096;   // per value
  bool half_precision = false;        // bf16 and f16 values too (kiln-fuzz --half-precision)
  // cond, while_loop and scan_loop motifs. Off where the check cannot run control flow (kiln-fuzz's main.cpp):
  // the CUDA JIT's emulation refuses it.
  bool control_flow = true;
  // while_loop among them: off in gradient mode, whose reverse-mode derivative a while_loop has not (as in JAX).
  bool while_loops = true;
};

// Statistics over generated graphs (for --verbose).
struct GeneratorStatistics {
  std::map<std::string, std::int64_t> ops;  // nodes per op
  std::int64_t rejected = 0;                // attempts whose node did not type-check
  std::int64_t hazards_replaced = 0;        // values replaced by parameters (see hazards.h)
};

// Graph number `index` of the run seeded with `seed`: the same graph for the
// same (seed, index, options), however other graphs were drawn. The graph is
// verified and canonical, its outputs are at least every computed value
// nothing else uses; its inputs are random_input's,
// and it has no hazards (hazards.h).
FuzzCase generate_graph(std::uint64_t seed, std::uint64_t index, const GeneratorOptions& options,
                        GeneratorStatistics* statistics = nullptr);

}  // namespace kiln::fuzz
