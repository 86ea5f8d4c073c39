#pragma once
// CUDA kernels, one entry point per op family, mirroring the CPU kernels
// (kernels/cpu/cpu_kernels.h) with the same semantics bit for bit where the
// arithmetic is exact: integer wraparound (unsigned math), NaN-propagating
// maximum/minimum, saturating float-to-integer casts with NaN -> 0, integer
// pow by squaring, NumPy broadcasting. Each writes into an output array on
// the same GPU, allocated by the caller with the node's result type. Work is
// queued on the device's stream (runtime/cuda/cuda_context.h): the functions
// return before the GPU has finished, except nonzero, whose result size
// comes back to the host, and gather, whose index check does.
//
// Float transcendentals are CUDA's own (sinf, expf, ...; sin, exp, ... for
// f64), never the fast intrinsics, except f32 erfc, which is kiln's
// (erfc.cuh: the CPU's method, within 3 ULP, in fewer instructions). Their maximum errors, from the CUDA C++
// Programming Guide's tables (Mathematical Functions appendix; "generated
// from extensive but not exhaustive tests"), in ULP over the full range:
// f32 sinf 2, cosf 2, expf 2, logf 1, tanhf 2, erff 2, erfcf 4, log1pf 1,
// expm1f 1, atanf 2, powf 8; f64 sin 1, cos 1, exp 1, log 1, tanh 1, erf 2,
// erfc 5, log1p 1, expm1 1, atan 2, pow 2. Division
// and sqrt are IEEE correctly rounded (nvcc's defaults -prec-div and
// -prec-sqrt), so +, -, *, /, sqrt, rsqrt (= 1 / sqrt), floor and ceil equal
// the CPU's exactly; kiln's CUDA code is built with --fmad=false so no
// multiply-add is fused behind its back (the CPU's -ffp-contract=off).
// sigmoid is 1 / (1 + exp(-x)). The CPU's f32 functions are within 2-4 ULP
// of exact (vector_math.h), so CPU and GPU f32 results differ by at most a
// few ULP.
//
// Reductions are deterministic: the partition of the work (elements per
// thread, per block, per pass) depends on the shape only, never on the GPU
// or the run; floats are combined in fixed trees, without atomics. Their
// summation order differs from the CPU's (reassociation only).

#include "ir/graph.h"
#include "kernels/kernels.h"
#include "runtime/buffer.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace kiln::kernels::cuda {

// ---- elementwise (elementwise.cu, elementwise_binary.cu) ----------------------
void unary(ir::Op op, const runtime::Array& input, const runtime::Array& output);
void binary(ir::Op op, const runtime::Array& a, const runtime::Array& b, const runtime::Array& output);
void select(const runtime::Array& condition, const runtime::Array& a, const runtime::Array& b,
            const runtime::Array& output);
void cast(const runtime::Array& input, const runtime::Array& output);
void fill(const ir::Attributes& attributes, const runtime::Array& output);
void iota(std::int64_t axis, const runtime::Array& output);

// ---- reductions (reduction.cu) --------------------------------------------------
void reduce(ir::Op op, const std::vector<std::int64_t>& axes, const runtime::Array& input,
            const runtime::Array& output);
// argmax or argmin (`op`), as the CPU's arg_reduce.
// cumsum, cumprod, cummax or cummin along attributes.axis (scan.cu), as the CPU's scan: each line combined in
// order, so sums agree with the CPU's bit for bit.
void scan(ir::Op op, const ir::Attributes& attributes, const runtime::Array& input, const runtime::Array& output);
void arg_reduce(ir::Op op, std::int64_t axis, const runtime::Array& input, const runtime::Array& output);

// ---- orderings (sort.cu) ----------------------------------------------------------
// sort or argsort along attributes.axis and top_k's indices, as the CPU's (kernels/cpu/cpu_kernels.h): the same
// keys (kernels/sort_keys.h) and the same one order, so the results equal the CPU's bit for bit.
void sort(ir::Op op, const ir::Attributes& attributes, const runtime::Array& input, const runtime::Array& output);
void top_k(std::int64_t k, const runtime::Array& input, const runtime::Array& output);

// ---- matmul (matmul.cu) ---------------------------------------------------------
// f32/f64 through cuBLAS (strided-batched GEMMs; TF32 for f32 when
// kiln::config::allow_tf32), i32/i64 through a tiled kernel. bf16 or f16
// operands (both the same) with an f32 output: their tensor cores, f32 sums.
void matmul(bool transpose_a, bool transpose_b, const runtime::Array& a, const runtime::Array& b,
            const runtime::Array& output);

// What cuBLASLt can apply to a product before writing it (its epilogues):
// a bias vector along the rows (output[i, j] = product[i, j] + bias[j]),
// then relu. The relu epilogue keeps a NaN product NaN, as kiln's relu
// does: cuBLASLt does not document it, so the H200 test
// CudaJit.ReluEpiloguesKeepANanProductAsKilnsReluDoes checks it (the relu,
// the bias + relu, the tuner's race, TF32 on and off).
enum class GemmEpilogue { none, bias, relu, bias_relu };
inline bool has_bias(GemmEpilogue epilogue) {
  return epilogue == GemmEpilogue::bias || epilogue == GemmEpilogue::bias_relu;
}
const char* to_string(GemmEpilogue epilogue);

// output = epilogue(op(a) op(b) [+ bias]) for f32 matrices (rank 2) in one
// cuBLASLt call. Returns false having queued nothing when cuBLASLt cannot
// (the caller then computes the product and the epilogue separately).
// `bias` is f32[n] (an empty Array without a bias epilogue).
bool matmul_with_epilogue(bool transpose_a, bool transpose_b, const runtime::Array& a, const runtime::Array& b,
                          GemmEpilogue epilogue, const runtime::Array& bias, const runtime::Array& output);

// ---- shape ops (shape_kernels.cu) -------------------------------------------------
void transpose(const std::vector<std::int64_t>& permutation, const runtime::Array& input,
               const runtime::Array& output);
void broadcast_to(const runtime::Array& input, const runtime::Array& output);
void slice(const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& step,
           const runtime::Array& input, const runtime::Array& output);
void concat(std::int64_t axis, std::span<const runtime::Array> inputs, const runtime::Array& output);
// output = params' slices along `axis` picked by `indices` (i32 or i64; negative ones count from the end): the
// indices are checked and made non-negative on the GPU, the slices copied, and the first index outside [-n, n), if
// any, read back -- so the call waits for the GPU, and the output is not to be used when one is reported.
std::optional<OutOfRangeIndex> take_along_axis(std::int64_t axis, const runtime::Array& values,
                                               const runtime::Array& indices, const runtime::Array& output);
std::optional<OutOfRangeIndex> gather(std::int64_t axis, const runtime::Array& params, const runtime::Array& indices,
                                      const runtime::Array& output);
// output = operand with each slice of `updates` [outer, count, inner] added at operand [outer, indices[j], inner]
// (gather's adjoint): a thread per column (outer, inner) adds its updates in index order, the CPU's order, without
// atomics. Indices are checked as gather's, so the call waits for the GPU.
std::optional<OutOfRangeIndex> scatter_add(std::int64_t axis, const runtime::Array& operand,
                                           const runtime::Array& indices, const runtime::Array& updates,
                                           const runtime::Array& output);
// Allocates and returns the i64 [count, rank] indices of nonzero elements, in
// row-major order: a count per block, a scan on the host (which needs the
// total anyway to size the result), then each block writes its indices.
runtime::Array nonzero(const runtime::Array& input);

// ---- random numbers (random.cu) ---------------------------------------------------
// The counter-based Philox-4x32-10 scheme of src/api/random.cpp, element for
// element: uniform values equal the CPU's bit for bit; normal values use
// CUDA's double log/sin/cos (1 ULP in f64), so f32 results equal the CPU's
// except in the rare case where that ULP crosses an f32 rounding boundary,
// and f64 results agree within a few ULP of |mean| + |stddev * z| (the sum
// cancels near 0). `output` is f32 or f64.
void random_normal(std::uint64_t seed, double mean, double stddev, const runtime::Array& output);
void random_uniform(std::uint64_t seed, double low, double high, const runtime::Array& output);

}  // namespace kiln::kernels::cuda
