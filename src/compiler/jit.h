#pragma once
// The JIT compiler's entry point: a traced graph in, an executable made of
// fused, generated kernels out.

#include "exec/executable.h"
#include "ir/graph.h"

#include <kiln/device.h>
#include <kiln/function_options.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln::compiler {

struct CompiledFunction {
  std::shared_ptr<const exec::Executable> executable;
  std::vector<std::pair<Stage, std::string>> stages;  // IR text of optimized, fused, source
  bool from_disk_cache = false;
};

// A graph lowered for one device as compile() would lower it, without building
// anything: the texts of its stages, and on CUDA the generated kernels' entry
// points. Needs no C++ compiler, no NVRTC and no GPU (kiln-dump shows it).
struct LoweredFunction {
  struct CudaKernel {
    std::string function;  // kiln_kernel_<k>, or its _vector variant
    int threads = 0;       // per block, as launched (its __launch_bounds__)
  };
  std::vector<std::pair<Stage, std::string>> stages;  // optimized, fused, source
  std::vector<CudaKernel> cuda_kernels;               // in the module's order; none on the CPU
};

// Throws as compile() does for a graph that cannot be compiled, and
// kiln::CompileError for a CUDA device in a build without CUDA.
// KILN_DUMP_TO writes the stages, as for compile().
LoweredFunction lower(const ir::Graph& graph, Device device = Device::cpu());

// Compiles `graph` (canonical layout, as traced) for `device`, where its
// inputs live. Throws kiln::CompileError naming the op and its source location
// when the graph cannot be compiled.
CompiledFunction compile(const ir::Graph& graph, Device device = Device::cpu());

}  // namespace kiln::compiler
