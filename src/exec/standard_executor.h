#pragma once
// The standard executor: runs a graph op by op with the standard kernels
// (like a plain tf.function), freeing each intermediate buffer right after
// its last use. Nodes no output depends on are skipped.

#include "exec/executable.h"
#include "ir/graph.h"

#include <memory>

namespace kiln::exec {

std::unique_ptr<Executable> make_standard_executable(ir::Graph graph);

// Runs `graph` once on `inputs` (convenience for tests and eager paths).
std::vector<runtime::Array> run_standard(const ir::Graph& graph, std::span<const runtime::Array> inputs);

}  // namespace kiln::exec
