// The CUDA simulator's product and argument checks, shared by its cuBLAS
// (blas.cpp) and cuBLASLt (blas_lt.cpp): what they are and promise is said in
// blas_product.h.

#include "blas_product.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace kiln::cuda_simulator::blas {
namespace {

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

// RELU keeps NaN and gives +0 for -0, as kiln's relu does. cuBLASLt's kernels
// are closed and its documentation says only max(x, 0); this model first
// followed fmaxf (CUTLASS's ReLu), which drops NaN, and an H200 with cuBLAS
// 13.0 kept it (tests/cuda/jit_gpu_test.cpp checks it there). The sign of a
// zero was not observed: +0 is kiln's answer.
// GELU is the tanh approximation that cuBLASLt's GELU epilogues compute (the
// one PyTorch matches them with), 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
// x^3))); it keeps NaN and gives NaN at -infinity (-inf * 0), as the formula
// does in float.
double activate(Activation activation, double x) {
  switch (activation) {
    case Activation::none:
      return x;
    case Activation::relu:
      return x > 0 || std::isnan(x) ? x : 0.0;
    case Activation::gelu: {
      constexpr double sqrt_2_over_pi = 0.7978845608028654;
      return 0.5 * x * (1 + std::tanh(sqrt_2_over_pi * (x + 0.044715 * x * x * x)));
    }
  }
  return x;
}

// The value of an f16's bits: sign, 5 exponent bits (bias 15), 10 fraction bits; exponent 0 holds the zeros and
// subnormals, 31 the infinities and NaNs.
double f16_value(std::uint16_t bits) {
  const double sign = bits & 0x8000u ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1F;
  const int fraction = bits & 0x3FF;
  if (exponent == 0x1F) return fraction ? std::nan("") : sign * HUGE_VAL;
  if (exponent == 0) return sign * std::ldexp(fraction, -24);
  return sign * std::ldexp(fraction | 0x400, exponent - 25);
}

// Element `index` of an A or B matrix of `element`, as double: exact, or rounded to TF32 under tf32.
double input_value(const void* data, int64_t index, Element element, bool tf32) {
  switch (element) {
    case Element::f32: {
      const float value = static_cast<const float*>(data)[index];
      return tf32 ? round_to_tf32(value) : value;
    }
    case Element::f64:
      return static_cast<const double*>(data)[index];
    case Element::bf16:
      return std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<const std::uint16_t*>(data)[index]) << 16);
    case Element::f16:
      return f16_value(static_cast<const std::uint16_t*>(data)[index]);
  }
  return 0;
}

// A D element: `value` rounded to the result's type (a 16-bit result through f32, as the library's f32 sums
// are converted, to nearest even).
void store_value(void* data, int64_t index, double value, Element element) {
  switch (element) {
    case Element::f32:
      static_cast<float*>(data)[index] = static_cast<float>(value);
      return;
    case Element::f64:
      static_cast<double*>(data)[index] = value;
      return;
    case Element::bf16: {
      const float sum = static_cast<float>(value);
      std::uint32_t bits = std::bit_cast<std::uint32_t>(sum);
      bits = std::isnan(sum) ? (bits >> 16) | 0x40u : (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
      static_cast<std::uint16_t*>(data)[index] = static_cast<std::uint16_t>(bits);
      return;
    }
    case Element::f16:
      static_cast<std::uint16_t*>(data)[index] =
          std::bit_cast<std::uint16_t>(static_cast<_Float16>(static_cast<float>(value)));
      return;
  }
}

template <class T>
void multiply(const Gemm& gemm) {
  const int64_t m = gemm.m, n = gemm.n, k = gemm.k;
  const void* a = gemm.a.data;
  const void* b = gemm.b.data;
  const T* bias = static_cast<const T*>(gemm.bias);
  // op(A)'s rows and op(B)'s columns, each contiguous, so that each output is one dot product.
  std::vector<double> rows_of_a(static_cast<std::size_t>(m * k)), columns_of_b(static_cast<std::size_t>(n * k));
  for (int64_t item = 0; item < gemm.batch; ++item) {
    const int64_t a_start = item * gemm.a.batch_stride, b_start = item * gemm.b.batch_stride;
    const int64_t c_start = item * gemm.c.batch_stride, d_start = item * gemm.d.batch_stride;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p) {
        const int64_t index = gemm.transpose_a ? p + i * gemm.a.leading : i + p * gemm.a.leading;
        rows_of_a[static_cast<std::size_t>(i * k + p)] = input_value(a, a_start + index, gemm.operands, gemm.tf32);
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        const int64_t index = gemm.transpose_b ? j + p * gemm.b.leading : p + j * gemm.b.leading;
        columns_of_b[static_cast<std::size_t>(j * k + p)] = input_value(b, b_start + index, gemm.operands, gemm.tf32);
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        const double* row = rows_of_a.data() + i * k;
        const double* column = columns_of_b.data() + j * k;
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) sum += row[p] * column[p];
        double value = k > 0 ? gemm.alpha * sum : 0.0;  // an empty sum leaves beta C
        if (gemm.beta != 0)
          value += gemm.beta * input_value(gemm.c.data, c_start + i + j * gemm.c.leading, gemm.result, false);
        if (bias) value += static_cast<double>(bias[i]);
        store_value(gemm.d.data, d_start + i + j * gemm.d.leading, activate(gemm.activation, value), gemm.result);
      }
  }
}

void multiply(const Gemm& gemm) {
  if (gemm.element == Element::f32)
    multiply<float>(gemm);
  else
    multiply<double>(gemm);
}

}  // namespace

void enqueue_product(cudaStream_t stream, const Gemm& gemm) {
  enqueue(stream, [gemm] { multiply(gemm); });
}

// ---- argument checks ------------------------------------------------------------------

std::optional<Element> element_of(int type) {
  if (type == CUDA_R_32F) return Element::f32;
  if (type == CUDA_R_64F) return Element::f64;
  if (type == CUDA_R_16BF) return Element::bf16;
  if (type == CUDA_R_16F) return Element::f16;
  return std::nullopt;
}

bool results_fit(const Precision& precision, Element operands, Element result) {
  return result == precision.element || (result == operands && operands_fit(precision, operands));
}

bool operands_fit(const Precision& precision, Element operands) {
  if (operands == precision.element) return true;
  return precision.element == Element::f32 && !precision.tf32 &&
         (operands == Element::bf16 || operands == Element::f16);
}

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

cublasStatus_t read_operation(int operation, bool& transpose) {
  if (operation == CUBLAS_OP_N || operation == CUBLAS_OP_T) {
    transpose = operation == CUBLAS_OP_T;
    return CUBLAS_STATUS_SUCCESS;
  }
  return operation == CUBLAS_OP_C ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;
}

namespace {

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

}  // namespace

bool host_scalars(const void* alpha, const void* beta, Element element) {
  return !is_device_memory(alpha, size_of(element)) && !is_device_memory(beta, size_of(element));
}

double read_scalar(const void* pointer, Element element) {
  if (element == Element::f32) return *static_cast<const float*>(pointer);
  return *static_cast<const double*>(pointer);
}

bool operands_on_device(const Gemm& gemm) {
  const int64_t a_rows = gemm.transpose_a ? gemm.k : gemm.m, a_columns = gemm.transpose_a ? gemm.m : gemm.k;
  const int64_t b_rows = gemm.transpose_b ? gemm.n : gemm.k, b_columns = gemm.transpose_b ? gemm.k : gemm.n;
  const Element element = gemm.element, result = gemm.result;
  return on_device(gemm.a.data, gemm.operands, a_rows, a_columns, gemm.a.leading, gemm.batch, gemm.a.batch_stride) &&
         on_device(gemm.b.data, gemm.operands, b_rows, b_columns, gemm.b.leading, gemm.batch, gemm.b.batch_stride) &&
         (gemm.beta == 0 ||
          on_device(gemm.c.data, result, gemm.m, gemm.n, gemm.c.leading, gemm.batch, gemm.c.batch_stride)) &&
         on_device(gemm.d.data, result, gemm.m, gemm.n, gemm.d.leading, gemm.batch, gemm.d.batch_stride) &&
         (!gemm.bias || on_device(gemm.bias, element, gemm.m, 1, gemm.m, 1, 0));
}

}  // namespace kiln::cuda_simulator::blas
