// The CUDA simulator's cuBLAS (tools/cuda-simulator/README.md): the calls
// kiln makes (src/runtime/cuda/cuda_context.cpp, src/kernels/cuda/matmul.cu,
// src/kernels/cuda/blas_lt.cpp, tools/kiln-bench/device_timing.cpp), with the
// real library's C signatures: handles and their streams, the status texts,
// and cublasGemmEx and cublasGemmStridedBatchedEx, which check their arguments
// as cuBLAS documents and queue the product. The product, the checks both
// libraries make, and what is simulated: blas_product.h.

#include "blas_product.h"

#include <cublas_v2.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <optional>
#include <utility>

// What a cublasHandle_t points at (the header declares the struct, the
// library defines it).
struct cublasContext {
  cudaStream_t stream = nullptr;  // cublasSetStream's; nullptr: the default stream
};

namespace kiln::cuda_simulator::blas {
namespace {

// ---- cuBLAS ---------------------------------------------------------------------------

struct StatusText {
  cublasStatus_t status;
  const char* name;
  const char* description;  // cuBLAS's words
};

constexpr StatusText status_texts[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid numeric value was used as an argument"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "an absent device architectural feature is required"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "error detected trying to check the license"},
};

const StatusText& text_of(cublasStatus_t status) {
  static constexpr StatusText unknown{CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_UNKNOWN", "unknown error"};
  for (const StatusText& text : status_texts)
    if (text.status == status) return text;
  return unknown;
}

cublasContext* find_handle(cublasHandle_t handle) { return handle ? registry<cublasContext>().find(handle) : nullptr; }

// What cuBLAS checks before it touches memory: the operations, sizes and
// leading dimensions (INVALID_VALUE), then the types, compute type and
// algorithm (NOT_SUPPORTED: only kiln's, CUBLAS_GEMM_DEFAULT among the
// algorithms). Fills in the rest of `gemm`, whose sizes and matrices are set.
cublasStatus_t check_gemm(cublasOperation_t transa, cublasOperation_t transb, cudaDataType a_type, cudaDataType b_type,
                          cudaDataType c_type, cublasComputeType_t compute, cublasGemmAlgo_t algorithm, Gemm& gemm) {
  if (cublasStatus_t status = read_operation(transa, gemm.transpose_a)) return status;
  if (cublasStatus_t status = read_operation(transb, gemm.transpose_b)) return status;
  if (gemm.m < 0 || gemm.n < 0 || gemm.k < 0 || gemm.batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int64_t a_rows = gemm.transpose_a ? gemm.k : gemm.m, b_rows = gemm.transpose_b ? gemm.n : gemm.k;
  if (gemm.a.leading < std::max<int64_t>(1, a_rows) || gemm.b.leading < std::max<int64_t>(1, b_rows) ||
      gemm.c.leading < std::max<int64_t>(1, gemm.m))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::optional<Precision> precision = precision_of(compute);
  if (!precision) return CUBLAS_STATUS_NOT_SUPPORTED;
  const std::optional<Element> operands = element_of(a_type);
  const std::optional<Element> result = element_of(c_type);
  if (!operands || element_of(b_type) != operands || !operands_fit(*precision, *operands) || !result ||
      !results_fit(*precision, *operands, *result))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algorithm != CUBLAS_GEMM_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
  gemm.element = precision->element;
  gemm.operands = *operands;
  gemm.result = *result;
  gemm.tf32 = precision->tf32;
  return CUBLAS_STATUS_SUCCESS;
}

// Reads alpha and beta and queues the product on the handle's stream.
cublasStatus_t queue_gemm(const cublasContext& context, const void* alpha, const void* beta, Gemm& gemm) {
  if (!alpha || !beta || !host_scalars(alpha, beta, gemm.element)) return CUBLAS_STATUS_INVALID_VALUE;
  if (gemm.m == 0 || gemm.n == 0 || gemm.batch == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to write
  gemm.alpha = read_scalar(alpha, gemm.element);
  gemm.beta = read_scalar(beta, gemm.element);
  if (!operands_on_device(gemm)) return CUBLAS_STATUS_INVALID_VALUE;  // D is C: written whatever beta is
  enqueue_product(context.stream, gemm);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace kiln::cuda_simulator::blas

using namespace kiln::cuda_simulator::blas;

// ---- cuBLAS entry points (extern "C" by their declarations) -----------------------------

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  auto context = std::make_unique<cublasContext>();
  *handle = context.get();
  registry<cublasContext>().add(*handle, std::move(context));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle || !registry<cublasContext>().remove(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  cublasContext* context = find_handle(handle);
  if (!context) return CUBLAS_STATUS_NOT_INITIALIZED;
  context->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) { return text_of(status).name; }

const char* cublasGetStatusString(cublasStatus_t status) { return text_of(status).description; }

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                                    Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount, cublasComputeType_t computeType,
                                          cublasGemmAlgo_t algo) {
  const cublasContext* context = find_handle(handle);
  if (!context) return CUBLAS_STATUS_NOT_INITIALIZED;
  Gemm gemm{.m = m, .n = n, .k = k, .batch = batchCount};
  gemm.a = {A, lda, strideA};
  gemm.b = {B, ldb, strideB};
  gemm.c = {C, ldc, strideC};
  gemm.d = {C, ldc, strideC};
  if (cublasStatus_t status = check_gemm(transa, transb, Atype, Btype, Ctype, computeType, algo, gemm)) return status;
  return queue_gemm(*context, alpha, beta, gemm);
}
