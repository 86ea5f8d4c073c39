#pragma once
// Fusion: decides which nodes run together in one generated kernel. Every
// decision carries a reason, printed in the `fused` stage of
// get_compiler_ir, and the kernel count is what tests assert.
//
// Kernel kinds:
//   loop       elementwise ops, broadcasts, transposes, slices and reshapes
//              over one iteration space; one or several outputs of that
//              shape (multi-output fusion: an Adam step is one kernel).
//              On the CPU a padded input (pad()'s concats) is read in place,
//              the padding's constant where the index map falls on it
//              (fold_padding_into_loops, padding_fusion.h).
//   reduction  reductions over the trailing axes of one iteration space,
//              with their producers and their row-wise consumers: softmax and
//              layer_norm are one kernel each, computed row by row.
//   gemm       an f32 matmul (is_generated_gemm: 2-D, or a batch of rows
//              times one matrix) whose elementwise consumers (the epilogue)
//              and full reductions of them are computed tile by tile, so the
//              matmul output is never written to memory unless it is needed.
//              On the CPU a left operand made of views side by side (a
//              convolution's windows) is gathered as the GEMM packs it, never
//              written (gather_gemm_operands, gather_fusion.h).
//   attention  two f32 matmuls with a reduction kernel over the first one's
//              rows between them (softmax(Q K^T / sqrt(d)) V): the first
//              product is computed a strip of rows at a time, the row kernel
//              applied and the strip multiplied into the output, so the
//              scores never reach memory. Formed from a plan by
//              fuse_attention (attention_fusion.h), on the CPU.
//   column     a reduction over a run of axes followed by one kept last axis
//              (a sum over the batch axis, a mean over the tokens of
//              [batch, tokens, width]) with the elementwise producers of its
//              input: each work item walks the reduced rows in order for a
//              block of columns, accumulating a vector per column group.
//              Formed from a plan by fuse_columns (column_fusion.h), on the CPU.
//   library    one op run by its standard kernel (what the generator does not
//              fuse: concat (on the CPU assembled in place where its operands
//              are computed), argmax, argmin, gather, reductions over leading axes, f64
//              and integer matmuls, batched matmuls with a batched right operand).
//   view       one reshape of a value in memory, alone in its kernel: the
//              same buffer read with the new shape (as XLA's bitcast), so
//              nothing is generated, copied or counted as a kernel.
//   assembled  a concat whose operands the kernels computing them wrote into
//              its buffer (placements, concat_fusion.h); it copies only the
//              operands that were not (parameters, values read elsewhere),
//              and is not counted as a kernel when there are none.
//
// Rules: a producer joins its consumers' kernel when all of them are in that
// kernel; cheap producers (constants, iota, pure index mapping of an input)
// are recomputed in every kernel that uses them; an expensive producer is
// never duplicated, nor fused where it would be recomputed for many elements
// of a larger iteration space.

#include "ir/graph.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace kiln::compiler {

enum class KernelKind { loop, reduction, gemm, attention, column, library, view, assembled };
std::string_view to_string(KernelKind kind);

// An output of a kernel stored in a slice of another value's buffer, not a buffer of its own: `value`'s element at
// coordinates c is `into`'s element at c plus `offset` along `axis` (a concat's operand, where the concat has it).
struct Placement {
  ir::ValueId value = -1;
  ir::ValueId into = -1;
  int axis = 0;
  std::int64_t offset = 0;
};

// One part of a gemm kernel's left operand when the GEMM gathers that operand instead of reading it (gather_fusion.h):
// the concat operand `part` is a view of `source`, a value in memory of the same rank: part's element at coordinates
// c is source's at start + c * step (axis by axis), and zero where that falls outside source (padding).
struct GatheredView {
  ir::ValueId part = -1;
  ir::ValueId source = -1;
  std::vector<std::int64_t> start, step;
};

struct FusedKernel {
  KernelKind kind = KernelKind::loop;
  std::vector<ir::ValueId> members;  // nodes computed inside, in graph (topological) order
  std::vector<ir::ValueId> inputs;   // values read from memory: parameters and other kernels' outputs
  std::vector<ir::ValueId> outputs;  // members written to memory (used by later kernels or returned)
  Shape space;           // the iteration space (gemm: the matmul's output shape; attention: the first matmul's)
  int reduced_axes = 0;  // reduction, attention: how many trailing axes of `space` are reduced; column: how many
                         // axes before the last
  std::vector<std::string> decisions;  // why members were fused
  std::vector<Placement> placements;   // outputs written into another value's buffer (loop and reduction kernels)
  // gemm (CPU): the matmul's left operand, a concat along its last axis, as its parts side by side, gathered while the
  // GEMM packs A; empty when the operand is read from memory.
  std::vector<GatheredView> gathered;
};

// The placement of `value` among the kernel's, or null when it has a buffer of its own.
const Placement* placement_of(const FusedKernel& kernel, ir::ValueId value);

struct FusionPlan {
  std::vector<FusedKernel> kernels;    // in execution order
  std::vector<std::string> not_fused;  // decisions not to fuse, with reasons
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

// The values `members` read from outside themselves, in the order the members first read them: the inputs of a
// kernel made of them (for passes that merge kernels of a plan).
std::vector<ir::ValueId> inputs_of(const ir::Graph& graph, const std::vector<ir::ValueId>& members);

// Whether a kernel of `plan` other than those at the indices `except` reads `value` from memory. A later pass
// that stops writing a value asks this rather than the graph's users: a cheap node recomputed in several
// kernels makes each of them read its operands.
bool read_by_other_kernels(const FusionPlan& plan, ir::ValueId value, std::initializer_list<std::size_t> except);

// Whether the function returns `value` (one of the graph's outputs).
bool is_returned(const ir::Graph& graph, ir::ValueId value);

// The kernel of `plan` that writes `value` to memory as one of its outputs, if one does.
std::optional<std::size_t> producer_of(const FusionPlan& plan, ir::ValueId value);

// Whether `value` is in memory when `plan` runs: a parameter, or a value a kernel of the plan writes to a buffer.
bool in_memory(const ir::Graph& graph, const FusionPlan& plan, ir::ValueId value);

// A value padded along one axis in pad()'s form: a concat of constants that all hold one value, before and after
// one other operand.
struct Padding {
  ir::ValueId inner = -1;     // the operand that is not padding
  int axis = 0;               // the concat's
  std::int64_t before = 0;    // elements of padding before `inner` along the axis
  ir::ValueId constant = -1;  // the first of the constants
};
std::optional<Padding> padding_of(const ir::Graph& graph, ir::ValueId value);

// Whether constants `a` and `b` hold the same value of the same dtype (NaN as NaN; -0 and +0 differ).
bool same_constant_value(const ir::Node& a, const ir::Node& b);

// Drops the kernels of `plan` none of whose outputs is returned or read by another kernel, last first (so that a
// kernel read only by dropped ones goes too), and fuse()'s notes on their nodes ("library: %16 concat ...", "not
// fused: %7 slice into ...", "not fused: %7 slice into kernel of %16 concat: ..."): for passes that stop reading a
// value from memory.
void remove_unread_kernels(const ir::Graph& graph, FusionPlan& plan);

// How fusion notes name a node: "%3 matmul".
std::string describe(const ir::Graph& graph, ir::ValueId value);

struct FusionOptions {
  // A transpose that moves the innermost axis (a 2-D transpose; any permutation whose last output axis is an
  // input axis at least 512 bytes apart) runs as its standard kernel when its input has at least
  // strided_transpose_bytes, and its consumers read the result: the CPU's standard kernel copies square tiles
  // transposed in registers, while a loop kernel reads such an operand a lane per cache line, gathered. 0 keeps
  // every transpose an index map.
  std::int64_t strided_transpose_bytes = 0;
};

// The options for plans run on `device`.
FusionOptions fusion_options(Device device);

// `graph` must be optimized (simplify has turned expand_dims and squeeze into
// reshape) and free of host ops and dynamic shapes.
FusionPlan fuse(const ir::Graph& graph, const FusionOptions& options = {});

// Whether the generated GEMM computes `matmul`: f32, a 2-D right operand, and a left operand that is 2-D or,
// untransposed, of higher rank. Its leading axes are then more rows of one product ([batch, tokens, width] times
// [width, hidden]: a dense layer on a batch of sequences), which is how XLA folds them into a dot's rows; the
// left operand is read from memory, densely, so its rows are consecutive.
bool is_generated_gemm(const ir::Graph& graph, const ir::Node& matmul);

// The `fused` stage: the kernel plan with every decision.
std::string print_plan(const ir::Graph& graph, const FusionPlan& plan);

// True for ops evaluated by a function of vector_math (or libm): an order of
// magnitude dearer per element than arithmetic. Fusion never recomputes them
// per consumer; code generators keep them in a row cache between passes.
bool is_transcendental(ir::Op op);

// True for nodes that only move or produce data without arithmetic and are
// recomputed wherever used: constants, iota, and broadcasts, transposes,
// slices and reshapes of such nodes or of parameters.
bool is_cheap(const ir::Graph& graph, ir::ValueId value);

// True if `node` is a reshape that only inserts or removes size-1 axes (an
// index map can follow it through a computed value).
bool is_unit_reshape(const ir::Graph& graph, const ir::Node& node);

// For a reduction (axes, not argmax's axis) over the trailing axes of its input, how many it reduces; -1 otherwise.
int trailing_reduced_axes(const ir::Graph& graph, const ir::Node& node);

}  // namespace kiln::compiler
