#pragma once
// f32/f64 matmuls (and bf16/f16 products summed in f32) through cuBLASLt, with the algorithm chosen by timing.
//
// cublasGemmEx runs the first algorithm of cuBLAS's heuristic. For a large
// product the heuristic's first choice is often a few percent slower than
// its third or fifth (tile shapes, split-K, swizzling that the model ranks
// wrong on a given GPU), and XLA and PyTorch's autotuners time the
// candidates. kiln does too: the first time a process meets a problem
// (sizes, transposes, batch, dtype, precision, GPU) large enough for the
// choice to matter, it times the heuristic's candidates on the call's own
// buffers (the first 8, then up to 32 within about 1 s of GPU time) and
// keeps the fastest for the rest of the process. The tuning costs a few
// runs of each candidate once (the first call waits for them); it runs only
// on products of at least 2^30 flops, where a run takes over 20 us.
//
// Which algorithm wins can differ between processes when two are within the
// timing noise, and two algorithms may round differently (the order of the
// k-sums), so results are reproducible within a process but not always
// across processes. KILN_CUDA_GEMM_AUTOTUNE=0 skips the timing and takes the
// heuristic's first choice: reproducible run to run on one GPU and driver.
//
// cuBLASLt is column-major and kiln row-major; the problem is mapped as in
// matmul.cu (C^T = B^T A^T).

#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_context.h"

#include <kiln/dtype.h>

#include <cstdint>

namespace kiln::kernels::cuda {

// C[m, n] = op(A)[m, k] op(B)[k, n], all row-major, `batch` times with the
// given element strides between consecutive matrices.
struct GemmProblem {
  bool transpose_a = false, transpose_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  DType dtype = DType::f32;     // C's (and the sums'): f32 or f64
  DType operands = DType::f32;  // A's and B's: dtype, or bf16 or f16 with dtype f32 (their tensor cores, f32 sums)
  bool tf32 = false;            // f32 operands on the TF32 tensor cores
  GemmEpilogue epilogue = GemmEpilogue::none;  // f32 single matrices only (batch 1)
  const void* bias = nullptr;                  // f32[n] for the bias epilogues
};

// Queues the product on `context`'s stream through cuBLASLt and returns
// true, or returns false having queued nothing when cuBLASLt cannot take the
// problem (no algorithm, a broadcast batch operand, a dimension over 2^31);
// the caller then uses cublasGemmEx. Call with context.cublas_mutex held.
// Throws DeviceError (op "matmul") when a cuBLASLt call fails.
bool lt_matmul(runtime::cuda::DeviceContext& context, const GemmProblem& problem, const void* a, const void* b,
               void* c);

// Queues the product (no epilogue) through cuBLAS's own choice of algorithm:
// cublasGemmEx, or cublasGemmStridedBatchedEx for a batch (which takes a
// broadcast operand, batch stride 0). What runs when lt_matmul returns false,
// and what its tuning races. Call with context.cublas_mutex held.
cublasStatus_t cublas_matmul(runtime::cuda::DeviceContext& context, const GemmProblem& problem, const void* a,
                             const void* b, void* c);

}  // namespace kiln::kernels::cuda
