// CUDA matmul: batched matrix products over the last two axes, batch axes
// broadcast (NumPy).
//
// The batch is planned on the host (plan.h) as runs of items whose operand
// offsets advance by constant strides -- the whole batch when nothing is
// broadcast or one operand is broadcast along every batch axis -- and each
// run is one call.
//
// f32/f64 go through cuBLASLt with a timed choice of algorithm (blas_lt.h),
// as do bf16 and f16 operands (their tensor cores, the sums in f32, an f32 product),
// or cuBLAS (cublasGemmStridedBatchedEx; cublasGemmEx for a single matrix)
// for what cuBLASLt does not take. kiln's arrays are row-major and cuBLAS is column-major, so
// C = A B is computed as C^T = B^T A^T: the row-major buffers read as the
// transposed column-major matrices, with the operands swapped. f32 uses the
// TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32) while
// kiln::config::allow_tf32 is true, CUBLAS_COMPUTE_32F (full f32) when it is
// false; f64 uses CUBLAS_COMPUTE_64F.
//
// i32/i64 use a plain 16x16 shared-memory tiled kernel in unsigned
// arithmetic (wraparound, as the CPU kernel), exact in any order.

#include "kernels/cuda/blas_lt.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

#include <kiln/config.h>

#include <climits>
#include <mutex>

namespace kiln::kernels::cuda {
namespace {

using runtime::Array;
using std::int64_t;

// ---- f32 / f64 through cuBLAS ------------------------------------------------------------

// `Operand` is T, or std::uint16_t for bf16 and f16 operands (`operands`) of an f32 product.
template <class T, class Operand = T>
void blas_matmul(runtime::cuda::DeviceContext& context, const MatmulPlan& plan, bool transpose_a, bool transpose_b,
                 const Operand* a, const Operand* b, T* c, DType operands = dtype_of<T>) {
  const int64_t lda = transpose_a ? plan.m : plan.k;
  const int64_t ldb = transpose_b ? plan.k : plan.n;
  for (int64_t size : {plan.m, plan.n, plan.k, lda, ldb})
    if (size > INT_MAX)
      throw ValueError("matmul", "matrix dimension " + std::to_string(size) + " exceeds cuBLAS's 32-bit limit",
                       std::string());
  constexpr bool is_f32 = std::is_same_v<T, float>;
  const bool tf32 = is_f32 && config::allow_tf32.load();
  const int64_t c_size = plan.m * plan.n;

  std::lock_guard lock(context.cublas_mutex);
  runtime::cuda::DeviceGuard guard(context.index);
  for (const BatchRun& run : plan.runs) {
    for (int64_t done = 0; done < run.count;) {
      const int64_t count = std::min<int64_t>(run.count - done, INT_MAX);
      const Operand* a_first = a + run.a_offset + done * run.a_stride;
      const Operand* b_first = b + run.b_offset + done * run.b_stride;
      T* c_first = c + (run.first + done) * c_size;
      GemmProblem problem{.transpose_a = transpose_a,
                          .transpose_b = transpose_b,
                          .m = plan.m,
                          .n = plan.n,
                          .k = plan.k,
                          .batch = count,
                          .stride_a = run.a_stride,
                          .stride_b = run.b_stride,
                          .stride_c = c_size,
                          .dtype = is_f32 ? DType::f32 : DType::f64,
                          .operands = operands,
                          .tf32 = tf32};
      if (lt_matmul(context, problem, a_first, b_first, c_first)) {
        done += count;
        continue;
      }
      runtime::cuda::check(cublas_matmul(context, problem, a_first, b_first, c_first),
                           count == 1 ? "cublasGemmEx" : "cublasGemmStridedBatchedEx", "matmul");
      done += count;
    }
  }
}

// ---- i32 / i64: tiled kernel -------------------------------------------------------------

constexpr int tile = 16;

template <class T>
__global__ void integer_matmul_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int64_t m,
                                      int64_t n, int64_t k, bool transpose_a, bool transpose_b, BatchRun run) {
  using U = Unsigned<T>;  // wraps like two's complement
  __shared__ U a_tile[tile][tile];
  __shared__ U b_tile[tile][tile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  // Every loop bound below is uniform across the block, so the barriers are safe.
  for (int64_t item = blockIdx.z; item < run.count; item += gridDim.z) {
    const T* a_item = a + run.a_offset + item * run.a_stride;
    const T* b_item = b + run.b_offset + item * run.b_stride;
    T* c_item = c + (run.first + item) * m * n;
    for (int64_t row0 = static_cast<int64_t>(blockIdx.y) * tile; row0 < m; row0 += static_cast<int64_t>(gridDim.y) * tile) {
      for (int64_t col0 = static_cast<int64_t>(blockIdx.x) * tile; col0 < n;
           col0 += static_cast<int64_t>(gridDim.x) * tile) {
        const int64_t row = row0 + ty, col = col0 + tx;
        U sum = 0;
        for (int64_t k0 = 0; k0 < k; k0 += tile) {
          const int64_t a_col = k0 + tx, b_row = k0 + ty;
          U a_value = 0, b_value = 0;
          if (row < m && a_col < k)
            a_value = static_cast<U>(transpose_a ? a_item[a_col * m + row] : a_item[row * k + a_col]);
          if (b_row < k && col < n)
            b_value = static_cast<U>(transpose_b ? b_item[col * k + b_row] : b_item[b_row * n + col]);
          a_tile[ty][tx] = a_value;
          b_tile[ty][tx] = b_value;
          __syncthreads();
#pragma unroll
          for (int i = 0; i < tile; ++i) sum += a_tile[ty][i] * b_tile[i][tx];
          __syncthreads();
        }
        if (row < m && col < n) c_item[row * n + col] = static_cast<T>(sum);
      }
    }
  }
}

template <class T>
void integer_matmul(runtime::cuda::DeviceContext& context, const MatmulPlan& plan, bool transpose_a, bool transpose_b,
                    const T* a, const T* b, T* c) {
  const int64_t column_tiles = (plan.n + tile - 1) / tile, row_tiles = (plan.m + tile - 1) / tile;
  for (const BatchRun& run : plan.runs) {
    dim3 blocks(static_cast<unsigned>(std::min<int64_t>(column_tiles, INT_MAX)),
                static_cast<unsigned>(std::min<int64_t>(row_tiles, 65535)),
                static_cast<unsigned>(std::min<int64_t>(run.count, 65535)));
    launch_grid("matmul", context, blocks, dim3(tile, tile), &integer_matmul_kernel<T>, a, b, c, plan.m, plan.n,
                plan.k, transpose_a, transpose_b, run);
  }
}

}  // namespace

void matmul(bool transpose_a, bool transpose_b, const Array& a, const Array& b, const Array& output) {
  const bool half_operands = is_half_precision(a.dtype) && output.dtype == DType::f32;
  if (a.dtype != b.dtype || (a.dtype != output.dtype && !half_operands))
    internal_error("matmul", "operands differ in dtype");
  const MatmulPlan plan = plan_matmul(transpose_a, transpose_b, a.shape, b.shape, output.shape);
  if (plan.batch == 0 || plan.m == 0 || plan.n == 0) return;
  auto& context = context_of(output, "matmul");
  if (plan.k == 0) {  // an empty sum: zeros
    runtime::cuda::DeviceGuard guard(context.index);
    runtime::cuda::check(cudaMemsetAsync(output.mutable_raw(), 0, output.bytes(), context.stream), "cudaMemsetAsync",
                         "matmul");
    return;
  }
  if (half_operands) {
    blas_matmul(context, plan, transpose_a, transpose_b, a.data<std::uint16_t>(), b.data<std::uint16_t>(),
                output.mutable_data<float>(), a.dtype);
    return;
  }
  switch (output.dtype) {
    case DType::f32:
      blas_matmul(context, plan, transpose_a, transpose_b, a.data<float>(), b.data<float>(), output.mutable_data<float>());
      break;
    case DType::f64:
      blas_matmul(context, plan, transpose_a, transpose_b, a.data<double>(), b.data<double>(),
                  output.mutable_data<double>());
      break;
    case DType::i32:
      integer_matmul(context, plan, transpose_a, transpose_b, a.data<std::int32_t>(), b.data<std::int32_t>(),
                     output.mutable_data<std::int32_t>());
      break;
    case DType::i64:
      integer_matmul(context, plan, transpose_a, transpose_b, a.data<std::int64_t>(), b.data<std::int64_t>(),
                     output.mutable_data<std::int64_t>());
      break;
    case DType::boolean: throw DTypeError("matmul", "does not accept bool operands", std::string());
    case DType::bf16:
    case DType::f16: detail::half_precision_unsupported(output.dtype);
  }
}

const char* to_string(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::none: return "none";
    case GemmEpilogue::bias: return "bias";
    case GemmEpilogue::relu: return "relu";
    case GemmEpilogue::bias_relu: return "bias + relu";
  }
  return "?";
}

bool matmul_with_epilogue(bool transpose_a, bool transpose_b, const Array& a, const Array& b, GemmEpilogue epilogue,
                          const Array& bias, const Array& output) {
  if (a.dtype != DType::f32 || b.dtype != DType::f32 || output.dtype != DType::f32 || a.shape.rank() != 2 ||
      b.shape.rank() != 2 || output.shape.rank() != 2)
    return false;
  const MatmulPlan plan = plan_matmul(transpose_a, transpose_b, a.shape, b.shape, output.shape);
  if (plan.m == 0 || plan.n == 0 || plan.k == 0) return false;
  for (int64_t size : {plan.m, plan.n, plan.k})
    if (size > INT_MAX) return false;
  const bool with_bias = has_bias(epilogue);
  if (with_bias && (bias.dtype != DType::f32 || bias.shape.numel() != plan.n)) return false;
  auto& context = context_of(output, "matmul");
  GemmProblem problem{.transpose_a = transpose_a,
                      .transpose_b = transpose_b,
                      .m = plan.m,
                      .n = plan.n,
                      .k = plan.k,
                      .stride_c = plan.m * plan.n,
                      .dtype = DType::f32,
                      .tf32 = config::allow_tf32.load(),
                      .epilogue = epilogue,
                      .bias = with_bias ? bias.raw() : nullptr};
  std::lock_guard lock(context.cublas_mutex);
  return lt_matmul(context, problem, a.raw(), b.raw(), output.mutable_raw());
}

}  // namespace kiln::kernels::cuda
