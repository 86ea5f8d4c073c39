// Concats read piecewise (fusion.h): a concat whose readers are loop kernels is inlined into each of them, and the
// kernel runs its space as boxes (plan.h's SpaceBox) cut where the concat passes from one operand to the next.
// Within a box every read of the concat is a read of one operand, at the concat's map moved back by where that
// operand starts, so its producers fuse into the box as into any loop kernel, and nothing is written for the
// concat. relu(concat(a * 2, b + 1)) is one kernel of two boxes reading a and b; the rotation of rotary position
// embeddings, q * cos + concat(-x2, x1) * sin, one kernel of two boxes reading q, cos and sin once.

#include "compiler/fusion_scheduler.h"

#include <algorithm>
#include <cstdlib>

namespace kiln::compiler {
namespace {

// Each box is a loop nest of its own in the generated code (on the CPU a function and a parallel loop): past this
// many, a kernel of many concats (a tile() of many copies) is better off with its concats written by their kernels.
constexpr std::size_t max_boxes = 16;

}  // namespace

bool Scheduler::read_piecewise(ir::ValueId id, const std::set<int>& consumer_groups) {
  const ir::Node& node = graph_.node(id);
  // A padding is read in place by masked loads instead (read_through_padding), or not at all: its operand under
  // it is in memory.
  if (!capabilities_.concat_pieces || node.op != ir::Op::concat || is_output_[index(id)] || consumer_groups.empty() ||
      read_from_memory(id) || padding_of(graph_, id))
    return false;
  for (int each : consumer_groups) {
    if (each < 0 || group(each).kind != KernelKind::loop) return false;
    const std::vector<FusionDecision>& decisions = group(each).decisions;
    const bool strips = std::any_of(decisions.begin(), decisions.end(), [](const FusionDecision& decision) {
      return decision.reason == Reason::transposed_by_strips;
    });
    if (strips) return false;  // tiles of the whole space (transposed_strips.cpp), not of boxes
  }
  inlined_[index(id)] = piecewise_[index(id)] = true;
  std::vector<std::size_t> box_counts;
  for (int each : consumer_groups) {
    const std::optional<std::vector<SpaceBox>> cut = boxes(each);
    if (!cut) {
      inlined_[index(id)] = piecewise_[index(id)] = false;
      return false;
    }
    box_counts.push_back(cut->size());
  }
  std::size_t k = 0;
  for (int each : consumer_groups)
    group(each).decisions.push_back({.reason = Reason::read_piecewise,
                                     .subject = id,
                                     .numbers = {node.attributes.axis, static_cast<std::int64_t>(node.operands.size()),
                                                 static_cast<std::int64_t>(box_counts[k++])}});
  return true;
}

std::set<ir::ValueId> Scheduler::piecewise_concats(int group_index) const {
  std::set<ir::ValueId> concats = inlined_concats(group_index);
  std::erase_if(concats, [&](ir::ValueId concat) { return !piecewise_[index(concat)]; });
  return concats;
}

std::optional<std::vector<SpaceBox>> Scheduler::boxes(int group_index) const {
  const Group& reader = group(group_index);
  const Shape& space = reader.nest.space;
  const auto rank = static_cast<std::size_t>(space.rank());
  // Per space axis, the coordinates where a box begins.
  std::vector<std::set<std::int64_t>> cuts(rank);
  for (std::size_t axis = 0; axis < rank; ++axis) cuts[axis].insert(0);
  for (ir::ValueId concat : piecewise_concats(group_index)) {
    const ir::Node& node = graph_.node(concat);
    const auto axis = static_cast<std::size_t>(node.attributes.axis);
    for (const IndexMap& map : reads_of(group_index, reader.kind, reader.nest, concat)) {
      const AxisMap& along = map[axis];
      if (along.source < 0 || along.scale == 0) continue;   // one coordinate: one operand everywhere
      if (std::abs(along.scale) != 1) return std::nullopt;  // a strided read alternates operands within a box
      const auto source = static_cast<std::size_t>(along.source);
      std::int64_t start = 0;
      for (std::size_t operand = 0; operand + 1 < node.operands.size(); ++operand) {
        start += graph_.type(node.operands[operand]).shape[static_cast<int>(axis)];
        // The first coordinate c of the space axis at which offset + scale * c lies at or past `start` (scale 1),
        // or before it (scale -1).
        const std::int64_t cut = along.scale > 0 ? start - along.offset : along.offset - start + 1;
        if (cut > 0 && cut < space[static_cast<int>(source)]) cuts[source].insert(cut);
      }
    }
  }
  std::size_t count = 1;
  for (const std::set<std::int64_t>& axis_cuts : cuts) count *= axis_cuts.size();
  if (count > max_boxes) return std::nullopt;
  // Boxes in row-major order of their origins: the product of each axis's intervals.
  std::vector<SpaceBox> result{{std::vector<std::int64_t>(rank, 0), space}};
  for (std::size_t axis = 0; axis < rank; ++axis) {
    if (cuts[axis].size() == 1) continue;
    std::vector<std::int64_t> begins(cuts[axis].begin(), cuts[axis].end());
    std::vector<SpaceBox> split;
    for (const SpaceBox& box : result)
      for (std::size_t interval = 0; interval < begins.size(); ++interval) {
        SpaceBox part = box;
        const std::int64_t end = interval + 1 < begins.size() ? begins[interval + 1] : space[static_cast<int>(axis)];
        part.origin[axis] = begins[interval];
        part.shape[static_cast<int>(axis)] = end - begins[interval];
        split.push_back(std::move(part));
      }
    result = std::move(split);
  }
  return result;
}

std::int64_t Scheduler::computed_elements(ir::ValueId id) const {
  const std::vector<ir::ValueId>& users = users_[index(id)];
  const bool pieces_only = !users.empty() && std::all_of(users.begin(), users.end(),
                                                         [&](ir::ValueId user) { return piecewise_[index(user)]; });
  if (!pieces_only) return graph_.type(id).shape.numel();
  std::int64_t elements = 0;
  for (ir::ValueId user : users) elements = std::max(elements, graph_.type(user).shape.numel());
  return elements;
}

}  // namespace kiln::compiler
