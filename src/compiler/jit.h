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

// Compiles `graph` (canonical layout, as traced) for `device`, where its
// inputs live. Throws kiln::CompileError naming the op and its source location
// when the graph cannot be compiled.
CompiledFunction compile(const ir::Graph& graph, Device device = Device::cpu());

}  // namespace kiln::compiler
