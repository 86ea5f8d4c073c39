#include "compiler/buffer_assignment.h"

#include <algorithm>

namespace kiln::compiler {
namespace {

constexpr std::int64_t alignment = 64;

struct Interval {
  ir::ValueId value;
  std::int64_t bytes;
  int first, last;  // kernel indices: written by `first`, last read by `last`
};

}  // namespace

BufferAssignment assign_buffers(const ir::Graph& graph, const FusionPlan& plan) {
  BufferAssignment assignment;
  assignment.arena_offset.assign(static_cast<std::size_t>(graph.size()), -1);
  // A view lives in its operand's buffer: `owner` follows views back to the value whose buffer it is.
  std::vector<ir::ValueId> owner(static_cast<std::size_t>(graph.size()));
  for (ir::ValueId value = 0; value < graph.size(); ++value) owner[static_cast<std::size_t>(value)] = value;
  for (const FusedKernel& kernel : plan.kernels)  // in execution order: an operand's owner is known first
    if (kernel.kind == KernelKind::view)
      owner[static_cast<std::size_t>(kernel.members.front())] =
          owner[static_cast<std::size_t>(graph.node(kernel.members.front()).operands.front())];
  // What is returned -- itself or through a view -- gets a buffer of its own, outside the arena.
  std::vector<bool> is_output(static_cast<std::size_t>(graph.size()), false);
  for (ir::ValueId output : graph.outputs)
    is_output[static_cast<std::size_t>(owner[static_cast<std::size_t>(output)])] = true;

  std::vector<Interval> intervals;
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const FusedKernel& kernel = plan.kernels[k];
    if (!has_generated_code(kernel.kind)) continue;
    for (ir::ValueId value : kernel.outputs) {
      // A placed value lives in the buffer of the value it is placed into (a concat's: not in the arena).
      if (is_output[static_cast<std::size_t>(value)] || placement_of(kernel, value)) continue;
      const ir::Type& type = graph.type(value);
      std::int64_t bytes = type.shape.numel() * static_cast<std::int64_t>(size_of(type.dtype));
      intervals.push_back({value, (bytes + alignment - 1) / alignment * alignment, static_cast<int>(k), static_cast<int>(k)});
    }
  }
  // A value's bytes stay taken until the last read of it or of a view of it.
  for (std::size_t k = 0; k < plan.kernels.size(); ++k)
    for (ir::ValueId input : plan.kernels[k].inputs)
      for (Interval& interval : intervals)
        if (interval.value == owner[static_cast<std::size_t>(input)])
          interval.last = std::max(interval.last, static_cast<int>(k));

  // Largest first, each at the lowest offset clear of every placed interval
  // alive at the same time.
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.value < b.value;
  });
  std::vector<std::pair<Interval, std::int64_t>> placed;
  for (const Interval& interval : intervals) {
    std::vector<std::pair<std::int64_t, std::int64_t>> busy;  // [begin, end) of overlapping lifetimes
    for (const auto& [other, offset] : placed)
      if (other.first <= interval.last && interval.first <= other.last) busy.emplace_back(offset, offset + other.bytes);
    std::sort(busy.begin(), busy.end());
    std::int64_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + interval.bytes <= begin) break;
      offset = std::max(offset, end);
    }
    placed.emplace_back(interval, offset);
    assignment.arena_offset[static_cast<std::size_t>(interval.value)] = offset;
    assignment.arena_bytes = std::max(assignment.arena_bytes, offset + interval.bytes);
  }
  return assignment;
}

std::string print_assignment(const ir::Graph& graph, const BufferAssignment& assignment) {
  std::string text = "arena: " + std::to_string(assignment.arena_bytes) + " bytes per call\n";
  for (ir::ValueId value = 0; value < graph.size(); ++value) {
    std::int64_t offset = assignment.arena_offset[static_cast<std::size_t>(value)];
    if (offset >= 0)
      text += "  %" + std::to_string(value) + " " + graph.type(value).to_string() + " at offset " +
              std::to_string(offset) + "\n";
  }
  return text;
}

runtime::Array output_array(const ir::Graph& graph, const BufferAssignment& assignment, ir::ValueId value,
                            const std::shared_ptr<runtime::Buffer>& arena, Device device) {
  const ir::Type& type = graph.type(value);
  std::int64_t offset = assignment.arena_offset[static_cast<std::size_t>(value)];
  if (offset < 0) return runtime::allocate_array(type.dtype, type.shape, device);
  std::size_t bytes = static_cast<std::size_t>(type.shape.numel()) * size_of(type.dtype);
  return runtime::Array{runtime::Buffer::view(arena, static_cast<std::size_t>(offset), bytes), type.dtype, type.shape};
}

}  // namespace kiln::compiler
