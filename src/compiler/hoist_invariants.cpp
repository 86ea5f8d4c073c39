#include "compiler/hoist_invariants.h"

#include <algorithm>
#include <map>

namespace kiln::compiler {
namespace {

bool may_move(const ir::Node& node) {
  switch (node.op) {
    case ir::Op::parameter:
    case ir::Op::constant:
    case ir::Op::iota:
    case ir::Op::broadcast_to:  // read in place where it is used; moved out, it would be written out whole
    case ir::Op::gather:
    case ir::Op::take_along_axis:
    case ir::Op::scatter_add:
      return false;
    default:
      return !ir::is_control(node.op) && ir::info(node.op).category != ir::OpCategory::host && node.regions.empty();
  }
}

// Per value of `region`, whether it is the same at every step: a capture (a parameter from `first_capture` on),
// a constant or iota, or a movable op of such values.
std::vector<bool> invariant_values(const ir::Graph& region, std::size_t first_capture) {
  std::vector<bool> invariant(static_cast<std::size_t>(region.size()), false);
  for (std::size_t position = first_capture; position < region.parameters.size(); ++position)
    invariant[static_cast<std::size_t>(region.parameters[position])] = true;
  for (ir::ValueId value = 0; value < region.size(); ++value) {
    const ir::Node& node = region.node(value);
    if (node.op == ir::Op::constant || node.op == ir::Op::iota) invariant[static_cast<std::size_t>(value)] = true;
    if (!may_move(node)) continue;
    invariant[static_cast<std::size_t>(value)] =
        std::all_of(node.operands.begin(), node.operands.end(),
                    [&](ir::ValueId operand) { return invariant[static_cast<std::size_t>(operand)]; });
  }
  return invariant;
}

// The invariant values to move: movable ones that a varying value or an output reads.
std::vector<ir::ValueId> frontier(const ir::Graph& region, const std::vector<bool>& invariant) {
  std::vector<bool> read_by_varying(static_cast<std::size_t>(region.size()), false);
  for (ir::ValueId value = 0; value < region.size(); ++value)
    if (!invariant[static_cast<std::size_t>(value)])
      for (ir::ValueId operand : region.node(value).operands) read_by_varying[static_cast<std::size_t>(operand)] = true;
  for (ir::ValueId output : region.outputs) read_by_varying[static_cast<std::size_t>(output)] = true;
  std::vector<ir::ValueId> moved;
  for (ir::ValueId value = 0; value < region.size(); ++value)
    if (invariant[static_cast<std::size_t>(value)] && read_by_varying[static_cast<std::size_t>(value)] &&
        may_move(region.node(value)))
      moved.push_back(value);
  return moved;
}

class Hoisting {
 public:
  explicit Hoisting(const ir::Graph& graph) : old_(graph), new_id_(static_cast<std::size_t>(graph.size()), -1) {
    result_.name = graph.name;
    result_.host_functions = graph.host_functions;
  }

  ir::Graph run() {
    for (ir::ValueId id = 0; id < old_.size(); ++id) {
      ir::Node node = old_.node(id);
      for (ir::ValueId& operand : node.operands) operand = mapped(operand);
      if (node.op == ir::Op::while_loop || node.op == ir::Op::scan_loop) hoist(node);
      new_id_[static_cast<std::size_t>(id)] = result_.add(std::move(node));
    }
    for (ir::ValueId parameter : old_.parameters) result_.parameters.push_back(mapped(parameter));
    for (ir::ValueId output : old_.outputs) result_.outputs.push_back(mapped(output));
    return std::move(result_);
  }

  bool changed() const { return changed_; }

 private:
  ir::ValueId mapped(ir::ValueId old) const { return new_id_[static_cast<std::size_t>(old)]; }

  // Moves each region's frontier out of `loop` (its operands already in the new graph): the moved values are
  // computed before it and become captures of every region (each region takes the same parameters).
  void hoist(ir::Node& loop) {
    const std::size_t first_capture =
        static_cast<std::size_t>(loop.attributes.carry_count + loop.attributes.sequence_count);
    for (std::size_t index = 0; index < loop.regions.size(); ++index) {
      ir::Graph& region = loop.regions[index];
      const std::vector<bool> invariant = invariant_values(region, first_capture);
      const std::vector<ir::ValueId> moved = frontier(region, invariant);
      if (moved.empty()) continue;
      changed_ = true;
      // The region's values, computed in the enclosing graph (its captures are the loop's operands there).
      std::map<ir::ValueId, ir::ValueId> outside;
      for (std::size_t position = first_capture; position < region.parameters.size(); ++position)
        outside[region.parameters[position]] = loop.operands[position];
      // All of them first: replacing a moved value's uses rewires the region, moved values' operands included.
      std::vector<ir::ValueId> computed;
      for (ir::ValueId value : moved) computed.push_back(compute_outside(region, value, outside));
      for (std::size_t position = 0; position < moved.size(); ++position) {
        loop.operands.push_back(computed[position]);
        // A new capture of every region; in this one it stands for the moved value.
        for (std::size_t other = 0; other < loop.regions.size(); ++other) {
          ir::Graph& each = loop.regions[other];
          const ir::ValueId parameter = each.add_parameter(result_.type(computed[position]));
          if (other == index) replace_uses(each, moved[position], parameter);
        }
      }
    }
    for (ir::Graph& region : loop.regions) {
      ir::canonicalize(region);
      ir::remove_dead_nodes(region);
    }
    drop_unused_captures(loop, first_capture);
  }

  // Captures no region reads any more (what only the moved values read) leave the loop's operands and every
  // region's parameters.
  static void drop_unused_captures(ir::Node& loop, std::size_t first_capture) {
    for (std::size_t position = loop.operands.size(); position-- > first_capture;) {
      const bool used = std::any_of(loop.regions.begin(), loop.regions.end(), [&](const ir::Graph& region) {
        return region.use_counts()[static_cast<std::size_t>(region.parameters[position])] > 0;
      });
      if (used) continue;
      for (ir::Graph& region : loop.regions) {
        std::vector<bool> keep(region.nodes.size(), true);
        keep[static_cast<std::size_t>(region.parameters[position])] = false;
        region.parameters.erase(region.parameters.begin() + static_cast<std::ptrdiff_t>(position));
        ir::compact(region, keep);
        ir::canonicalize(region);
      }
      loop.operands.erase(loop.operands.begin() + static_cast<std::ptrdiff_t>(position));
    }
  }

  // `value` of `region` as a node of the new graph, its producers first (memoized in `outside`).
  ir::ValueId compute_outside(const ir::Graph& region, ir::ValueId value, std::map<ir::ValueId, ir::ValueId>& outside) {
    if (const auto found = outside.find(value); found != outside.end()) return found->second;
    ir::Node node = region.node(value);
    for (ir::ValueId& operand : node.operands) operand = compute_outside(region, operand, outside);
    const ir::ValueId added = result_.add(std::move(node));
    outside[value] = added;
    return added;
  }

  // Uses of `value` in `region` (by later nodes and the outputs) read `replacement` instead.
  static void replace_uses(ir::Graph& region, ir::ValueId value, ir::ValueId replacement) {
    for (ir::Node& node : region.nodes)
      for (ir::ValueId& operand : node.operands)
        if (operand == value) operand = replacement;
    for (ir::ValueId& output : region.outputs)
      if (output == value) output = replacement;
  }

  const ir::Graph& old_;
  ir::Graph result_;
  std::vector<ir::ValueId> new_id_;
  bool changed_ = false;
};

}  // namespace

bool hoist_loop_invariants(ir::Graph& graph) {
  const bool any = std::any_of(graph.nodes.begin(), graph.nodes.end(), [](const ir::Node& node) {
    return node.op == ir::Op::while_loop || node.op == ir::Op::scan_loop;
  });
  if (!any) return false;
  Hoisting hoisting(graph);
  ir::Graph rewritten = hoisting.run();
  if (!hoisting.changed()) return false;
  graph = std::move(rewritten);
  return true;
}

}  // namespace kiln::compiler
