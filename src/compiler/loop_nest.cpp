#include "compiler/loop_nest.h"

namespace kiln::compiler {

namespace {

// The dims of `shape` with more than one element, with their axes.
std::vector<std::pair<int, std::int64_t>> non_unit_axes(const Shape& shape) {
  std::vector<std::pair<int, std::int64_t>> axes;
  for (int axis = 0; axis < shape.rank(); ++axis)
    if (shape[axis] != 1) axes.emplace_back(axis, shape[axis]);
  return axes;
}

// The kept axes of `nest` with more than one element.
std::vector<std::pair<int, std::int64_t>> kept_non_unit_axes(const LoopNest& nest) {
  std::vector<std::pair<int, std::int64_t>> axes;
  for (auto [axis, size] : non_unit_axes(nest.space))
    if (!nest.is_reduced(axis)) axes.emplace_back(axis, size);
  return axes;
}

}  // namespace

std::int64_t LoopNest::kept_count() const {
  std::int64_t count = 1;
  for (int axis = 0; axis < space.rank(); ++axis)
    if (!is_reduced(axis)) count *= space[axis];
  return count;
}

bool LoopNest::is_kept_shape(const Shape& shape) const {
  const auto kept = kept_non_unit_axes(*this), own = non_unit_axes(shape);
  if (kept.size() != own.size()) return false;
  for (std::size_t i = 0; i < kept.size(); ++i)
    if (kept[i].second != own[i].second) return false;
  return true;
}

IndexMap LoopNest::kept_map(const Shape& shape) const {
  IndexMap map(static_cast<std::size_t>(shape.rank()));
  const auto kept = kept_non_unit_axes(*this), own = non_unit_axes(shape);
  for (std::size_t i = 0; i < own.size() && i < kept.size(); ++i)
    map[static_cast<std::size_t>(own[i].first)] = {kept[i].first, 1, 0};
  return map;
}

IndexMap LoopNest::broadcast_map(const Shape& shape) const {
  IndexMap map(static_cast<std::size_t>(shape.rank()));
  const int offset = space.rank() - shape.rank();
  for (int axis = 0; axis < shape.rank(); ++axis)
    if (shape[axis] != 1) map[static_cast<std::size_t>(axis)] = {axis + offset, 1, 0};
  return map;
}

IndexMap operand_map(const ir::Graph& graph, const ir::Node& user, std::size_t operand, const IndexMap& user_map) {
  const Shape& operand_shape = graph.type(user.operands[operand]).shape;
  const Shape& user_shape = user.type.shape;
  IndexMap map(static_cast<std::size_t>(operand_shape.rank()));
  switch (user.op) {
    case ir::Op::transpose:
      for (std::size_t axis = 0; axis < user.attributes.axes.size(); ++axis)
        map[static_cast<std::size_t>(user.attributes.axes[axis])] = user_map[axis];
      return map;
    case ir::Op::slice:
      for (std::size_t axis = 0; axis < map.size(); ++axis) {
        const AxisMap& entry = user_map[axis];
        const std::int64_t step = user.attributes.step[axis];
        map[axis] = {entry.source, step * entry.scale, user.attributes.start[axis] + step * entry.offset};
      }
      return map;
    case ir::Op::reshape:
    case ir::Op::expand_dims:
    case ir::Op::squeeze: {
      // Only size-1 axes come and go: pair the other axes in order.
      std::size_t user_axis = 0;
      for (std::size_t axis = 0; axis < map.size(); ++axis) {
        if (operand_shape[static_cast<int>(axis)] == 1) continue;
        while (user_shape[static_cast<int>(user_axis)] == 1) ++user_axis;
        map[axis] = user_map[user_axis++];
      }
      return map;
    }
    default: {
      // Elementwise ops and broadcast_to: NumPy broadcasting.
      const int offset = user_shape.rank() - operand_shape.rank();
      for (int axis = 0; axis < operand_shape.rank(); ++axis)
        if (operand_shape[axis] != 1)
          map[static_cast<std::size_t>(axis)] = user_map[static_cast<std::size_t>(axis + offset)];
      return map;
    }
  }
}

IndexMap compose(const IndexMap& outer, const IndexMap& map) {
  IndexMap composed(map.size());
  for (std::size_t axis = 0; axis < map.size(); ++axis) {
    const AxisMap& entry = map[axis];
    if (entry.source < 0) {
      composed[axis] = entry;
      continue;
    }
    const AxisMap& through = outer[static_cast<std::size_t>(entry.source)];
    composed[axis] = {through.source, entry.scale * through.scale, entry.offset + entry.scale * through.offset};
    if (composed[axis].scale == 0) composed[axis].source = -1;
  }
  return composed;
}

bool depends_only_on(const IndexMap& map, const std::vector<bool>& axes) {
  for (const AxisMap& entry : map)
    if (entry.source >= 0 && entry.scale != 0 && !axes[static_cast<std::size_t>(entry.source)]) return false;
  return true;
}

std::string to_string(const IndexMap& map) {
  std::string text = "[";
  for (std::size_t axis = 0; axis < map.size(); ++axis) {
    const AxisMap& entry = map[axis];
    std::string term;
    if (entry.source >= 0 && entry.scale != 0) {
      const std::string coordinate = "c" + std::to_string(entry.source);
      term = entry.scale == 1    ? coordinate
             : entry.scale == -1 ? "-" + coordinate
                                 : std::to_string(entry.scale) + " " + coordinate;
    }
    if (term.empty())
      term = std::to_string(entry.offset);
    else if (entry.offset != 0)
      term = std::to_string(entry.offset) + (entry.scale < 0 ? " - " + term.substr(1) : " + " + term);
    text += (axis ? ", " : "") + term;
  }
  return text + "]";
}

}  // namespace kiln::compiler
