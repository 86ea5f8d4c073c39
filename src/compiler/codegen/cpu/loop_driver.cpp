#include "compiler/codegen/cpu/loop_driver.h"

#include "compiler/codegen/cpu/cpu_codegen.h"

#include <kiln/error.h>

namespace kiln::compiler::cpu {
namespace {

std::string number(std::int64_t value) { return std::to_string(value); }

std::string buffer(std::int64_t index) { return "static_cast<char*>(buffers[" + number(index) + "])"; }

std::string slot_name(std::size_t slot) { return "slot_" + number(static_cast<std::int64_t>(slot)); }

// The expression the driver passes for `location`.
std::string pointer(const LoopLocation& location) {
  switch (location.kind) {
    case LoopLocation::Kind::carry:
      return "carry_" + number(location.index);
    case LoopLocation::Kind::element:
      return "element_" + number(location.index);
    case LoopLocation::Kind::captured:
      return "captured_" + number(location.index);
    case LoopLocation::Kind::arena:
      return location.index == 0 ? "arena" : "arena + " + number(location.index);
    case LoopLocation::Kind::slot:
      return slot_name(static_cast<std::size_t>(location.index));
    case LoopLocation::Kind::none:
      break;
  }
  return "nullptr";
}

// Where parameter `position` of the step is this iteration.
std::string parameter_pointer(const LoopLayout& layout, std::int64_t position) {
  return pointer(layout.parameter(position));
}

bool is_flag(const LoopLayout& layout, std::size_t slot) {
  return layout.op == ir::Op::while_loop && static_cast<std::int64_t>(slot) == layout.carries;
}

// Where slot `slot`'s value is this iteration, once the kernels have run (a while_loop's flag has no buffer of its own
// unless a kernel writes it).
std::string slot_value(const LoopLayout& layout, std::size_t slot) {
  const LoopSlot& placed = layout.slots[slot];
  if (placed.source == LoopSlot::Source::unchanged) return parameter_pointer(layout, placed.from);
  if (is_flag(layout, slot) && placed.source == LoopSlot::Source::from_parameter)
    return parameter_pointer(layout, placed.from);
  if (is_flag(layout, slot) && placed.source == LoopSlot::Source::from_slot)
    return slot_name(static_cast<std::size_t>(placed.from));
  return slot_name(slot);
}

std::string declarations(const LoopLayout& layout) {
  std::string text;
  for (const LoopKernelCall& call : layout.calls)
    if (!call.host)
      text += "extern \"C\" __attribute__((visibility(\"default\"))) void " + entry_point(call.kernel) +
              "(const kiln_runtime*, void* const*);\n";
  return text;
}

std::string buffers_text(const LoopLayout& layout) {
  std::string text = "  char* const workspace = " + buffer(layout.workspace_buffer()) +
                     ";\n  char* const arena = workspace;  // the step's arena (" + number(layout.arena_bytes) +
                     " bytes), then the driver's own scratch\n";
  for (std::int64_t carry = 0; carry < layout.carries; ++carry) {
    const LoopSlot& slot = layout.slots[static_cast<std::size_t>(carry)];
    const std::string name = "carry_" + number(carry);
    text += "  // carry " + number(carry) + ", " + slot.type.to_string() + ": " +
            layout.carry_notes.at(static_cast<std::size_t>(carry)) + "\n";
    text += "  char* " + name + " = " + buffer(carry) +
            ";  // where this iteration reads it: first the operand (never written)\n";
    if (slot.source == LoopSlot::Source::unchanged) continue;
    text += "  char* const " + name + "_first = " + buffer(layout.carry_buffer(carry, 0)) + ";\n";
    if (!slot.in_place) text += "  char* const " + name + "_second = " + buffer(layout.carry_buffer(carry, 1)) + ";\n";
  }
  for (std::int64_t sequence = 0; sequence < layout.sequences; ++sequence)
    text += "  char* const sequence_" + number(sequence) + " = " + buffer(layout.carries + sequence) + ";  // " +
            number(layout.length) + " elements of " + layout.elements[static_cast<std::size_t>(sequence)].to_string() +
            "\n";
  for (std::int64_t capture = 0; capture < layout.captures; ++capture)
    text += "  char* const captured_" + number(capture) + " = " + buffer(layout.carries + layout.sequences + capture) +
            ";\n";
  for (std::size_t slot = static_cast<std::size_t>(layout.carries);
       layout.op == ir::Op::scan_loop && slot < layout.slots.size(); ++slot)
    text += "  char* const stacked_" + number(static_cast<std::int64_t>(slot)) + " = " +
            buffer(layout.stacked_buffer(static_cast<std::int64_t>(slot) - layout.carries)) + ";  // " +
            layout.slots[slot].type.to_string() + " per step\n";
  return text;
}

// The iteration's element of each sequence: in place where 64-byte aligned (as the kernels read every buffer), else
// copied into the workspace.
std::string elements_text(const LoopLayout& layout) {
  std::string text;
  for (std::int64_t sequence = 0; sequence < layout.sequences; ++sequence) {
    const ir::Type& type = layout.elements[static_cast<std::size_t>(sequence)];
    const std::string bytes = number(type.shape.numel() * static_cast<std::int64_t>(size_of(type.dtype)));
    const std::string name = "element_" + number(sequence);
    const std::string scratch = "workspace + " + number(layout.element_offsets[static_cast<std::size_t>(sequence)]);
    text += "    char* " + name + " = sequence_" + number(sequence) + " + step * " + bytes + ";\n";
    text += "    if (reinterpret_cast<uintptr_t>(" + name + ") % 64 != 0) {\n      __builtin_memcpy(" + scratch + ", " +
            name + ", " + bytes + ");\n      " + name + " = " + scratch + ";\n    }\n";
  }
  return text;
}

// Each slot's buffer for this iteration.
std::string slots_text(const LoopLayout& layout) {
  std::string text;
  for (std::size_t slot = 0; slot < layout.slots.size(); ++slot) {
    const LoopSlot& placed = layout.slots[slot];
    const std::string name = slot_name(slot);
    const std::string carry = "carry_" + number(static_cast<std::int64_t>(slot));
    if (static_cast<std::int64_t>(slot) < layout.carries) {
      if (placed.source == LoopSlot::Source::unchanged) continue;
      if (placed.in_place)
        text += "    char* const " + name + " = " + carry + "_first;  // in place once the first step has run\n";
      else
        text += "    char* const " + name + " = " + carry + " == " + carry + "_first ? " + carry +
                "_second : " + carry + "_first;\n";
      continue;
    }
    if (layout.op == ir::Op::while_loop) {
      if (placed.source == LoopSlot::Source::written)
        text += "    char* const " + name + " = workspace + " + number(layout.flag_offset) + ";  // the condition\n";
      continue;
    }
    const std::string row = "row_" + number(static_cast<std::int64_t>(slot));
    text += "    char* const " + row + " = stacked_" + number(static_cast<std::int64_t>(slot)) + " + step * " +
            number(placed.bytes()) + ";\n";
    if (placed.source == LoopSlot::Source::written)
      text += "    char* const " + name + " = reinterpret_cast<uintptr_t>(" + row + ") % 64 == 0 ? " + row +
              " : workspace + " + number(layout.row_offsets[slot - static_cast<std::size_t>(layout.carries)]) + ";\n";
    else
      text += "    char* const " + name + " = " + row + ";\n";
  }
  return text;
}

std::string calls_text(const LoopLayout& layout) {
  std::string text;
  for (const LoopKernelCall& call : layout.calls) {
    std::string list;
    for (const LoopLocation& location : call.buffers) list += (list.empty() ? "" : ", ") + pointer(location);
    text += "    {\n      void* const kernel_buffers[] = {" + list + "};\n";
    if (call.host)
      text += "      // kernel " + number(call.kernel) +
              " has no generated code: kiln runs it (its operands, then its result)\n      if "
              "(runtime->host_kernel(&for_the_step, " +
              number(call.kernel) + ", kernel_buffers) != 0) return;  // it failed: kiln raises the error\n    }\n";
    else
      text += "      " + entry_point(call.kernel) + "(&for_the_step, kernel_buffers);\n    }\n";
  }
  return text;
}

// The slots no kernel wrote: copies of parameters (as the step began) and of other slots; a scan's row written into
// the workspace, copied to where it belongs.
std::string copies_text(const LoopLayout& layout) {
  std::string text;
  for (std::size_t slot = 0; slot < layout.slots.size(); ++slot) {
    const LoopSlot& placed = layout.slots[slot];
    if (is_flag(layout, slot) || placed.source == LoopSlot::Source::unchanged) continue;
    const std::string bytes = number(placed.bytes());
    if (placed.source == LoopSlot::Source::from_parameter)
      text += "    __builtin_memcpy(" + slot_name(slot) + ", " + parameter_pointer(layout, placed.from) + ", " + bytes +
              ");\n";
    else if (placed.source == LoopSlot::Source::from_slot)
      text += "    __builtin_memcpy(" + slot_name(slot) + ", " +
              slot_value(layout, static_cast<std::size_t>(placed.from)) + ", " + bytes + ");\n";
    else if (static_cast<std::int64_t>(slot) >= layout.carries) {
      const std::string row = "row_" + number(static_cast<std::int64_t>(slot));
      text += "    if (" + slot_name(slot) + " != " + row + ") __builtin_memcpy(" + row + ", " + slot_name(slot) +
              ", " + bytes + ");\n";
    }
  }
  return text;
}

// A while_loop's flag, read before the carries move on (it may be a parameter's value as the step began).
std::string flag_text(const LoopLayout& layout) {
  const auto slot = static_cast<std::size_t>(layout.carries);
  const ir::Type& type = layout.slots.at(slot).type;
  std::string scalar;
  switch (type.dtype) {
    case DType::boolean:
      scalar = "uint8_t";
      break;
    case DType::i32:
      scalar = "int32_t";
      break;
    case DType::i64:
      scalar = "int64_t";
      break;
    default:
      throw InternalError("compiled loop", "a condition of " + type.to_string(), std::string());
  }
  return "    const bool go_on = *reinterpret_cast<const " + scalar + "*>(" + slot_value(layout, slot) + ") != 0;\n";
}

std::string advance_text(const LoopLayout& layout) {
  std::string text;
  for (std::int64_t carry = 0; carry < layout.carries; ++carry)
    if (layout.slots[static_cast<std::size_t>(carry)].source != LoopSlot::Source::unchanged)
      text += "    carry_" + number(carry) + " = " + slot_name(static_cast<std::size_t>(carry)) + ";\n";
  return text;
}

std::string where_text(const LoopLayout& layout) {
  std::string text = "  int64_t* const where = static_cast<int64_t*>(buffers[" + number(layout.where_buffer()) +
                     "]);  // per carry: 0 as it came in, 1 its first buffer, 2 its second\n";
  for (std::int64_t carry = 0; carry < layout.carries; ++carry) {
    const std::string name = "carry_" + number(carry), at = "where[" + number(carry) + "]";
    const LoopSlot& slot = layout.slots[static_cast<std::size_t>(carry)];
    if (slot.source == LoopSlot::Source::unchanged)
      text += "  " + at + " = 0;\n";
    else if (slot.in_place)
      text += "  " + at + " = " + name + " == " + name + "_first ? 1 : 0;\n";
    else
      text += "  " + at + " = " + name + " == " + name + "_first ? 1 : " + name + " == " + name + "_second ? 2 : 0;\n";
  }
  return text;
}

}  // namespace

std::string loop_driver_source(const LoopLayout& layout, const std::string& loop) {
  const bool scan = layout.op == ir::Op::scan_loop;
  std::string text =
      "\n// ==== the loop: " + loop + " ====\n// kiln_loop runs the kernels above in order once per " +
      (scan ? "step, " + number(layout.length) + " steps" + (layout.reverse ? " from the last" : "") + "."
            : std::string("iteration, as long as the\n// condition the last of them computes holds "
                          "(the host has checked it before the first).")) +
      "\n// The carries move on by pointer: each is read where the iteration before wrote it.\n";
  text += declarations(layout);
  text += "extern \"C\" __attribute__((visibility(\"default\"))) void " + std::string(loop_entry_point) +
          "(const kiln_runtime* runtime, void* const* buffers) {\n";
  text += buffers_text(layout);
  text += "  kiln_runtime for_the_step = *runtime;  // its `step` tells row kernels which way to walk\n";
  if (scan) {
    text += "  for (int64_t count = 0; count < " + number(layout.length) + "; ++count) {\n";
    text += "    const int64_t step = " + (layout.reverse ? number(layout.length - 1) + " - count" : "count") + ";\n";
    text += elements_text(layout);
  } else {
    text += "  for (int64_t count = 0;; ++count) {\n";
  }
  text += "    for_the_step.step = count;\n";
  text += slots_text(layout) + calls_text(layout);
  text += "    if (runtime->failed(&for_the_step) != 0) return;  // an index out of range: kiln raises it\n";
  text += copies_text(layout);
  if (!scan) text += flag_text(layout);
  text += advance_text(layout);
  if (!scan) text += "    if (!go_on) break;\n";
  text += "  }\n" + where_text(layout) + "}\n";
  return text;
}

}  // namespace kiln::compiler::cpu
