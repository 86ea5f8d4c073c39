#pragma once
// The JIT compiler's entry point: a traced graph in, an executable made of
// fused, generated kernels out.

#include "compiler/codegen/cpu/runtime_abi.h"
#include "exec/executable.h"
#include "ir/graph.h"

#include <kiln/device.h>
#include <kiln/function_options.h>

#include <memory>
#include <span>
#include <string>
#include <string_view>
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
  std::string module_source;             // what compile() builds: the source stage with the CPU prelude in place
  std::vector<CudaKernel> cuda_kernels;  // in the module's order; none on the CPU
};

// Throws as compile() does for a graph that cannot be compiled, and
// kiln::CompileError for a CUDA device in a build without CUDA.
// KILN_DUMP_TO writes the stages, as for compile().
LoweredFunction lower(const ir::Graph& graph, Device device = Device::cpu());

// Compiles `graph` (canonical layout, as traced) for `device`, where its
// inputs live. Throws kiln::CompileError naming the op and its source location
// when the graph cannot be compiled.
CompiledFunction compile(const ir::Graph& graph, Device device = Device::cpu());

// ---- Ahead-of-time export (kiln::export_function, src/api/export.cpp) ----

// What a program builds in place of the JIT's module: the CPU source compile() would build for `traced`, the
// flags it would build it with (less those making a shared object), and what load_exported checks.
struct ExportedSource {
  // The generated modules: the function's own, then, depth first and node by node, each control node's (lowered as
  // compile() lowers them): a loop's step with its driver, then the step's own control nodes' and a while_loop's
  // condition; a branch's regions, each followed by its own control nodes'.
  std::vector<std::string> modules;
  std::string digest;                                 // SHA-256 of the modules, 64 hex digits
  std::vector<std::string> flags;                     // compile_flags() for an object of a static library
  // Per kernel of the modules' plans, module after module: whether it has an entry point, and which module it is in;
  // a loop's step (a module whose loop runs whole, compiled_loop.h) adds its driver after its kernels (`driver`).
  std::vector<bool> generated;
  std::vector<std::size_t> module_of_kernel;
  std::vector<bool> driver;
  int kernels_per_call = 0;                           // as the JIT's executable reports them (the function's own)
  std::vector<std::pair<Stage, std::string>> stages;  // optimized, fused, source (the function's own)
};
// Throws as compile() does for a graph that cannot be compiled (kiln::CompileError naming the op and its line).
ExportedSource export_source(const ir::Graph& traced);

// The executable of an exported function: `traced` lowered again by this library, which must give the modules
// exported (their SHA-256 `digest`), else a kiln::CompileError (op `name`): the program links another kiln than
// the one that exported it. `entries` are the program's compiled kernels in ExportedSource's order (null for
// library kernels). No compiler, disk cache or tracing is involved.
std::unique_ptr<exec::Executable> load_exported(const ir::Graph& traced, std::string_view digest,
                                                std::span<const kiln_kernel_entry> entries, const std::string& name);

}  // namespace kiln::compiler
