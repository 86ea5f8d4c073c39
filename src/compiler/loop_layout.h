#pragma once
// How a compiled loop's generated driver (codegen/cpu/loop_driver.h) runs the kernels of its step (loop_step.h): where
// each value the step's kernels read or write lives, which carries are double-buffered and which are updated in place,
// and what the host passes it (compiled_loop.h). Decided from the step's plan and buffer assignment; a step the driver
// cannot run (a value it has no buffer for) gets no layout and its loop runs on the host, region by region
// (exec/control_flow.h). Kernels without generated code (a library kernel, an assembled concat, a loop or branch of
// the step's own) are run by kiln when the driver reaches them.

#include "compiler/buffer_assignment.h"
#include "compiler/fusion.h"
#include "ir/graph.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler {

// Where the step reads or writes a value, in the driver's terms.
struct LoopLocation {
  enum class Kind {
    carry,     // the current value of carry `index`
    element,   // this step's element of sequence `index`
    captured,  // capture `index` (the loop's operands after its carries and sequences)
    arena,     // the step's arena, at offset `index`
    slot,      // output slot `index`'s buffer for this step
    none,      // nothing: a concat's operand a kernel already wrote into it
  };
  Kind kind = Kind::arena;
  std::int64_t index = 0;
};

// An output of the step: carries first, then a scan's per-step outputs or a while_loop's flag.
struct LoopSlot {
  enum class Source {
    written,         // a kernel writes it into the slot's buffer
    unchanged,       // a carry the step returns as it came in: nothing to do
    from_parameter,  // copied from parameter `from` of the step (its value as the step began)
    from_slot,       // copied from slot `from` (an earlier slot written by a kernel)
  };
  Source source = Source::written;
  std::int64_t from = -1;
  ir::Type type;
  // A carry written by a kernel that reads the carry it replaces element by element and is the last to read it: the
  // kernel writes over it (one buffer) instead of into a second buffer.
  bool in_place = false;
  std::int64_t bytes() const { return type.shape.numel() * static_cast<std::int64_t>(size_of(type.dtype)); }
};

// One kernel of the step: its plan index and where its buffers are. A generated kernel's are its inputs, then its
// outputs, as the plan lists them; a kernel without generated code (`host`: a library kernel, an assembled concat's
// copies, a control node of the step's own) is run by kiln through kiln_runtime::host_kernel, its buffers its node's
// operands, then its result (a control node's: all of them, in order).
struct LoopKernelCall {
  int kernel = 0;
  bool host = false;
  std::vector<LoopLocation> buffers;
};

struct LoopLayout {
  ir::Op op = ir::Op::while_loop;
  std::int64_t carries = 0, sequences = 0, captures = 0;
  std::int64_t length = 0;         // scan
  bool reverse = false;            // scan
  std::vector<ir::Type> elements;  // per sequence, the type of one step's element
  std::vector<LoopSlot> slots;
  std::vector<LoopKernelCall> calls;
  // The workspace the host allocates per call: the step's arena first, then (64-byte aligned) the results of kernels
  // without generated code (the JIT's executable allocates those as it goes), the flag of a while_loop, a copy of each
  // sequence's element (used where its step's element is not 64-byte aligned) and of each per-step output (written
  // there and copied where its row is not).
  std::int64_t arena_bytes = 0;
  std::int64_t flag_offset = 0;
  std::vector<std::int64_t> element_offsets, row_offsets;
  std::int64_t workspace_bytes = 0;
  std::vector<std::string> carry_notes;  // per carry: how it is kept and why, for the fused stage

  // The driver's buffers: the loop's operands, two buffers per carry (the second null for one updated in place), a
  // scan's stacked outputs, the workspace, and an int64 per carry where the driver says where the final carry is
  // (0: the operand as it came in, 1: its first buffer, 2: its second).
  std::int64_t operand_count() const { return carries + sequences + captures; }
  // A scan's per-step outputs (a while_loop's slots past its carries are its flag alone).
  std::int64_t stacked_outputs() const {
    return op == ir::Op::scan_loop ? static_cast<std::int64_t>(slots.size()) - carries : 0;
  }
  // Where parameter `position` of the step is: a carry, an element of a sequence, or a capture.
  LoopLocation parameter(std::int64_t position) const {
    if (position < carries) return {LoopLocation::Kind::carry, position};
    if (position < carries + sequences) return {LoopLocation::Kind::element, position - carries};
    return {LoopLocation::Kind::captured, position - carries - sequences};
  }
  std::int64_t carry_buffer(std::int64_t carry, int which) const { return operand_count() + 2 * carry + which; }
  std::int64_t stacked_buffer(std::int64_t output) const { return operand_count() + 2 * carries + output; }
  std::int64_t workspace_buffer() const { return operand_count() + 2 * carries + stacked_outputs(); }
  std::int64_t where_buffer() const { return workspace_buffer() + 1; }
};

// The layout of loop node `loop` of `graph` running `step` (loop_step(graph, loop), lowered to `plan` and
// `assignment`), or nothing with the reason in `why_not`.
std::optional<LoopLayout> layout_loop(const ir::Graph& graph, ir::ValueId loop, const ir::Graph& step,
                                      const FusionPlan& plan, const BufferAssignment& assignment, std::string& why_not);

// The layout in words, a line per slot, for the `fused` stages: how each carry is kept and what each other slot is.
std::string describe(const LoopLayout& layout);

}  // namespace kiln::compiler
