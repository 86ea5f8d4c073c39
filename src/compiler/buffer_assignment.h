#pragma once
// Buffer assignment: where each value that crosses kernels lives during a
// call. Values returned to the caller get their own buffers; intermediate
// values share one arena allocated per call, placed by liveness so values
// that are never alive at the same time reuse the same bytes.

#include "compiler/fusion.h"
#include "ir/graph.h"
#include "runtime/buffer.h"

#include <cstdint>
#include <memory>
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

// The buffer a kernel writes `value` into during a call: a view of this
// call's `arena` at the value's offset, or, for a value not in the arena, a
// new buffer on `device`.
runtime::Array output_array(const ir::Graph& graph, const BufferAssignment& assignment, ir::ValueId value,
                            const std::shared_ptr<runtime::Buffer>& arena, Device device);

std::string print_assignment(const ir::Graph& graph, const BufferAssignment& assignment);

}  // namespace kiln::compiler
