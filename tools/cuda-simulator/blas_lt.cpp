// The CUDA simulator's cuBLASLt (tools/cuda-simulator/README.md): the calls
// kiln makes (src/kernels/cuda/blas_lt.cpp), with the real library's C
// signatures: the handle, the matmul, layout and preference descriptors and
// their attributes, the heuristic and the algorithm it packs, and
// cublasLtMatmul, which checks its arguments as cuBLASLt documents and queues
// the product. The product, the checks both libraries make, and what is
// simulated: blas_product.h.

#include "blas_product.h"

#include <cublasLt.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

// What a cublasLtHandle_t points at: cuBLASLt keeps no state here (the
// stream is an argument of cublasLtMatmul).
struct cublasLtContext {};

namespace kiln::cuda_simulator::blas {
namespace {

// ---- cuBLASLt descriptors -------------------------------------------------------------

struct MatmulDescription {
  cublasLtMatmulDescOpaque_t public_part{};
  int compute = CUBLAS_COMPUTE_32F;
  int scale_type = CUDA_R_32F;
  bool transpose_a = false, transpose_b = false;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  std::int32_t bias_type = -1;  // -1: D's type
};

struct MatrixLayout {
  cublasLtMatrixLayoutOpaque_t public_part{};
  int type = CUDA_R_32F;
  std::uint64_t rows = 0, columns = 0;
  int64_t leading = 0;
  std::int32_t batch_count = 1;
  int64_t batch_stride = 0;
};

struct MatmulPreference {
  cublasLtMatmulPreferenceOpaque_t public_part{};
  std::uint64_t max_workspace_bytes = 0;
  std::uint32_t alignment_a = 256, alignment_b = 256, alignment_c = 256, alignment_d = 256;  // cuBLASLt's defaults
};

struct EpilogueParts {
  Activation activation;
  bool bias;
};

std::optional<EpilogueParts> parts_of(cublasLtEpilogue_t epilogue) {
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
      return EpilogueParts{Activation::none, false};
    case CUBLASLT_EPILOGUE_RELU:
      return EpilogueParts{Activation::relu, false};
    case CUBLASLT_EPILOGUE_BIAS:
      return EpilogueParts{Activation::none, true};
    case CUBLASLT_EPILOGUE_RELU_BIAS:
      return EpilogueParts{Activation::relu, true};
    case CUBLASLT_EPILOGUE_GELU:
      return EpilogueParts{Activation::gelu, false};
    case CUBLASLT_EPILOGUE_GELU_BIAS:
      return EpilogueParts{Activation::gelu, true};
    default:
      return std::nullopt;  // the AUX, gradient and BGRAD epilogues: kiln uses none
  }
}

cublasStatus_t set_compute(MatmulDescription& description, const void* buffer, std::size_t size) {
  std::int32_t compute = 0;
  if (cublasStatus_t status = read_attribute(buffer, size, compute)) return status;
  if (!precision_of(compute)) return CUBLAS_STATUS_NOT_SUPPORTED;
  description.compute = compute;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t set_scale_type(MatmulDescription& description, const void* buffer, std::size_t size) {
  std::int32_t type = 0;
  if (cublasStatus_t status = read_attribute(buffer, size, type)) return status;
  if (!element_of(type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  description.scale_type = type;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t set_pointer_mode(const void* buffer, std::size_t size) {
  std::int32_t mode = 0;
  if (cublasStatus_t status = read_attribute(buffer, size, mode)) return status;
  return mode == CUBLASLT_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t set_transpose(bool& transpose, const void* buffer, std::size_t size) {
  std::int32_t operation = 0;
  if (cublasStatus_t status = read_attribute(buffer, size, operation)) return status;
  return read_operation(operation, transpose);
}

cublasStatus_t set_epilogue(MatmulDescription& description, const void* buffer, std::size_t size) {
  std::uint32_t epilogue = 0;
  if (cublasStatus_t status = read_attribute(buffer, size, epilogue)) return status;
  if (!parts_of(static_cast<cublasLtEpilogue_t>(epilogue))) return CUBLAS_STATUS_NOT_SUPPORTED;
  description.epilogue = static_cast<cublasLtEpilogue_t>(epilogue);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t set_bias_type(MatmulDescription& description, const void* buffer, std::size_t size) {
  std::int32_t type = 0;
  if (cublasStatus_t status = read_attribute(buffer, size, type)) return status;
  if (type != -1 && !element_of(type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  description.bias_type = type;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t set_attribute(MatmulDescription& description, cublasLtMatmulDescAttributes_t attribute,
                             const void* buffer, std::size_t size) {
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return set_compute(description, buffer, size);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return set_scale_type(description, buffer, size);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      return set_pointer_mode(buffer, size);
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return set_transpose(description.transpose_a, buffer, size);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return set_transpose(description.transpose_b, buffer, size);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return set_epilogue(description, buffer, size);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read_attribute(buffer, size, description.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return set_bias_type(description, buffer, size);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t set_attribute(MatrixLayout& layout, cublasLtMatrixLayoutAttribute_t attribute, const void* buffer,
                             std::size_t size) {
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: {
      std::uint32_t type = 0;
      if (cublasStatus_t status = read_attribute(buffer, size, type)) return status;
      if (!element_of(static_cast<int>(type))) return CUBLAS_STATUS_NOT_SUPPORTED;
      layout.type = static_cast<int>(type);
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      std::int32_t order = 0;
      if (cublasStatus_t status = read_attribute(buffer, size, order)) return status;
      return order == CUBLASLT_ORDER_COL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return read_attribute(buffer, size, layout.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return read_attribute(buffer, size, layout.columns);
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return read_attribute(buffer, size, layout.leading);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: {
      std::int32_t count = 0;
      if (cublasStatus_t status = read_attribute(buffer, size, count)) return status;
      if (count < 1) return CUBLAS_STATUS_INVALID_VALUE;
      layout.batch_count = count;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return read_attribute(buffer, size, layout.batch_stride);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // planar complex, pointer-array batches
  }
}

cublasStatus_t set_attribute(MatmulPreference& preference, cublasLtMatmulPreferenceAttributes_t attribute,
                             const void* buffer, std::size_t size) {
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_attribute(buffer, size, preference.max_workspace_bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return read_attribute(buffer, size, preference.alignment_a);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return read_attribute(buffer, size, preference.alignment_b);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return read_attribute(buffer, size, preference.alignment_c);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read_attribute(buffer, size, preference.alignment_d);
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

// ---- cuBLASLt problems ----------------------------------------------------------------

struct LtOperands {
  const MatmulDescription* description;
  const MatrixLayout *a, *b, *c, *d;
};

// The descriptors the caller's pointers name, or nullopt if any is not live.
std::optional<LtOperands> find_operands(cublasLtMatmulDesc_t description, cublasLtMatrixLayout_t a,
                                        cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
  LtOperands operands{registry<MatmulDescription>().find(description), registry<MatrixLayout>().find(a),
                      registry<MatrixLayout>().find(b), registry<MatrixLayout>().find(c),
                      registry<MatrixLayout>().find(d)};
  if (!operands.description || !operands.a || !operands.b || !operands.c || !operands.d) return std::nullopt;
  return operands;
}

// Types: C and D of the compute type's one data type, A and B of one type
// that fits it (operands_fit), and scale and bias types to match C (the bias
// has D's type unless set otherwise).
cublasStatus_t check_types(const LtOperands& operands, Precision& precision, Element& operand_element,
                           Element& result_element) {
  const MatmulDescription& description = *operands.description;
  std::optional<Precision> found = precision_of(description.compute);
  if (!found) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int type = found->element == Element::f32 ? CUDA_R_32F : CUDA_R_64F;
  const std::optional<Element> operand = element_of(operands.a->type), result = element_of(operands.c->type);
  if (!operand || operands.b->type != operands.a->type || !operands_fit(*found, *operand))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!result || operands.d->type != operands.c->type || !results_fit(*found, *operand, *result))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (description.scale_type != type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (description.bias_type != -1 && description.bias_type != type) return CUBLAS_STATUS_NOT_SUPPORTED;
  // kiln's epilogues are f32 only (src/kernels/cuda/blas_lt.cpp); which of
  // them cuBLASLt takes in f64 is not checked here, so none is offered.
  if (description.epilogue != CUBLASLT_EPILOGUE_DEFAULT && found->element == Element::f64)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  precision = *found;
  operand_element = *operand;
  result_element = *result;
  return CUBLAS_STATUS_SUCCESS;
}

bool fits_int32(std::uint64_t size) { return size <= static_cast<std::uint64_t>(INT_MAX); }

// Shapes: op(A) m x k, op(B) k x n, C and D m x n, one batch count, and each
// leading dimension at least its rows.
cublasStatus_t check_shapes(const LtOperands& operands) {
  const MatmulDescription& description = *operands.description;
  const MatrixLayout &a = *operands.a, &b = *operands.b, &c = *operands.c, &d = *operands.d;
  for (const MatrixLayout* layout : {&a, &b, &c, &d}) {
    if (!fits_int32(layout->rows) || !fits_int32(layout->columns)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (layout->leading < std::max<int64_t>(1, static_cast<int64_t>(layout->rows))) return CUBLAS_STATUS_INVALID_VALUE;
    if (layout->batch_count != d.batch_count) return CUBLAS_STATUS_INVALID_VALUE;
  }
  const std::uint64_t m = d.rows, n = d.columns;
  const std::uint64_t a_rows = description.transpose_a ? a.columns : a.rows;
  const std::uint64_t k = description.transpose_a ? a.rows : a.columns;
  const std::uint64_t b_rows = description.transpose_b ? b.columns : b.rows;
  const std::uint64_t b_columns = description.transpose_b ? b.rows : b.columns;
  if (c.rows != m || c.columns != n || a_rows != m || b_rows != k || b_columns != n) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// The product the descriptors describe, less its pointers and scalars.
cublasStatus_t describe(const LtOperands& operands, Gemm& gemm) {
  Precision precision{};
  Element operand_element = Element::f32, result_element = Element::f32;
  if (cublasStatus_t status = check_types(operands, precision, operand_element, result_element)) return status;
  if (cublasStatus_t status = check_shapes(operands)) return status;
  const MatmulDescription& description = *operands.description;
  const EpilogueParts epilogue = *parts_of(description.epilogue);
  gemm.element = precision.element;
  gemm.operands = operand_element;
  gemm.result = result_element;
  gemm.tf32 = precision.tf32;
  gemm.transpose_a = description.transpose_a;
  gemm.transpose_b = description.transpose_b;
  gemm.m = static_cast<int64_t>(operands.d->rows);
  gemm.n = static_cast<int64_t>(operands.d->columns);
  gemm.k = static_cast<int64_t>(description.transpose_a ? operands.a->rows : operands.a->columns);
  gemm.batch = operands.d->batch_count;
  gemm.a = {nullptr, operands.a->leading, operands.a->batch_stride};
  gemm.b = {nullptr, operands.b->leading, operands.b->batch_stride};
  gemm.c = {nullptr, operands.c->leading, operands.c->batch_stride};
  gemm.d = {nullptr, operands.d->leading, operands.d->batch_stride};
  gemm.activation = epilogue.activation;
  gemm.bias = epilogue.bias ? description.bias : nullptr;
  return CUBLAS_STATUS_SUCCESS;
}

bool has_bias(const MatmulDescription& description) { return parts_of(description.epilogue)->bias; }

// What cublasLtMatmulAlgoGetHeuristic writes into the algorithm it returns:
// a tag that tells it from anything else, and the alignment in bytes that
// the algorithm may rely on for each operand (the preference's, and the bias
// pointer's as the heuristic saw it, as cuBLASLt's heuristic reads it from
// the descriptor). cublasLtMatmul refuses operands aligned less, as a GPU
// kernel that loads them in wider pieces would fault.
struct Algorithm {
  std::uint64_t tag = 0;
  std::uint64_t alignment_a = 0, alignment_b = 0, alignment_c = 0, alignment_d = 0, alignment_bias = 0;
};
static_assert(sizeof(Algorithm) <= sizeof(cublasLtMatmulAlgo_t));
constexpr std::uint64_t algorithm_tag = 0x6b696c6e2d73696dull;  // "kiln-sim"

// The largest power of two (up to 256) that divides `pointer`.
std::uint64_t alignment_of(const void* pointer) {
  const std::uint64_t bits = reinterpret_cast<std::uintptr_t>(pointer) | 256u;
  return bits & (~bits + 1);
}

cublasLtMatmulAlgo_t pack(const Algorithm& algorithm) {
  cublasLtMatmulAlgo_t packed{};
  std::memcpy(packed.data, &algorithm, sizeof algorithm);
  return packed;
}

std::optional<Algorithm> unpack(const cublasLtMatmulAlgo_t& packed) {
  Algorithm algorithm;
  std::memcpy(&algorithm, packed.data, sizeof algorithm);
  if (algorithm.tag != algorithm_tag) return std::nullopt;
  return algorithm;
}

// Whether a matrix (and each batch item after it) is aligned to `required` bytes.
bool aligned(const void* pointer, int64_t batch, int64_t batch_stride, Element element, std::uint64_t required) {
  if (required <= 1) return true;
  if (reinterpret_cast<std::uintptr_t>(pointer) % required != 0) return false;
  const auto stride_bytes = static_cast<std::uint64_t>(std::abs(batch_stride)) * size_of(element);
  return batch == 1 || stride_bytes % required == 0;
}

bool meets_alignment(const Gemm& gemm, const Algorithm& algorithm) {
  auto ok = [&](const void* pointer, int64_t stride, std::uint64_t required, Element element) {
    return aligned(pointer, gemm.batch, stride, element, required);
  };
  return ok(gemm.a.data, gemm.a.batch_stride, algorithm.alignment_a, gemm.operands) &&
         ok(gemm.b.data, gemm.b.batch_stride, algorithm.alignment_b, gemm.operands) &&
         (gemm.beta == 0 || ok(gemm.c.data, gemm.c.batch_stride, algorithm.alignment_c, gemm.result)) &&
         ok(gemm.d.data, gemm.d.batch_stride, algorithm.alignment_d, gemm.result) &&
         (!gemm.bias || ok(gemm.bias, 0, algorithm.alignment_bias, gemm.element));
}

// ---- cuBLASLt -------------------------------------------------------------------------

bool live(cublasLtHandle_t handle) { return handle && registry<cublasLtContext>().find(handle); }

struct LtPointers {
  const void *alpha, *a, *b, *beta, *c;
  void* d;
};

// In-place (C == D) needs C laid out as D.
bool same_layout(const Gemm& gemm) {
  return gemm.c.leading == gemm.d.leading && (gemm.batch == 1 || gemm.c.batch_stride == gemm.d.batch_stride);
}

cublasStatus_t check_workspace(const void* workspace, std::size_t bytes) {
  if (bytes == 0) return CUBLAS_STATUS_SUCCESS;
  return is_device_memory(workspace, bytes) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// An algorithm from the heuristic, or none (cuBLASLt then picks its own,
// which relies on no more than each operand's element alignment).
cublasStatus_t read_algorithm(const cublasLtMatmulAlgo_t* packed, Algorithm& algorithm) {
  if (!packed) return CUBLAS_STATUS_SUCCESS;
  std::optional<Algorithm> found = unpack(*packed);
  if (!found) return CUBLAS_STATUS_INVALID_VALUE;
  algorithm = *found;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t lt_matmul(const LtOperands& operands, const LtPointers& pointers, const cublasLtMatmulAlgo_t* packed,
                         void* workspace, std::size_t workspace_bytes, cudaStream_t stream) {
  if (!pointers.alpha || !pointers.beta) return CUBLAS_STATUS_INVALID_VALUE;
  Gemm gemm;
  if (cublasStatus_t status = describe(operands, gemm)) return status;
  if (pointers.c == pointers.d && !same_layout(gemm)) return CUBLAS_STATUS_INVALID_VALUE;
  Algorithm algorithm;
  if (cublasStatus_t status = read_algorithm(packed, algorithm)) return status;
  if (!host_scalars(pointers.alpha, pointers.beta, gemm.element)) return CUBLAS_STATUS_INVALID_VALUE;
  if (cublasStatus_t status = check_workspace(workspace, workspace_bytes)) return status;
  if (gemm.m == 0 || gemm.n == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to write
  gemm.a.data = pointers.a;
  gemm.b.data = pointers.b;
  gemm.c.data = pointers.c;
  gemm.d.data = pointers.d;
  gemm.alpha = read_scalar(pointers.alpha, gemm.element);
  gemm.beta = read_scalar(pointers.beta, gemm.element);
  if (has_bias(*operands.description) && !gemm.bias) return CUBLAS_STATUS_INVALID_VALUE;
  if (!operands_on_device(gemm) || !meets_alignment(gemm, algorithm)) return CUBLAS_STATUS_INVALID_VALUE;
  enqueue_product(stream, gemm);
  return CUBLAS_STATUS_SUCCESS;
}

// One algorithm, needing no workspace, for any problem describe() accepts.
cublasStatus_t heuristic(const LtOperands& operands, const MatmulPreference& preference,
                         cublasLtMatmulHeuristicResult_t& result) {
  Gemm gemm;
  if (cublasStatus_t status = describe(operands, gemm)) return status;
  // No algorithm reads a matrix aligned to less than its element.
  const std::size_t element_size = size_of(gemm.result), operand_size = size_of(gemm.operands);
  for (std::uint32_t alignment : {preference.alignment_a, preference.alignment_b})
    if (alignment < operand_size) return CUBLAS_STATUS_NOT_SUPPORTED;
  for (std::uint32_t alignment : {preference.alignment_c, preference.alignment_d})
    if (alignment < element_size) return CUBLAS_STATUS_NOT_SUPPORTED;
  Algorithm algorithm{algorithm_tag,          preference.alignment_a, preference.alignment_b,
                      preference.alignment_c, preference.alignment_d, 0};
  if (has_bias(*operands.description)) algorithm.alignment_bias = alignment_of(operands.description->bias);
  result = {};
  result.algo = pack(algorithm);
  result.workspaceSize = 0;
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace kiln::cuda_simulator::blas

using namespace kiln::cuda_simulator::blas;

// ---- cuBLASLt entry points ------------------------------------------------------------

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
  auto context = std::make_unique<cublasLtContext>();
  *lightHandle = context.get();
  registry<cublasLtContext>().add(*lightHandle, std::move(context));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (!lightHandle || !registry<cublasLtContext>().remove(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  if (!precision_of(computeType) || !element_of(scaleType)) return CUBLAS_STATUS_NOT_SUPPORTED;
  MatmulDescription& description = create<MatmulDescription>(matmulDesc);
  description.compute = computeType;
  description.scale_type = scaleType;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return destroy<MatmulDescription>(matmulDesc);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  MatmulDescription* description = registry<MatmulDescription>().find(matmulDesc);
  if (!description) return CUBLAS_STATUS_INVALID_VALUE;
  return set_attribute(*description, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
  if (!element_of(type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  MatrixLayout& layout = create<MatrixLayout>(matLayout);
  layout.type = type;
  layout.rows = rows;
  layout.columns = cols;
  layout.leading = ld;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return destroy<MatrixLayout>(matLayout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  MatrixLayout* layout = registry<MatrixLayout>().find(matLayout);
  if (!layout) return CUBLAS_STATUS_INVALID_VALUE;
  return set_attribute(*layout, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  create<MatmulPreference>(pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return destroy<MatmulPreference>(pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  MatmulPreference* preference = registry<MatmulPreference>().find(pref);
  if (!preference) return CUBLAS_STATUS_INVALID_VALUE;
  return set_attribute(*preference, attr, buf, sizeInBytes);
}

// One result when the problem is supported; otherwise no result and the
// status saying why (NOT_SUPPORTED, or INVALID_VALUE for an impossible problem).
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (!live(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount) return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  std::optional<LtOperands> operands = find_operands(operationDesc, Adesc, Bdesc, Cdesc, Ddesc);
  const MatmulPreference* preferences = registry<MatmulPreference>().find(preference);
  if (!operands || !preferences) return CUBLAS_STATUS_INVALID_VALUE;
  if (cublasStatus_t status = heuristic(*operands, *preferences, heuristicResultsArray[0])) return status;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  if (!live(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  std::optional<LtOperands> operands = find_operands(computeDesc, Adesc, Bdesc, Cdesc, Ddesc);
  if (!operands) return CUBLAS_STATUS_INVALID_VALUE;
  return lt_matmul(*operands, {alpha, A, B, beta, C, D}, algo, workspace, workspaceSizeInBytes, stream);
}
