#pragma once
// The kernel plan: what the fusion scheduler (fusion.h) decides and the code generators, buffer assignment and
// executors read. Each kernel is a loop nest (loop_nest.h) with its members, the values it reads from memory and
// those it writes, and the decisions that made it.
//
// Kernel kinds (the template a generator applies to the nest):
//   loop       elementwise ops, broadcasts, transposes, slices and reshapes over one iteration space; one or
//              several outputs (multi-output fusion: an Adam step is one kernel). A padded input (pad()'s
//              concats) is read in place, the padding's constant where the index map falls on it. A concat is
//              read piecewise: the space runs as boxes (pieces), in each of which the concat is one operand.
//   reduction  reductions over the trailing axes of the space, with their producers and the consumers of their
//              results: softmax and layer_norm are one kernel each, computed row by row.
//   column     a reduction over a run of axes before the kept last axis (a sum over the batch axis, a mean over
//              the tokens of [batch, tokens, width]) with its producers: each work item walks the reduced rows in
//              order for a block of columns (CPU).
//   gemm       an f32 matmul, or a bf16 one in AMX tiles, or a bf16 or f16 one on a GPU's tensor cores
//              (is_generated_gemm), whose elementwise consumers (the epilogue) and full reductions of them are
//              computed tile by tile (on a GPU: from cuBLAS's product), so the product is never written unless it
//              is needed. On the CPU a left operand made of views side by side (a convolution's windows)
//              is gathered as the GEMM packs it (f32).
//   attention  two f32 matmuls with a row kernel over the first one's rows between them (softmax(Q K^T) V): the
//              first product is computed a strip of rows at a time and never written (CPU: in scratch per thread;
//              CUDA: in shared memory, a row per warp or block).
//   library    one op run by its standard kernel (argmax, gather, scans, sorts, f64 matmuls, ...).
//   view       one reshape of a value in memory, alone in its kernel: the same buffer read with the new shape (as
//              XLA's bitcast), so nothing is generated, copied or counted as a kernel.
//   assembled  a concat whose operands the kernels computing them wrote into its buffer (placements); it copies
//              only the operands that were not, and is not counted as a kernel when there are none.

#include "compiler/fusion_decision.h"
#include "compiler/loop_nest.h"
#include "ir/graph.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler {

enum class KernelKind { loop, reduction, column, gemm, attention, library, view, assembled };
std::string_view to_string(KernelKind kind);

// An output of a kernel stored in a slice of another value's buffer, not a buffer of its own: `value`'s element at
// coordinates c is `into`'s element at c + start (a concat's operand, where the concat has it; through nested
// concats, where the outermost has it, so `start` may be nonzero along several axes).
struct Placement {
  ir::ValueId value = -1;
  ir::ValueId into = -1;
  std::vector<std::int64_t> start;  // one per axis of `into`
};

// One part of a gemm kernel's left operand when the GEMM gathers that operand instead of reading it: the concat
// operand `part` is a view of `source`, a value in memory of the same rank: part's element at coordinates c is
// source's at start + c * step (axis by axis), and zero where that falls outside source (padding).
struct GatheredView {
  ir::ValueId part = -1;
  ir::ValueId source = -1;
  std::vector<std::int64_t> start, step;
};

// The concat a gemm kernel gathers as its left operand `operand`: the operand itself, or what a reshape numbering
// the concat's rows along one axis (a transposed operand's depth) reshapes.
inline ir::ValueId gathered_concat(const ir::Graph& graph, ir::ValueId operand) {
  const ir::Node& node = graph.node(operand);
  return node.op == ir::Op::reshape ? node.operands[0] : operand;
}

// A box of a loop kernel's space, the coordinates origin + [0, shape): a kernel that reads a concat piecewise runs
// its space as boxes one after another, cut where any concat it reads passes from one operand to the next, so that
// in each box every such read is a read of one operand (at the concat's map, moved back by where the operand
// starts). Inductor's concat kernels branch per element; boxes keep each loop free of the choice.
struct SpaceBox {
  std::vector<std::int64_t> origin;
  Shape shape;
  friend bool operator==(const SpaceBox&, const SpaceBox&) = default;
};

struct FusedKernel {
  KernelKind kind = KernelKind::loop;
  std::vector<ir::ValueId> members;  // nodes computed inside, in graph (topological) order
  std::vector<ir::ValueId> inputs;   // values read from memory: parameters and other kernels' outputs
  std::vector<ir::ValueId> outputs;  // members written to memory (used by later kernels or returned)
  // The outputs stored once per kept coordinate of the nest (a row kernel's per-row results, a column kernel's
  // per-column results, a GEMM epilogue's full reductions); the others are stored at every point of the space.
  std::vector<ir::ValueId> row_outputs;
  Shape space;           // the iteration space (gemm: the matmul's output shape; attention: the first matmul's)
  int reduced_axes = 0;  // reduction, attention: how many trailing axes of `space` are reduced; column: how many
                         // axes before the last; gemm: all of them when the epilogue has full reductions, else 0
  std::vector<FusionDecision> decisions;  // why members are here
  std::vector<Placement> placements;      // outputs written into another value's buffer (loop and reduction kernels)
  // gemm (CPU): the matmul's left operand, a concat along its last axis (or a reshape numbering its rows along one
  // axis), as its parts side by side, gathered while the GEMM packs A (or A^T); empty when the operand is read from
  // memory.
  std::vector<GatheredView> gathered;
  // loop: the boxes its space runs as, when it reads concats piecewise (the `piecewise` members); else empty.
  std::vector<SpaceBox> pieces;
  std::vector<ir::ValueId> piecewise;
  // One box of such a kernel as a kernel of its own (the code generator's view of it): `space` is the box's shape
  // and `origin` where it starts in the whole space; the index maps of the kernel's values add it.
  std::vector<std::int64_t> origin;

  // The loop nest: `space` with the reduced run that `kind` and `reduced_axes` give.
  LoopNest nest() const;
  bool stores_per_row(ir::ValueId value) const;
  // `map`, a map from the box's coordinates, from those of the whole space: the origin added where it reads one.
  IndexMap from_origin(IndexMap map) const;
  // The kernel that runs box `box` of this one's pieces.
  FusedKernel piece(std::size_t box) const;
};

// Where a kernel's code computes output `value`: at the kept map of its nest when stored per row, else at the
// space's coordinates (broadcast from the right).
IndexMap output_map(const ir::Graph& graph, const FusedKernel& kernel, ir::ValueId value);

// The placement of `value` among the kernel's, or null when it has a buffer of its own.
const Placement* placement_of(const FusedKernel& kernel, ir::ValueId value);

struct FusionPlan {
  std::vector<FusedKernel> kernels;       // in execution order
  std::vector<FusionDecision> not_fused;  // decisions not to fuse, with reasons
  // Whether the graph's results leave the call for the user's code (a function's), rather than feeding what runs
  // next in the same call (a branch's results, a loop step's carries): Program::results_leave.
  bool results_leave = false;
};

// Library kernels, views and assembled concats have none: the executor runs their node's standard kernel (a
// view's shares its operand's buffer; an assembled concat copies the operands not already in place).
inline bool has_generated_code(KernelKind kind) {
  return kind != KernelKind::library && kind != KernelKind::view && kind != KernelKind::assembled;
}

// Whether a call runs kernel `kernel` at all: views, and assembled concats with nothing left to copy, run nothing.
bool launches(const FusedKernel& kernel);

// The kernels a call launches: the plan's, views and assembled concats with nothing to copy aside.
int kernel_count(const FusionPlan& plan);

// Whether a kernel of `plan` other than those at the indices `except` reads `value` from memory. A step that stops
// writing a value asks this rather than the graph's users: a cheap node recomputed in several kernels makes each
// of them read its operands.
bool read_by_other_kernels(const FusionPlan& plan, ir::ValueId value, std::initializer_list<std::size_t> except);

// Whether the function returns `value` (one of the graph's outputs).
bool is_returned(const ir::Graph& graph, ir::ValueId value);

// Drops the plan's notes (not_fused) about `values`: those whose subject or refusing kernel is one of them.
void drop_notes(FusionPlan& plan, const std::vector<ir::ValueId>& values);

// The `fused` stage: the kernel plan with every decision.
std::string print_plan(const ir::Graph& graph, const FusionPlan& plan);

}  // namespace kiln::compiler
