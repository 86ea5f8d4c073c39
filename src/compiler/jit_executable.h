#pragma once
// What a JIT-compiled function runs: the kernels of its fusion plan in order,
// generated ones through the loaded module, library ones through the
// standard kernels, with intermediate values in one arena per call.

#include "compiler/buffer_assignment.h"
#include "compiler/cache/module_cache.h"
#include "compiler/codegen/cpu/runtime_abi.h"
#include "compiler/compiled_loop.h"
#include "compiler/fusion.h"
#include "exec/executable.h"

#include <memory>
#include <vector>

namespace kiln::compiler {

// Runs node `value` of `graph` with its standard kernel on `device`: its
// operands from `values`, its result stored there. The JIT executables (CPU
// and CUDA) run library kernels this way.
void run_standard_node(const ir::Graph& graph, ir::ValueId value, std::vector<runtime::Array>& values, Device device);

// Per kernel of `plan`, the values it is the last to read (returned values excepted): what an executable may drop
// once that kernel has run.
std::vector<std::vector<ir::ValueId>> last_reads(const ir::Graph& graph, const FusionPlan& plan);

// Per value, the executables of a control node's regions (compiled on their own), by region; empty elsewhere.
using RegionExecutables = std::vector<std::vector<std::shared_ptr<const exec::Executable>>>;

// The executable running `plan`'s generated kernels from `module` (the JIT's build), and its control nodes through
// `loops` (a loop compiled whole) or else `regions`.
std::unique_ptr<exec::Executable> make_jit_executable(ir::Graph graph, FusionPlan plan, BufferAssignment assignment,
                                                      std::shared_ptr<const LoadedModule> module,
                                                      RegionExecutables regions = {}, CompiledLoops loops = {});
// The same with the generated kernels' entry points given, by plan index (null for kernels without generated
// code): those a program compiled in (an exported function's), kept alive by `code_owner` if anything must.
std::unique_ptr<exec::Executable> make_jit_executable(ir::Graph graph, FusionPlan plan, BufferAssignment assignment,
                                                      std::vector<kiln_kernel_entry> entries,
                                                      std::shared_ptr<const void> code_owner,
                                                      RegionExecutables regions = {}, CompiledLoops loops = {});

}  // namespace kiln::compiler
