#include "compiler/loop_layout.h"

#include <kiln/error.h>

#include <algorithm>
#include <set>

namespace kiln::compiler {
namespace {

constexpr std::int64_t alignment = 64;

std::int64_t aligned(std::int64_t bytes) { return (bytes + alignment - 1) / alignment * alignment; }

class LayoutBuilder {
 public:
  LayoutBuilder(const ir::Graph& step, const FusionPlan& plan, const BufferAssignment& assignment, LoopLayout& layout)
      : step_(step), plan_(plan), assignment_(assignment), layout_(layout) {
    owner_.resize(static_cast<std::size_t>(step.size()));
    for (ir::ValueId value = 0; value < step.size(); ++value) owner_[index(value)] = value;
    for (const FusedKernel& kernel : plan.kernels)  // in execution order: an operand's owner is known first
      if (kernel.kind == KernelKind::view)
        owner_[index(kernel.members.front())] = owner(step.node(kernel.members.front()).operands.front());
    position_.assign(static_cast<std::size_t>(step.size()), -1);
    for (std::size_t position = 0; position < step.parameters.size(); ++position)
      position_[index(step.parameters[position])] = static_cast<std::int64_t>(position);
    primary_slot_.assign(static_cast<std::size_t>(step.size()), -1);
    workspace_offset_.assign(static_cast<std::size_t>(step.size()), -1);
    workspace_end_ = aligned(assignment.arena_bytes);
    result_nodes_ = ir::result_nodes(step);
  }

  // Everything but the workspace; false with the reason in `why_not` where the driver cannot run the step.
  bool build(std::string& why_not) {
    if (!place_slots(why_not)) return false;
    // What the host's kernels write lives in the workspace, unless it is an output.
    for (const FusedKernel& kernel : plan_.kernels) {
      if (has_generated_code(kernel.kind) || kernel.kind == KernelKind::view) continue;
      const ir::ValueId value = kernel.members.front();
      if (primary_slot_[index(value)] >= 0) continue;
      const ir::Type& type = step_.type(value);
      workspace_offset_[index(value)] = workspace_end_;
      workspace_end_ += aligned(type.shape.numel() * static_cast<std::int64_t>(size_of(type.dtype)));
    }
    for (std::size_t k = 0; k < plan_.kernels.size(); ++k) {
      const FusedKernel& kernel = plan_.kernels[k];
      if (kernel.kind == KernelKind::view || !launches(kernel)) continue;
      // A control node's results are written by its own call.
      if (step_.node(kernel.members.front()).op == ir::Op::result) continue;
      if (!has_generated_code(kernel.kind)) {
        if (!add_host_call(static_cast<int>(k), why_not)) return false;
        continue;
      }
      LoopKernelCall call{.kernel = static_cast<int>(k), .host = false, .buffers = {}};
      for (ir::ValueId input : kernel.inputs) {
        const std::optional<LoopLocation> location = locate(input);
        if (!location) return unplaced(input, why_not);
        call.buffers.push_back(*location);
      }
      for (ir::ValueId output : kernel.outputs) {
        const Placement* placement = placement_of(kernel, output);
        const std::optional<LoopLocation> location = locate(placement ? placement->into : output);
        if (!location) return unplaced(output, why_not);
        call.buffers.push_back(*location);
      }
      layout_.calls.push_back(std::move(call));
    }
    for (std::int64_t carry = 0; carry < layout_.carries; ++carry) decide_in_place(carry);
    return true;
  }

  const std::vector<std::string>& carry_notes() const { return carry_notes_; }
  // Where the driver's own scratch may begin in the workspace.
  std::int64_t workspace_end() const { return workspace_end_; }

 private:
  static std::size_t index(ir::ValueId value) { return static_cast<std::size_t>(value); }
  ir::ValueId owner(ir::ValueId value) const { return owner_[index(value)]; }

  // What each output slot is: a parameter passed on or copied, a copy of an earlier slot, or a value a kernel writes.
  bool place_slots(std::string& why_not) {
    for (std::size_t slot = 0; slot < step_.outputs.size(); ++slot) {
      const ir::ValueId value = owner(step_.outputs[slot]);
      LoopSlot placed;
      placed.type = step_.type(step_.outputs[slot]);
      if (const std::int64_t position = position_[index(value)]; position >= 0) {
        const bool same_carry =
            static_cast<std::int64_t>(slot) < layout_.carries && position == static_cast<std::int64_t>(slot);
        placed.source = same_carry ? LoopSlot::Source::unchanged : LoopSlot::Source::from_parameter;
        placed.from = position;
      } else if (const std::int64_t earlier = primary_slot_[index(value)]; earlier >= 0) {
        placed.source = LoopSlot::Source::from_slot;
        placed.from = earlier;
      } else if (written(value)) {
        primary_slot_[index(value)] = static_cast<std::int64_t>(slot);
      } else {
        why_not = "output " + std::to_string(slot) + " (%" + std::to_string(value) + ") is written by no kernel";
        return false;
      }
      layout_.slots.push_back(std::move(placed));
    }
    return true;
  }

  // A kernel run by kiln: its node's operands (an assembled concat's already in place: none), then its result; a
  // control node's results, in order (none for one nothing reads).
  bool add_host_call(int k, std::string& why_not) {
    const ir::ValueId value = plan_.kernels[static_cast<std::size_t>(k)].members.front();
    const ir::Node& node = step_.node(value);
    LoopKernelCall call{.kernel = k, .host = true, .buffers = {}};
    const bool assembled = plan_.kernels[static_cast<std::size_t>(k)].kind == KernelKind::assembled;
    for (ir::ValueId operand : node.operands) {
      if (assembled && placed(operand)) {
        call.buffers.push_back({LoopLocation::Kind::none, 0});
        continue;
      }
      const std::optional<LoopLocation> location = locate(operand);
      if (!location) return unplaced(operand, why_not);
      call.buffers.push_back(*location);
    }
    std::vector<ir::ValueId> results{value};
    if (ir::has_regions(node.op)) {
      results.resize(ir::result_types(step_, value).size(), -1);
      for (ir::ValueId reader : result_nodes_[index(value)])
        results.at(static_cast<std::size_t>(step_.node(reader).attributes.index)) = reader;
    }
    for (ir::ValueId result : results) {
      if (result < 0) {
        call.buffers.push_back({LoopLocation::Kind::none, 0});
        continue;
      }
      const std::optional<LoopLocation> location = locate(result);
      if (!location) return unplaced(result, why_not);
      call.buffers.push_back(*location);
    }
    layout_.calls.push_back(std::move(call));
    return true;
  }

  bool placed(ir::ValueId value) const {
    for (const FusedKernel& kernel : plan_.kernels)
      if (placement_of(kernel, value)) return true;
    return false;
  }

  bool written(ir::ValueId value) const {
    for (const FusedKernel& kernel : plan_.kernels) {
      if (!has_generated_code(kernel.kind)) {
        // (A concat placed in another is written where that one has it, by its operands' kernels.)
        if (kernel.kind != KernelKind::view && kernel.members.front() == value && !placement_of(kernel, value))
          return true;
        continue;
      }
      if (std::find(kernel.outputs.begin(), kernel.outputs.end(), value) != kernel.outputs.end() &&
          !placement_of(kernel, value))
        return true;
      for (const Placement& placement : kernel.placements)
        if (placement.into == value) return true;
    }
    return false;
  }

  std::optional<LoopLocation> locate(ir::ValueId value) const {
    const ir::ValueId at = owner(value);
    using Kind = LoopLocation::Kind;
    if (const std::int64_t position = position_[index(at)]; position >= 0) return layout_.parameter(position);
    if (const std::int64_t slot = primary_slot_[index(at)]; slot >= 0) return LoopLocation{Kind::slot, slot};
    if (const std::int64_t offset = assignment_.arena_offset[index(at)]; offset >= 0)
      return LoopLocation{Kind::arena, offset};
    if (const std::int64_t offset = workspace_offset_[index(at)]; offset >= 0) return LoopLocation{Kind::arena, offset};
    return std::nullopt;
  }

  static bool unplaced(ir::ValueId value, std::string& why_not) {
    why_not = "%" + std::to_string(value) + " has no buffer the driver knows";
    return false;
  }

  // Carry `carry` is updated in place when the kernel writing it is a loop kernel reading the carry it replaces
  // only through elementwise ops of its shape (element i of the new carry from element i of the old, so a thread
  // reads each element before it writes it), no kernel after it reads the old carry, and no slot copies it.
  void decide_in_place(std::int64_t carry) {
    LoopSlot& slot = layout_.slots[static_cast<std::size_t>(carry)];
    std::string note;
    if (slot.source == LoopSlot::Source::unchanged)
      note = "returned as it came in: kept where it is";
    else if (slot.source != LoopSlot::Source::written)
      note = "a copy: two buffers, the step writes the one it does not read";
    else if (const std::string why = why_not_in_place(carry); why.empty()) {
      slot.in_place = true;
      note = "updated in place: " + writer_text(carry) + " reads it element by element and is the last to read it";
    } else {
      note = "two buffers, the step writes the one it does not read: " + why;
    }
    carry_notes_.push_back(note);
  }

  std::string writer_text(std::int64_t carry) const { return "kernel " + std::to_string(writer(carry)); }

  int writer(std::int64_t carry) const {
    const ir::ValueId value = owner(step_.outputs[static_cast<std::size_t>(carry)]);
    for (std::size_t k = 0; k < plan_.kernels.size(); ++k) {
      const FusedKernel& kernel = plan_.kernels[k];
      if (kernel.kind == KernelKind::view) continue;
      if (std::find(kernel.outputs.begin(), kernel.outputs.end(), value) != kernel.outputs.end() ||
          (!has_generated_code(kernel.kind) && kernel.members.front() == value))
        return static_cast<int>(k);
    }
    return -1;
  }

  std::string why_not_in_place(std::int64_t carry) const {
    const ir::ValueId old_value = step_.parameters[static_cast<std::size_t>(carry)];
    const ir::ValueId new_value = owner(step_.outputs[static_cast<std::size_t>(carry)]);
    for (std::size_t slot = 0; slot < step_.outputs.size(); ++slot)
      if (owner(step_.outputs[slot]) == old_value) return "output " + std::to_string(slot) + " is the old value";
    const int k = writer(carry);
    if (k < 0) return "it is placed into another value";
    const FusedKernel& kernel = plan_.kernels[static_cast<std::size_t>(k)];
    const Shape& shape = step_.type(old_value).shape;
    if (kernel.kind != KernelKind::loop || !kernel.pieces.empty())
      return "kernel " + std::to_string(k) + " is a " + std::string(to_string(kernel.kind)) + " kernel";
    if (placement_of(kernel, new_value) || !(kernel.space == shape) ||
        !(step_.type(new_value) == step_.type(old_value)))
      return "kernel " + std::to_string(k) + " writes it over another space";
    for (std::size_t later = 0; later < plan_.kernels.size(); ++later) {
      const FusedKernel& other = plan_.kernels[later];
      for (ir::ValueId input : other.inputs) {
        if (owner(input) != old_value) continue;
        if (later > static_cast<std::size_t>(k)) return "kernel " + std::to_string(later) + " reads it later";
        if (later == static_cast<std::size_t>(k) && input != old_value)
          return "kernel " + std::to_string(k) + " reads it through a view";
      }
    }
    // Everything computed from the old value inside the kernel must be element for element.
    std::set<ir::ValueId> depends{old_value};
    for (ir::ValueId member : kernel.members) {
      const ir::Node& node = step_.node(member);
      if (std::none_of(node.operands.begin(), node.operands.end(),
                       [&](ir::ValueId operand) { return depends.count(operand) > 0; }))
        continue;
      if (!ir::is_elementwise(node.op) || !(node.type.shape == shape))
        return "kernel " + std::to_string(k) + " reads it through " + std::string(ir::name(node.op));
      depends.insert(member);
    }
    return {};
  }

  const ir::Graph& step_;
  const FusionPlan& plan_;
  const BufferAssignment& assignment_;
  LoopLayout& layout_;
  std::vector<ir::ValueId> owner_;          // per value: whose buffer it is (a view's operand's)
  std::vector<std::int64_t> position_;      // per value: its parameter position, or -1
  std::vector<std::int64_t> primary_slot_;  // per value: the slot its kernel writes it into, or -1
  std::vector<std::int64_t> workspace_offset_;  // per value a host's kernel writes: where in the workspace, or -1
  std::int64_t workspace_end_ = 0;
  std::vector<std::vector<ir::ValueId>> result_nodes_;  // per control node of the step, the result nodes reading it
  std::vector<std::string> carry_notes_;
};

}  // namespace

std::optional<LoopLayout> layout_loop(const ir::Graph& graph, ir::ValueId loop, const ir::Graph& step,
                                      const FusionPlan& plan, const BufferAssignment& assignment,
                                      std::string& why_not) {
  const ir::Node& node = graph.node(loop);
  LoopLayout layout;
  layout.op = node.op;
  layout.carries = node.attributes.carry_count;
  layout.sequences = node.op == ir::Op::scan_loop ? node.attributes.sequence_count : 0;
  layout.captures = static_cast<std::int64_t>(node.operands.size()) - layout.carries - layout.sequences;
  layout.length = node.attributes.length;
  layout.reverse = node.attributes.reverse;
  if (static_cast<std::int64_t>(step.parameters.size()) != layout.operand_count())
    throw InternalError("compiled loop", "the step's parameters are not the loop's operands", node.location);
  for (std::int64_t sequence = 0; sequence < layout.sequences; ++sequence)
    layout.elements.push_back(step.type(step.parameters[static_cast<std::size_t>(layout.carries + sequence)]));
  LayoutBuilder builder(step, plan, assignment, layout);
  if (!builder.build(why_not)) return std::nullopt;
  std::int64_t offset = builder.workspace_end();
  layout.arena_bytes = assignment.arena_bytes;
  layout.flag_offset = offset;
  if (layout.op == ir::Op::while_loop) offset += alignment;
  for (const ir::Type& element : layout.elements) {
    layout.element_offsets.push_back(offset);
    offset += aligned(element.shape.numel() * static_cast<std::int64_t>(size_of(element.dtype)));
  }
  for (std::size_t slot = static_cast<std::size_t>(layout.carries);
       layout.op == ir::Op::scan_loop && slot < layout.slots.size(); ++slot) {
    layout.row_offsets.push_back(offset);
    offset += aligned(layout.slots[slot].bytes());
  }
  layout.workspace_bytes = std::max<std::int64_t>(offset, alignment);
  layout.carry_notes = builder.carry_notes();
  return layout;
}

std::string describe(const LoopLayout& layout) {
  std::string text;
  for (std::size_t slot = 0; slot < layout.slots.size(); ++slot) {
    const LoopSlot& placed = layout.slots[slot];
    const bool carry = static_cast<std::int64_t>(slot) < layout.carries;
    text += "  " +
            std::string(carry                             ? "carry "
                        : layout.op == ir::Op::while_loop ? "condition "
                                                          : "output ") +
            std::to_string(slot) + " " + placed.type.to_string() + ": ";
    if (carry) {
      text += layout.carry_notes.at(slot) + "\n";
      continue;
    }
    switch (placed.source) {
      case LoopSlot::Source::written:
      case LoopSlot::Source::unchanged:
        text += layout.op == ir::Op::while_loop ? "written by a kernel\n"
                                                : "written by a kernel into its row (through the workspace where the "
                                                  "row is not 64-byte aligned)\n";
        break;
      case LoopSlot::Source::from_parameter:
        text += "a copy of parameter " + std::to_string(placed.from) + "\n";
        break;
      case LoopSlot::Source::from_slot:
        text += "a copy of slot " + std::to_string(placed.from) + "\n";
        break;
    }
  }
  return text;
}

}  // namespace kiln::compiler
