#pragma once
// Fusion: the scheduler that decides which nodes run together in one generated kernel (plan.h has the plan it
// makes). One rule, applied consumer first (XLA's instruction fusion; Inductor's can_fuse): a producer joins the
// kernel of its consumers when the index maps at which that kernel reads it can be computed in the kernel's loop
// nest (loop_nest.h):
//   - an elementwise or data-movement producer is recomputed at whatever map it is read at, where that is cheap
//     (the same size, once per row, or one flop per element broadcast);
//   - a reduction's result exists only at the kept coordinates the nest is computing, so it joins when every read
//     of it is at its home map (softmax's sum read by the division at its own row), and the kernel's nest becomes
//     the reduction's: its reduced axes trailing (a row kernel) or a run before a kept last axis (a column
//     kernel, where the backend has one);
//   - a matmul joins its consumers as a GEMM whose epilogue reads each product element where it is computed.
// A producer read by several kernels joins the one it saves most in (multi-output: it is written for the others),
// or is recomputed in each where that is cheaper than writing it; consumers of one producer over one space merge.
// Every decision, and every refusal, is a record (fusion_decision.h) printed in the `fused` stage.
//
// Views of memory join like data movement, read where they lie: a padded value read by loop kernels (a masked read,
// recomputed in each), and a GEMM's left operand made of slices of values in memory side by side (a convolution's
// windows, gathered as the GEMM packs them; transposed as a matrix or through a reshape of its rows, and inlined
// into each GEMM that reads it: the forward's product and the filter gradient). A matmul read by a row kernel whose
// result is a second matmul's left operand joins them as one attention kernel (where the backend has one). A concat
// read by loop kernels is read piecewise (each kernel's space runs as boxes, one operand read in each) where the
// backend runs boxes. After the scheduler, the CPU's remaining plan step (concats assembled in place) writes the
// operands of the concats that are still written where the concat has them.

#include "compiler/plan.h"
#include "ir/graph.h"

#include <kiln/device.h>

#include <cstdint>
#include <optional>

namespace kiln::compiler {

// The memory of its own an attention kernel keeps a strip of scores in, and how much of it a kernel may take:
// a candidate that would take more stays three kernels, and the `fused` stage says why.
struct AttentionMemory {
  const char* name = "";  // what the memory is, as the refusal says it: "scratch per thread"
  // The bytes a kernel takes for a first product of n columns (keys) and contraction k, and a second of width d.
  std::int64_t (*bytes)(std::int64_t n, std::int64_t k, std::int64_t d) = nullptr;
  std::int64_t limit_bytes = 0;
  // Whether the kernel also writes the row kernel's result (the probabilities) to memory where other kernels read
  // it (a training step's backward reads them), instead of refusing: the scores still never reach memory.
  bool writes_probabilities = false;
  // Whether the kernel also runs a bf16 attention: both products' operands, their products and the row kernel's
  // result in bf16 (the CPU's AMX tiles, CUDA's tensor cores).
  bool bf16 = false;
};

// What a backend's code generators can run: the scheduler plans for these instead of asking which device it is.
struct BackendCapabilities {
  // A transpose that moves the innermost axis (a 2-D transpose; any permutation whose last output axis is an
  // input axis at least 512 bytes apart) runs as its standard kernel when its input has at least
  // strided_transpose_bytes, and its consumers read the result: the CPU's standard kernel copies square tiles
  // transposed in registers, while a loop kernel reads such an operand a lane per cache line, gathered. 0 keeps
  // every transpose an index map.
  std::int64_t strided_transpose_bytes = 0;
  // Column kernels: a reduction over a run of axes before the kept last axis, computed with its producers.
  bool column_kernels = false;
  // Attention kernels: a matmul, a row kernel over its rows and a second matmul, a strip of rows at a time, the
  // strip's scores kept in memory of the kernel's own; none where this is empty.
  std::optional<AttentionMemory> attention;
  // A GEMM that gathers its left operand from views of values in memory (a convolution's windows): a concat along
  // the last axis of slices of values in memory, zero-padded along leading axes, read as the GEMM packs it.
  bool gathered_gemm_operands = false;
  // Loop kernels that read a padded value (pad()'s concat of constants around a value in memory) in place: the
  // constant where the index map falls on the padding, the value elsewhere.
  bool padding_in_place = true;
  // GEMM epilogues that read their inputs at any index map a loop kernel does, row by row: values recomputed there
  // (a strided window of a pool's input) and paddings read in place (the CPU's; the CUDA epilogue kernels are not
  // yet checked on a device for either).
  bool epilogues_as_loops = false;
  // Kernels that write a concat's operands into its buffer (a concat that its consumers cannot read piecewise).
  bool concats_in_place = false;
  // Loop kernels that read a concat piecewise: the space run as boxes, one operand read in each (plan.h's
  // SpaceBox), so the concat is never written and its operands' producers are computed in their boxes.
  bool concat_pieces = false;
  // take_along_axis in loop and row kernels: an index map whose gathered axis is read from the indices, the
  // values read where they lie in memory (a cross-entropy's picked logit in the logits' row kernel).
  bool gathers_in_kernels = false;
  // 16-bit products the GEMM kernels take as they are, summing in f32: bf16 in the CPU's AMX tiles or AVX512_BF16
  // dot products (kernels/cpu/gemm_bf16.h), bf16 and f16 on a GPU's tensor cores (kernels/cuda/matmul.cu). Any other
  // 16-bit matmul becomes an f32 product of widened operands (widen_half_precision.h).
  bool bf16_products = false;
  bool f16_products = false;

  // Whether the GEMM kernels multiply operands of `dtype` as they are: f32, and the 16-bit types above.
  bool multiplies(DType dtype) const {
    return dtype == DType::f32 || (dtype == DType::bf16 && bf16_products) || (dtype == DType::f16 && f16_products);
  }
};

// What the code generators for `device` can run.
BackendCapabilities capabilities(Device device);

// `graph` must be optimized (simplify has turned expand_dims and squeeze into reshape) and free of host ops and
// dynamic shapes.
FusionPlan fuse(const ir::Graph& graph, const BackendCapabilities& capabilities = {});

// Whether the generated GEMM computes `matmul`: of a dtype the backend multiplies (f32, and bf16 or f16 where
// `capabilities` say so), a 2-D right operand, and a left operand that is 2-D or,
// untransposed, of higher rank. Its leading axes are then more rows of one product ([batch, tokens, width] times
// [width, hidden]: a dense layer on a batch of sequences), which is how XLA folds them into a dot's rows; the
// left operand is read from memory, densely, so its rows are consecutive.
bool is_generated_gemm(const ir::Graph& graph, const ir::Node& matmul, const BackendCapabilities& capabilities);

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

// True for nodes that only move or produce data without arithmetic and are
// recomputed wherever used: constants, iota, and broadcasts, transposes,
// slices and reshapes of such nodes or of parameters; and paddings of those
// (cheap to read under a slice; a padding itself is read in place only where
// the scheduler's read_through_padding allows).
bool is_cheap(const ir::Graph& graph, ir::ValueId value);

// True if `node` is a reshape that only inserts or removes size-1 axes (an
// index map can follow it through a computed value).
bool is_unit_reshape(const ir::Graph& graph, const ir::Node& node);

// For a reduction (axes, not argmax's axis) over the trailing axes of its input, how many it reduces; -1 otherwise.
int trailing_reduced_axes(const ir::Graph& graph, const ir::Node& node);

}  // namespace kiln::compiler
