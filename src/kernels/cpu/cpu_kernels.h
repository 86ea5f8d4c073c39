#pragma once
// CPU kernels, one entry point per op family. Each writes into an output
// array allocated by the caller with the node's result type; arrays are
// dense and row-major. Every kernel is vectorized where it matters and
// multithreaded through runtime::parallel_for; float transcendentals use
// vector_math.h, the same functions the JIT's generated code uses.

#include "ir/graph.h"
#include "kernels/kernels.h"
#include "runtime/buffer.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kiln::kernels::cpu {

// ---- elementwise (elementwise.cpp, elementwise_binary.cpp) -------------------
// Unary ops of the `elementwise` category with one operand, except cast.
void unary(ir::Op op, const runtime::Array& input, const runtime::Array& output);
// Binary elementwise ops (add ... logical_or) with NumPy broadcasting of
// `a` and `b` to output.shape.
void binary(ir::Op op, const runtime::Array& a, const runtime::Array& b, const runtime::Array& output);
// where(cond, a, b) with broadcasting of all three to output.shape.
void select(const runtime::Array& condition, const runtime::Array& a, const runtime::Array& b,
            const runtime::Array& output);
// Converts to output.dtype (float to int truncates toward zero; to bool: != 0).
void cast(const runtime::Array& input, const runtime::Array& output);
// Fills `output` with the constant of `attributes` (float_value for float
// dtypes, int_value otherwise).
void fill(const ir::Attributes& attributes, const runtime::Array& output);
// output[..., i, ...] = i along `axis`.
void iota(std::int64_t axis, const runtime::Array& output);

// ---- reductions (reduction.cpp) -------------------------------------------
// reduce_sum/mean/max/min/prod over sorted `axes` of input into output (its
// shape with or without kept dims: only the element count matters).
// Deterministic: the summation order depends on the shape only, never on
// the thread count.
void reduce(ir::Op op, const std::vector<std::int64_t>& axes, const runtime::Array& input,
            const runtime::Array& output);
// argmax or argmin (`op`) along `axis`: the i64 index of the first largest or smallest element, a NaN counting
// as both (the first NaN wins, as NumPy's).
void arg_reduce(ir::Op op, std::int64_t axis, const runtime::Array& input, const runtime::Array& output);

// ---- scans (scan.cpp) -----------------------------------------------------------
// cumsum, cumprod, cummax or cummin (`op`) of input along attributes.axis, with attributes.exclusive and
// .reverse, into output (input's dtype and shape). Each line is combined in order (deterministic); integer sums
// and products wrap; cummax and cummin keep the first NaN.
void scan(ir::Op op, const ir::Attributes& attributes, const runtime::Array& input, const runtime::Array& output);

// ---- orderings (sort.cpp) --------------------------------------------------------
// sort or argsort (`op`) of input along attributes.axis, largest first with attributes.descending, into output
// (sort: input's dtype; argsort: i64; input's shape). The order is kernels/sort_keys.h's: NaN above every number,
// -0 equal to +0, equal elements in index order (stable) -- one answer, equal to the CUDA kernels' bit for bit.
void sort(ir::Op op, const ir::Attributes& attributes, const runtime::Array& input, const runtime::Array& output);
// top_k's indices: output (i64 [..., k]) holds the indices of the k largest elements along input's last axis,
// largest first, a tie won by the lower index, NaN the largest. k outside [0, n] is a ValueError.
void top_k(std::int64_t k, const runtime::Array& input, const runtime::Array& output);

// ---- matmul (matmul.cpp, blas.cpp) -------------------------------------------
// Batched matrix product over the last two axes, batch axes broadcast. bf16 operands give an f32 output, or a bf16 one
// (the f32 sums rounded once, as a cast rounds them), in AMX tiles or AVX512_BF16 dot products: only where
// gemm_bf16.h's has_bf16_products().
void matmul(bool transpose_a, bool transpose_b, const runtime::Array& a, const runtime::Array& b,
            const runtime::Array& output);

// ---- shape ops (shape_kernels.cpp) -------------------------------------------
void transpose(const std::vector<std::int64_t>& permutation, const runtime::Array& input,
               const runtime::Array& output);
void broadcast_to(const runtime::Array& input, const runtime::Array& output);
void slice(const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& step,
           const runtime::Array& input, const runtime::Array& output);
// Inputs marked in `in_place` are already in their slice of `output` (written there by the kernels computing
// them; their arrays need only dtype and shape) and are not copied.
void concat(std::int64_t axis, std::span<const runtime::Array> inputs, const runtime::Array& output,
            const std::vector<bool>& in_place = {});
// output = params' slices along `axis` picked by `indices` (i32 or i64; negative ones count from the end). An index
// outside [-n, n) is reported, before anything is written.
std::optional<OutOfRangeIndex> gather(std::int64_t axis, const runtime::Array& params, const runtime::Array& indices,
                                      const runtime::Array& output);
// output[o, j, i] = values[o, indices[o, j, i], i] around `axis` (NumPy's take_along_axis; negative indices count
// from the end). An index outside [-n, n) is reported, before anything is written.
std::optional<OutOfRangeIndex> take_along_axis(std::int64_t axis, const runtime::Array& values,
                                               const runtime::Array& indices, const runtime::Array& output);
// output = operand with each slice of `updates` [outer, count, inner] added at operand [outer, indices[j], inner]
// (gather's adjoint; negative indices count from the end). Slices that meet at one row are added in index order,
// whatever the thread count. An index outside [-n, n) is reported, before anything is written.
std::optional<OutOfRangeIndex> scatter_add(std::int64_t axis, const runtime::Array& operand,
                                           const runtime::Array& indices, const runtime::Array& updates,
                                           const runtime::Array& output);
// Allocates and returns the i64 [count, rank] indices of nonzero elements.
runtime::Array nonzero(const runtime::Array& input);

}  // namespace kiln::kernels::cpu
