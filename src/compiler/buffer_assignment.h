#pragma once
// Buffer assignment: where each value that crosses kernels lives during a
// call. Values returned to the caller get their own buffers; intermediate
// values share one arena allocated per call, placed by liveness so values
// that are never alive at the same time reuse the same bytes.

#include "compiler/fusion.h"
#include "ir/graph.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::compiler {

struct BufferAssignment {
  std::int64_t arena_bytes = 0;
  // Per value id: its offset in the arena, or -1 when it is not there
  // (parameters, graph outputs, library kernels' results, fused values).
  std::vector<std::int64_t> arena_offset;
};

BufferAssignment assign_buffers(const ir::Graph& graph, const FusionPlan& plan);

std::string print_assignment(const ir::Graph& graph, const BufferAssignment& assignment);

}  // namespace kiln::compiler
