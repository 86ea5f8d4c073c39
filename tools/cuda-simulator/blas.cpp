// The CUDA simulator's cuBLAS and cuBLASLt (tools/cuda-simulator/README.md):
// the calls kiln makes (src/runtime/cuda/cuda_context.cpp,
// src/kernels/cuda/blas_lt.cpp, src/kernels/cuda/matmul.cu,
// tools/kiln-bench/device_timing.cpp), with the real libraries' C signatures,
// computing on the host the column-major product
//
//   D = epilogue(alpha op(A) op(B) + beta C (+ bias))
//
// at reference quality: products summed in double and rounded once to the
// output type, with every A and B element first rounded to TF32 under
// CUBLAS_COMPUTE_32F_FAST_TF32, so TF32's error shows here as on a GPU.
//
// A call checks its arguments as the libraries document and returns their
// status; the arithmetic is queued on the call's stream and runs when the
// runtime runs that stream's work (simulator.h), with everything it needs
// (pointers, sizes, alpha and beta, the descriptors' contents) copied at the
// call, as a GPU's launch does. Every matrix the product reads or writes must
// lie in one device allocation (a GPU would fault on a host pointer), and
// alpha and beta must be host memory (pointer mode host, the only one here).
//
// Only what kiln uses is simulated: f32 and f64, the compute types
// CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 and CUBLAS_COMPUTE_64F,
// column-major strided batches, and the epilogues RELU, BIAS, RELU_BIAS,
// GELU and GELU_BIAS (f32). An attribute, operation, type or value outside
// that is refused with CUBLAS_STATUS_NOT_SUPPORTED, never ignored, so that a
// new use in kiln is noticed here before it meets a GPU.

#include "simulator.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

// What a cublasHandle_t points at (the header declares the struct, the
// library defines it).
struct cublasContext {
  cudaStream_t stream = nullptr;  // cublasSetStream's; nullptr: the default stream
};

// What a cublasLtHandle_t points at: cuBLASLt keeps no state here (the
// stream is an argument of cublasLtMatmul).
struct cublasLtContext {};

namespace kiln::cuda_simulator {
namespace {

using std::int64_t;

// ---- the product ----------------------------------------------------------------------

enum class Element { f32, f64 };
enum class Activation { none, relu, gelu };

std::size_t size_of(Element element) { return element == Element::f32 ? sizeof(float) : sizeof(double); }

// One column-major matrix of a batch as stored (before op()).
template <class Pointer>
struct Matrix {
  Pointer data = nullptr;
  int64_t leading = 0;       // elements from one column to the next
  int64_t batch_stride = 0;  // elements from one batch item to the next
};

// Everything a queued product needs, copied at the call.
struct Gemm {
  Element element = Element::f32;
  bool tf32 = false;  // round A and B to TF32 first
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  Matrix<const void*> a{}, b{}, c{};
  Matrix<void*> d{};
  double alpha = 1, beta = 0;  // beta == 0: C is not read
  Activation activation = Activation::none;
  const void* bias = nullptr;  // m values of the element type, the same for every batch item, or nullptr
};

// TF32 keeps float's 8 exponent bits and the top 10 of its 23 mantissa bits.
// Rounded to nearest, ties to even; infinities and NaN stay as they are, and
// a value above TF32's largest rounds to infinity. (Ampere's cvt.rna.tf32.f32
// breaks ties away from zero instead, and a tensor core fed raw f32 bits
// truncates; cuBLAS does not document which its kernels use.)
float round_to_tf32(float value) {
  constexpr std::uint32_t exponent_mask = 0x7f800000u;
  constexpr int dropped = 13;  // 23 - 10 mantissa bits
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & exponent_mask) == exponent_mask) return value;
  const std::uint32_t kept_lowest = (bits >> dropped) & 1u;
  bits += (1u << (dropped - 1)) - 1 + kept_lowest;
  bits &= ~((1u << dropped) - 1);
  return std::bit_cast<float>(bits);
}

// RELU is max(x, 0) as a GPU's fmaxf (PTX max.f32) computes it, which is how
// CUTLASS's ReLu epilogue is written; cuBLASLt's kernels are closed, and this
// was not checked on a GPU. So NaN is dropped, giving +0, and +0 ranks above
// -0, so relu(-0) = +0. kiln's own relu keeps NaN (kernels/cpu/elementwise.cpp).
// GELU is the tanh approximation that cuBLASLt's GELU epilogues compute (the
// one PyTorch matches them with), 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
// x^3))); it keeps NaN and gives NaN at -infinity (-inf * 0), as the formula
// does in float.
double activate(Activation activation, double x) {
  switch (activation) {
    case Activation::none:
      return x;
    case Activation::relu:
      return x > 0 ? x : 0.0;
    case Activation::gelu: {
      constexpr double sqrt_2_over_pi = 0.7978845608028654;
      return 0.5 * x * (1 + std::tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
    }
  }
  return x;
}

template <class T>
double input_value(T value, bool tf32) {
  if constexpr (std::is_same_v<T, float>)
    if (tf32) return round_to_tf32(value);
  return value;
}

template <class T>
void multiply(const Gemm& gemm) {
  const int64_t m = gemm.m, n = gemm.n, k = gemm.k;
  const T* a = static_cast<const T*>(gemm.a.data);
  const T* b = static_cast<const T*>(gemm.b.data);
  const T* c = static_cast<const T*>(gemm.c.data);
  T* d = static_cast<T*>(gemm.d.data);
  const T* bias = static_cast<const T*>(gemm.bias);
  // op(A)'s rows and op(B)'s columns, each contiguous, so that each output is one dot product.
  std::vector<double> rows_of_a(static_cast<std::size_t>(m * k)), columns_of_b(static_cast<std::size_t>(n * k));
  for (int64_t item = 0; item < gemm.batch; ++item) {
    const int64_t a_start = item * gemm.a.batch_stride, b_start = item * gemm.b.batch_stride;
    const int64_t c_start = item * gemm.c.batch_stride, d_start = item * gemm.d.batch_stride;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        const int64_t index = gemm.transpose_a ? p + i * gemm.a.leading : i + p * gemm.a.leading;
        rows_of_a[static_cast<std::size_t>(i * k + p)] = input_value(a[a_start + index], gemm.tf32);
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        const int64_t index = gemm.transpose_b ? j + p * gemm.b.leading : p + j * gemm.b.leading;
        columns_of_b[static_cast<std::size_t>(j * k + p)] = input_value(b[b_start + index], gemm.tf32);
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        const double* row = rows_of_a.data() + i * k;
        const double* column = columns_of_b.data() + j * k;
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += row[p] * column[p];
        double value = k > 0 ? gemm.alpha * sum : 0.0;  // an empty sum leaves beta C
        if (gemm.beta != 0) value += gemm.beta * static_cast<double>(c[c_start + i + j * gemm.c.leading]);
        if (bias) value += static_cast<double>(bias[i]);
        d[d_start + i + j * gemm.d.leading] = static_cast<T>(activate(gemm.activation, value));
      }
  }
}

void multiply(const Gemm& gemm) {
  if (gemm.element == Element::f32)
    multiply<float>(gemm);
  else
    multiply<double>(gemm);
}

void enqueue_product(cudaStream_t stream, const Gemm& gemm) {
  enqueue(stream, [gemm] { multiply(gemm); });
}

// ---- argument checks ------------------------------------------------------------------

std::optional<Element> element_of(int type) {
  if (type == CUDA_R_32F) return Element::f32;
  if (type == CUDA_R_64F) return Element::f64;
  return std::nullopt;
}

struct Precision {
  Element element;
  bool tf32;
};

// The compute types kiln uses, each with the one data (and scale) type it
// takes here. CUBLAS_COMPUTE_32F_PEDANTIC, _64F_PEDANTIC and the rest are
// refused: kiln does not use them.
std::optional<Precision> precision_of(int compute) {
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
      return Precision{Element::f32, false};
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return Precision{Element::f32, true};
    case CUBLAS_COMPUTE_64F:
      return Precision{Element::f64, false};
  }
  return std::nullopt;
}

// CUBLAS_OP_C is CUBLAS_OP_T for real matrices, but kiln never passes it, so
// it is refused to be noticed; anything else is not an operation.
cublasStatus_t read_operation(int operation, bool& transpose) {
  if (operation == CUBLAS_OP_N || operation == CUBLAS_OP_T) {
    transpose = operation == CUBLAS_OP_T;
    return CUBLAS_STATUS_SUCCESS;
  }
  return operation == CUBLAS_OP_C ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;
}

// Whether every element of `batch` column-major rows x columns matrices,
// `batch_stride` elements apart, lies in one device allocation, at an address
// aligned to its element (a GPU faults on a misaligned one). An empty matrix
// reads nothing and passes.
bool on_device(const void* data, Element element, int64_t rows, int64_t columns, int64_t leading, int64_t batch,
               int64_t batch_stride) {
  if (rows == 0 || columns == 0 || batch == 0) return true;
  const auto size = static_cast<int64_t>(size_of(element));
  if (reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(size) != 0) return false;
  int64_t extent = 0, last_item = 0, bytes = 0;  // in elements, then bytes
  if (__builtin_mul_overflow(columns - 1, leading, &extent) || __builtin_add_overflow(extent, rows, &extent) ||
      __builtin_mul_overflow(batch - 1, batch_stride, &last_item))
    return false;
  const int64_t lowest = std::min<int64_t>(0, last_item), highest = std::max<int64_t>(0, last_item);
  if (__builtin_add_overflow(highest - lowest, extent, &bytes) || __builtin_mul_overflow(bytes, size, &bytes))
    return false;
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(data) + static_cast<std::uintptr_t>(lowest * size);
  return is_device_memory(reinterpret_cast<const void*>(first), static_cast<std::size_t>(bytes));
}

// alpha and beta are read on the host at the call (pointer mode host); a
// host that dereferences device memory faults, so a device pointer is refused.
bool host_scalars(const void* alpha, const void* beta, Element element) {
  return !is_device_memory(alpha, size_of(element)) && !is_device_memory(beta, size_of(element));
}

double read_scalar(const void* pointer, Element element) {
  if (element == Element::f32) return *static_cast<const float*>(pointer);
  return *static_cast<const double*>(pointer);
}

// ---- live handles and descriptors -----------------------------------------------------

// What this library handed out and has not destroyed, found by the pointer
// the caller holds: a destroyed or made-up one gets a status, not undefined
// behaviour.
template <class Object>
class Registry {
 public:
  void add(const void* key, std::unique_ptr<Object> object) {
    std::lock_guard lock(mutex_);
    objects_[key] = std::move(object);
  }
  Object* find(const void* key) const {
    std::lock_guard lock(mutex_);
    auto found = objects_.find(key);
    return found == objects_.end() ? nullptr : found->second.get();
  }
  bool remove(const void* key) {
    std::lock_guard lock(mutex_);
    return objects_.erase(key) == 1;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, std::unique_ptr<Object>> objects_;
};

// Never destroyed: kiln destroys descriptors from static destructors
// (blas_lt.cpp's plans), which may run after this file's.
template <class Object>
Registry<Object>& registry() {
  static auto* objects = new Registry<Object>;
  return *objects;
}

// Creates an Object, hands its `public_part` (the fixed-size struct the
// header's pointer type names) to the caller, and remembers it.
template <class Object, class Public>
Object& create(Public** result) {
  auto object = std::make_unique<Object>();
  Object& created = *object;
  *result = &object->public_part;
  registry<Object>().add(*result, std::move(object));
  return created;
}

template <class Object>
cublasStatus_t destroy(const void* pointer) {
  if (!pointer) return CUBLAS_STATUS_SUCCESS;  // as free(nullptr)
  return registry<Object>().remove(pointer) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// An attribute's value, of the one type the attribute has.
template <class Value>
cublasStatus_t read_attribute(const void* buffer, std::size_t size, Value& value) {
  if (!buffer || size != sizeof(Value)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&value, buffer, sizeof(Value));
  return CUBLAS_STATUS_SUCCESS;
}

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

// Types: every matrix of the compute type's one data type, and scale and
// bias types to match (the bias has D's type unless set otherwise).
cublasStatus_t check_types(const LtOperands& operands, Precision& precision) {
  const MatmulDescription& description = *operands.description;
  std::optional<Precision> found = precision_of(description.compute);
  if (!found) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int type = found->element == Element::f32 ? CUDA_R_32F : CUDA_R_64F;
  for (const MatrixLayout* layout : {operands.a, operands.b, operands.c, operands.d})
    if (layout->type != type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (description.scale_type != type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (description.bias_type != -1 && description.bias_type != type) return CUBLAS_STATUS_NOT_SUPPORTED;
  // kiln's epilogues are f32 only (blas_lt.cpp); which of them cuBLASLt
  // takes in f64 is not checked here, so none is offered.
  if (description.epilogue != CUBLASLT_EPILOGUE_DEFAULT && found->element == Element::f64)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  precision = *found;
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
  if (cublasStatus_t status = check_types(operands, precision)) return status;
  if (cublasStatus_t status = check_shapes(operands)) return status;
  const MatmulDescription& description = *operands.description;
  const EpilogueParts epilogue = *parts_of(description.epilogue);
  gemm.element = precision.element;
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
  auto ok = [&](const void* pointer, int64_t stride, std::uint64_t required) {
    return aligned(pointer, gemm.batch, stride, gemm.element, required);
  };
  return ok(gemm.a.data, gemm.a.batch_stride, algorithm.alignment_a) &&
         ok(gemm.b.data, gemm.b.batch_stride, algorithm.alignment_b) &&
         (gemm.beta == 0 || ok(gemm.c.data, gemm.c.batch_stride, algorithm.alignment_c)) &&
         ok(gemm.d.data, gemm.d.batch_stride, algorithm.alignment_d) &&
         (!gemm.bias || ok(gemm.bias, 0, algorithm.alignment_bias));
}

// Every buffer the product reads or writes, in device memory: A and B unless
// k is 0, C unless beta is 0, D, and the bias.
bool operands_on_device(const Gemm& gemm) {
  const int64_t a_rows = gemm.transpose_a ? gemm.k : gemm.m, a_columns = gemm.transpose_a ? gemm.m : gemm.k;
  const int64_t b_rows = gemm.transpose_b ? gemm.n : gemm.k, b_columns = gemm.transpose_b ? gemm.k : gemm.n;
  const Element element = gemm.element;
  return on_device(gemm.a.data, element, a_rows, a_columns, gemm.a.leading, gemm.batch, gemm.a.batch_stride) &&
         on_device(gemm.b.data, element, b_rows, b_columns, gemm.b.leading, gemm.batch, gemm.b.batch_stride) &&
         (gemm.beta == 0 ||
          on_device(gemm.c.data, element, gemm.m, gemm.n, gemm.c.leading, gemm.batch, gemm.c.batch_stride)) &&
         on_device(gemm.d.data, element, gemm.m, gemm.n, gemm.d.leading, gemm.batch, gemm.d.batch_stride) &&
         (!gemm.bias || on_device(gemm.bias, element, gemm.m, 1, gemm.m, 1, 0));
}

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
cublasStatus_t check_gemm(cublasOperation_t transa, cublasOperation_t transb, std::initializer_list<cudaDataType> types,
                          cublasComputeType_t compute, cublasGemmAlgo_t algorithm, Gemm& gemm) {
  if (cublasStatus_t status = read_operation(transa, gemm.transpose_a)) return status;
  if (cublasStatus_t status = read_operation(transb, gemm.transpose_b)) return status;
  if (gemm.m < 0 || gemm.n < 0 || gemm.k < 0 || gemm.batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int64_t a_rows = gemm.transpose_a ? gemm.k : gemm.m, b_rows = gemm.transpose_b ? gemm.n : gemm.k;
  if (gemm.a.leading < std::max<int64_t>(1, a_rows) || gemm.b.leading < std::max<int64_t>(1, b_rows) ||
      gemm.c.leading < std::max<int64_t>(1, gemm.m))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::optional<Precision> precision = precision_of(compute);
  if (!precision) return CUBLAS_STATUS_NOT_SUPPORTED;
  for (cudaDataType type : types)
    if (element_of(type) != precision->element) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algorithm != CUBLAS_GEMM_DEFAULT) return CUBLAS_STATUS_NOT_SUPPORTED;
  gemm.element = precision->element;
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
  const std::size_t element_size = size_of(gemm.element);
  for (std::uint32_t alignment :
       {preference.alignment_a, preference.alignment_b, preference.alignment_c, preference.alignment_d})
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
}  // namespace kiln::cuda_simulator

using namespace kiln::cuda_simulator;

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
  if (cublasStatus_t status = check_gemm(transa, transb, {Atype, Btype, Ctype}, computeType, algo, gemm)) return status;
  return queue_gemm(*context, alpha, beta, gemm);
}

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
