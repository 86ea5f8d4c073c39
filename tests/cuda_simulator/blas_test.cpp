// The CUDA simulator's cuBLAS and cuBLASLt (tools/cuda-simulator/blas.cpp),
// through their public API only, against a float64 reference on random,
// never-zero inputs: both transposes, odd sizes, leading dimensions past the
// rows (the gaps hold NaN, so a read of one shows), strided and broadcast
// batches, alpha and beta, beta == 0 over a C of NaN, TF32's rounding, each
// epilogue with and without bias, k == 0, kiln's row-major mapping
// (blas_lt.cpp), and the checks: host pointers, sizes, statuses, and what
// the heuristic and the attribute setters refuse.

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using std::int64_t;

void require(cudaError_t status) {
  if (status != cudaSuccess) throw std::runtime_error("CUDA runtime call failed: " + std::to_string(status));
}

// One device allocation holding `values`.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& values) : size_(values.size()) {
    require(cudaMalloc(&data_, std::max<std::size_t>(1, size_) * sizeof(T)));
    require(cudaMemcpy(data_, values.data(), size_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data_); }

  T* get() const { return static_cast<T*>(data_); }
  // Waits for all queued work, then copies the values back.
  std::vector<T> read() const {
    std::vector<T> values(size_);
    require(cudaDeviceSynchronize());
    require(cudaMemcpy(values.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost));
    return values;
  }

 private:
  void* data_ = nullptr;
  std::size_t size_;
};

enum class Activation { none, relu, gelu };

// One product D = act(alpha op(A) op(B) + beta C + bias), column-major, as the tests pose it.
struct Problem {
  bool transpose_a = false, transpose_b = false;
  int m = 1, n = 1, k = 1, batch = 1;
  int lda = 0, ldb = 0, ldc = 0;                        // 0: the stored rows
  int64_t stride_a = -1, stride_b = -1, stride_c = -1;  // -1: the matrix's extent plus a gap of 5
  double alpha = 1, beta = 0;
  bool tf32 = false;
  Activation activation = Activation::none;
  bool bias = false;

  int a_rows() const { return transpose_a ? k : m; }
  int a_columns() const { return transpose_a ? m : k; }
  int b_rows() const { return transpose_b ? n : k; }
  int b_columns() const { return transpose_b ? k : n; }
};

int64_t extent(int64_t rows, int64_t columns, int64_t leading) {
  return rows == 0 || columns == 0 ? 0 : (columns - 1) * leading + rows;
}

// Fills in the defaults: leading dimensions and batch strides.
Problem complete(Problem p) {
  if (p.lda == 0) p.lda = std::max(1, p.a_rows());
  if (p.ldb == 0) p.ldb = std::max(1, p.b_rows());
  if (p.ldc == 0) p.ldc = std::max(1, p.m);
  if (p.stride_a < 0) p.stride_a = extent(p.a_rows(), p.a_columns(), p.lda) + 5;
  if (p.stride_b < 0) p.stride_b = extent(p.b_rows(), p.b_columns(), p.ldb) + 5;
  if (p.stride_c < 0) p.stride_c = extent(p.m, p.n, p.ldc) + 5;
  return p;
}

// Every problem of sizes m x n x k from the lists, with either operand
// transposed or not, scaled by `alpha` and `beta`.
template <class Visit>
void for_each_problem(std::initializer_list<int> ms, std::initializer_list<int> ns, std::initializer_list<int> ks,
                      double alpha, double beta, Visit visit) {
  for (int m : ms)
    for (int n : ns)
      for (int k : ks)
        for (bool transpose_a : {false, true})
          for (bool transpose_b : {false, true})
            visit(Problem{.transpose_a = transpose_a,
                          .transpose_b = transpose_b,
                          .m = m,
                          .n = n,
                          .k = k,
                          .alpha = alpha,
                          .beta = beta});
}

std::size_t buffer_size(int64_t rows, int64_t columns, int64_t leading, int batch, int64_t stride) {
  return static_cast<std::size_t>(std::max<int64_t>(1, (batch - 1) * stride + extent(rows, columns, leading)));
}

// Random values of magnitude in [0.25, 1), either sign: never zero.
class Random {
 public:
  explicit Random(unsigned seed) : engine_(seed) {}
  double next() {
    std::uniform_real_distribution<double> magnitude(0.25, 1.0);
    return std::bernoulli_distribution(0.5)(engine_) ? magnitude(engine_) : -magnitude(engine_);
  }

 private:
  std::mt19937 engine_;
};

// A column-major batch of matrices with NaN in every gap (past the rows, between items).
template <class T>
std::vector<T> random_matrices(Random& random, int64_t rows, int64_t columns, int64_t leading, int batch,
                               int64_t stride) {
  std::vector<T> values(buffer_size(rows, columns, leading, batch, stride), std::numeric_limits<T>::quiet_NaN());
  for (int item = 0; item < batch; ++item)
    for (int64_t j = 0; j < columns; ++j)
      for (int64_t i = 0; i < rows; ++i)
        values[static_cast<std::size_t>(item * stride + i + j * leading)] = static_cast<T>(random.next());
  return values;
}

template <class T>
struct Operands {
  std::vector<T> a, b, c, bias;
};

template <class T>
Operands<T> random_operands(const Problem& p, unsigned seed) {
  Random random(seed);
  Operands<T> operands;
  operands.a = random_matrices<T>(random, p.a_rows(), p.a_columns(), p.lda, p.batch, p.stride_a);
  operands.b = random_matrices<T>(random, p.b_rows(), p.b_columns(), p.ldb, p.batch, p.stride_b);
  operands.c = random_matrices<T>(random, p.m, p.n, p.ldc, p.batch, p.stride_c);
  if (p.beta == 0)  // not read: NaN shows if it is
    for (T& value : operands.c) value = std::numeric_limits<T>::quiet_NaN();
  operands.bias = random_matrices<T>(random, p.m, 1, std::max(1, p.m), 1, 0);
  return operands;
}

// TF32 by arithmetic rather than bits: 11 significant bits, nearest, ties to
// even (the rounding mode in force); inf and NaN as they are.
double tf32(double value) {
  if (!std::isfinite(value) || value == 0) return value;
  int exponent = 0;
  const double fraction = std::frexp(value, &exponent);  // [0.5, 1)
  return std::ldexp(std::nearbyint(std::ldexp(fraction, 11)), exponent - 11);
}

double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

double activate(Activation activation, double x) {
  if (activation == Activation::relu) return x > 0 ? x : 0;
  if (activation == Activation::gelu) return gelu(x);
  return x;
}

// The expected value of one output and the size of what was summed for it.
struct Expected {
  double value, scale;
};

template <class T>
Expected expected(const Problem& p, const Operands<T>& operands, int item, int i, int j) {
  double sum = 0, scale = 0;
  for (int q = 0; q < p.k; ++q) {
    const int64_t a_index = item * p.stride_a + (p.transpose_a ? q + int64_t{i} * p.lda : i + int64_t{q} * p.lda);
    const int64_t b_index = item * p.stride_b + (p.transpose_b ? j + int64_t{q} * p.ldb : q + int64_t{j} * p.ldb);
    double a = operands.a[static_cast<std::size_t>(a_index)], b = operands.b[static_cast<std::size_t>(b_index)];
    if (p.tf32) a = tf32(a), b = tf32(b);
    sum += a * b;
    scale += std::abs(a * b);
  }
  double value = p.alpha * sum;
  scale *= std::abs(p.alpha);
  if (p.beta != 0) {
    const double c = operands.c[static_cast<std::size_t>(item * p.stride_c + i + int64_t{j} * p.ldc)];
    value += p.beta * c;
    scale += std::abs(p.beta * c);
  }
  if (p.bias) value += operands.bias[static_cast<std::size_t>(i)], scale += std::abs(operands.bias[i]);
  return {activate(p.activation, value), scale + std::abs(value)};
}

std::string describe(const Problem& p) {
  return std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k) + (p.transpose_a ? " A^T" : "") +
         (p.transpose_b ? " B^T" : "") + " batch " + std::to_string(p.batch) + " lda " + std::to_string(p.lda) +
         " ldb " + std::to_string(p.ldb) + " ldc " + std::to_string(p.ldc) + (p.tf32 ? " tf32" : "");
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? std::ldexp(1.0, -22) : std::ldexp(1.0, -48);
}

// Compares every output with the reference, and checks that the gaps of C kept their values.
template <class T>
void expect_matches(const Problem& p, const Operands<T>& operands, const std::vector<T>& result) {
  std::vector<bool> written(result.size(), false);
  for (int item = 0; item < p.batch; ++item)
    for (int j = 0; j < p.n; ++j)
      for (int i = 0; i < p.m; ++i) {
        const auto index = static_cast<std::size_t>(item * p.stride_c + i + int64_t{j} * p.ldc);
        written[index] = true;
        const Expected want = expected(p, operands, item, i, j);
        ASSERT_NEAR(result[index], want.value, tolerance<T>() * want.scale)
            << describe(p) << " at item " << item << " (" << i << ", " << j << ")";
      }
  for (std::size_t index = 0; index < result.size(); ++index) {
    if (written[index]) continue;
    ASSERT_EQ(std::memcmp(&result[index], &operands.c[index], sizeof(T)), 0) << describe(p) << ": gap " << index;
  }
}

template <class T>
cudaDataType data_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_64F;
}

template <class T>
cublasComputeType_t compute_type(bool tf32) {
  if (!std::is_same_v<T, float>) return CUBLAS_COMPUTE_64F;
  return tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cublasOperation_t operation(bool transpose) { return transpose ? CUBLAS_OP_T : CUBLAS_OP_N; }

// ---- cuBLAS ---------------------------------------------------------------------------

class SimulatedCublas : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cublasDestroy(handle_), CUBLAS_STATUS_SUCCESS); }

  // cublasGemmEx for one matrix, cublasGemmStridedBatchedEx otherwise.
  template <class T>
  cublasStatus_t gemm(const Problem& p, const T* a, const T* b, T* c) {
    const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);
    const cudaDataType type = data_type<T>();
    if (p.batch == 1)
      return cublasGemmEx(handle_, operation(p.transpose_a), operation(p.transpose_b), p.m, p.n, p.k, &alpha, a, type,
                          p.lda, b, type, p.ldb, &beta, c, type, p.ldc, compute_type<T>(p.tf32), CUBLAS_GEMM_DEFAULT);
    return cublasGemmStridedBatchedEx(handle_, operation(p.transpose_a), operation(p.transpose_b), p.m, p.n, p.k,
                                      &alpha, a, type, p.lda, p.stride_a, b, type, p.ldb, p.stride_b, &beta, c, type,
                                      p.ldc, p.stride_c, p.batch, compute_type<T>(p.tf32), CUBLAS_GEMM_DEFAULT);
  }

  template <class T>
  void check(Problem problem, unsigned seed) {
    const Problem p = complete(problem);
    const Operands<T> operands = random_operands<T>(p, seed);
    DeviceArray<T> a(operands.a), b(operands.b), c(operands.c);
    ASSERT_EQ(gemm<T>(p, a.get(), b.get(), c.get()), CUBLAS_STATUS_SUCCESS) << describe(p);
    expect_matches(p, operands, c.read());
  }

  cublasHandle_t handle_ = nullptr;
};

TEST_F(SimulatedCublas, EveryTransposeAndOddSizeMatchesTheReference) {
  unsigned seed = 1;
  for_each_problem({1, 3, 17, 33}, {1, 3, 17}, {1, 3, 33}, 0.75, -1.25, [&](const Problem& p) {
    check<float>(p, ++seed);
    check<double>(p, ++seed);
  });
}

TEST_F(SimulatedCublas, LeadingDimensionsPastTheRowsSkipTheGaps) {
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true}) {
      // A stored 17 x 33 or 33 x 17, B 33 x 3 or 3 x 33: each leading dimension past its rows.
      const Problem p{.transpose_a = transpose_a,
                      .transpose_b = transpose_b,
                      .m = 17,
                      .n = 3,
                      .k = 33,
                      .lda = transpose_a ? 36 : 20,
                      .ldb = transpose_b ? 10 : 40,
                      .ldc = 19,
                      .beta = 0.5};
      check<float>(p, 11);
      check<double>(p, 12);
    }
}

TEST_F(SimulatedCublas, StridedBatchesWithGapsAndABroadcastOperand) {
  for (bool transpose_a : {false, true}) {
    check<float>({.transpose_a = transpose_a, .m = 17, .n = 3, .k = 33, .batch = 4, .alpha = 1.5, .beta = 2}, 21);
    check<double>({.transpose_b = true, .m = 3, .n = 17, .k = 5, .batch = 3, .stride_a = 0, .beta = -1}, 22);
    check<float>({.m = 3, .n = 17, .k = 5, .batch = 3, .stride_b = 0}, 23);
  }
}

TEST_F(SimulatedCublas, BetaZeroDoesNotReadC) {
  // random_operands fills C with NaN when beta is 0; the reference ignores it.
  check<float>({.m = 17, .n = 3, .k = 5, .beta = 0}, 31);
  check<double>({.m = 17, .n = 3, .k = 5, .batch = 2, .beta = 0}, 32);
}

TEST_F(SimulatedCublas, Tf32RoundsEveryInputToTenMantissaBits) {
  // 1 + 2^-12 is not a TF32 value: TF32 makes it 1, f32 keeps it.
  const float above_one = 1 + std::ldexp(1.0f, -12);
  DeviceArray<float> a(std::vector<float>{above_one}), b(std::vector<float>{1}), c(std::vector<float>{0});
  ASSERT_EQ(gemm<float>({.lda = 1, .ldb = 1, .ldc = 1, .tf32 = true}, a.get(), b.get(), c.get()),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.read()[0], 1.0f);
  ASSERT_EQ(gemm<float>({.lda = 1, .ldb = 1, .ldc = 1}, a.get(), b.get(), c.get()), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.read()[0], above_one);
  // Ties go to even: 1 + 2^-11 down to 1, 1 + 3 2^-11 up to 1 + 2^-9; B is rounded too.
  DeviceArray<float> ties(std::vector<float>{1 + std::ldexp(1.0f, -11), 1 + 3 * std::ldexp(1.0f, -11)});
  DeviceArray<float> ones(std::vector<float>{1, 1}), result(std::vector<float>{0, 0});
  ASSERT_EQ(gemm<float>({.m = 2, .lda = 2, .ldb = 1, .ldc = 2, .tf32 = true}, ties.get(), ones.get(), result.get()),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(result.read(), (std::vector<float>{1, 1 + std::ldexp(1.0f, -9)}));
  ASSERT_EQ(gemm<float>({.lda = 1, .ldb = 1, .ldc = 1, .tf32 = true}, ones.get(), ties.get() + 1, result.get()),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(result.read()[0], 1 + std::ldexp(1.0f, -9));
}

TEST_F(SimulatedCublas, Tf32ErrorShowsOnRandomInputs) {
  const Problem p = complete({.m = 33, .n = 17, .k = 65, .tf32 = true});
  const Operands<float> operands = random_operands<float>(p, 41);
  DeviceArray<float> a(operands.a), b(operands.b), c(operands.c);
  ASSERT_EQ(gemm<float>(p, a.get(), b.get(), c.get()), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> result = c.read();
  expect_matches(p, operands, result);  // the TF32 reference
  Problem exact = p;
  exact.tf32 = false;
  double largest_error = 0;  // against the f32 product, in units of the f32 tolerance
  for (int j = 0; j < p.n; ++j)
    for (int i = 0; i < p.m; ++i) {
      const Expected want = expected(exact, operands, 0, i, j);
      largest_error = std::max(largest_error, std::abs(result[static_cast<std::size_t>(i + j * p.ldc)] - want.value) /
                                                  (tolerance<float>() * want.scale));
    }
  EXPECT_GT(largest_error, 10);
}

TEST_F(SimulatedCublas, KZeroScalesC) {
  for (double beta : {0.5, 0.0}) {
    const Problem p = complete({.m = 3, .n = 5, .k = 0, .beta = beta});
    const Operands<float> operands = random_operands<float>(p, 51);  // C is NaN when beta is 0
    DeviceArray<float> c(operands.c);
    ASSERT_EQ(gemm<float>(p, nullptr, nullptr, c.get()), CUBLAS_STATUS_SUCCESS);  // A and B are not read
    expect_matches(p, operands, c.read());
  }
}

TEST_F(SimulatedCublas, AnEmptyOutputIsANoOp) {
  EXPECT_EQ(gemm<float>(complete({.m = 0, .n = 5, .k = 3}), nullptr, nullptr, nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(gemm<double>(complete({.m = 5, .n = 0, .k = 3, .batch = 2}), nullptr, nullptr, nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(gemm<float>(complete({.m = 5, .n = 5, .k = 3, .batch = 0}), nullptr, nullptr, nullptr),
            CUBLAS_STATUS_SUCCESS);
}

TEST_F(SimulatedCublas, RefusesMemoryOutsideADeviceAllocation) {
  const Problem p = complete({.m = 3, .n = 4, .k = 5, .beta = 1});
  const Operands<float> operands = random_operands<float>(p, 61);
  DeviceArray<float> a(operands.a), b(operands.b), c(operands.c);
  std::vector<float> host_a = operands.a, host_c = operands.c;
  EXPECT_EQ(gemm<float>(p, host_a.data(), b.get(), c.get()), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm<float>(p, a.get(), b.get(), host_c.data()), CUBLAS_STATUS_INVALID_VALUE);
  // Past the end of A's allocation (which the runtime may round up to 256 bytes, as cudaMalloc does):
  // by a leading dimension, and by a second batch item.
  Problem wide = p;
  wide.lda = 100;
  EXPECT_EQ(gemm<float>(wide, a.get(), b.get(), c.get()), CUBLAS_STATUS_INVALID_VALUE);
  const Problem batched =
      complete({.m = 3, .n = 4, .k = 5, .batch = 2, .stride_a = 1000, .stride_b = 0, .stride_c = 0});
  EXPECT_EQ(gemm<float>(batched, a.get(), b.get(), c.get()), CUBLAS_STATUS_INVALID_VALUE);
  DeviceArray<float> misaligned(std::vector<float>(64, 1));
  const char* shifted = reinterpret_cast<const char*>(misaligned.get()) + 2;
  EXPECT_EQ(gemm<float>(p, reinterpret_cast<const float*>(shifted), b.get(), c.get()), CUBLAS_STATUS_INVALID_VALUE);
  // alpha and beta are read on the host (pointer mode host): device memory is refused.
  DeviceArray<float> scalars(std::vector<float>{1, 0});
  EXPECT_EQ(
      cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 3, 4, 5, scalars.get(), a.get(), CUDA_R_32F, 3, b.get(),
                   CUDA_R_32F, 5, scalars.get() + 1, c.get(), CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(c.read(), operands.c);  // nothing was queued
}

// bf16 and f16 operands (as kiln's 16-bit matmuls pass them): their exact values multiplied and summed, into f32
// C, or into C of their own type rounded to nearest even from the f32 sum. Mixed 16-bit types, a TF32 or f64
// compute type, or a C of the other 16-bit type are refused.
TEST_F(SimulatedCublas, MultipliesBf16AndF16OperandsSummingInF32) {
  // 2x2 times 2x2, column-major; bf16 1.0078125 (0x3F81) and 3.0 (0x4040), f16 1.5 (0x3E00) and -2.0 (0xC000).
  const std::vector<std::uint16_t> brain = {0x3F81, 0x4040, 0x4040, 0x3F81};
  const std::vector<std::uint16_t> half = {0x3E00, 0xC000, 0xC000, 0x3E00};
  const double x = 1.0078125, y = 3.0;
  const float one = 1, zero = 0;
  for (const auto& [bits, type, first, second] :
       {std::tuple{brain, CUDA_R_16BF, x, y}, std::tuple{half, CUDA_R_16F, 1.5, -2.0}}) {
    DeviceArray<std::uint16_t> a(bits), b(bits);
    DeviceArray<float> c(std::vector<float>(4, -1));
    ASSERT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.get(), type, 2, b.get(), type, 2, &zero,
                           c.get(), CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    // [[p, q], [q, p]] squared is [[p^2 + q^2, 2pq], [2pq, p^2 + q^2]].
    const std::vector<float> product = c.read();
    EXPECT_EQ(product[0], static_cast<float>(first * first + second * second));
    EXPECT_EQ(product[1], static_cast<float>(2 * first * second));
    EXPECT_EQ(product[3], product[0]);
    DeviceArray<std::uint16_t> rounded(std::vector<std::uint16_t>(4, 0));
    ASSERT_EQ(cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.get(), type, 2, b.get(), type, 2, &zero,
                           rounded.get(), type, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    if (type == CUDA_R_16BF) {
      // x^2 + 9 = 10.0156... rounds to 10.0 (0x4120; bf16's step in [8, 16) is 1/16); 2xy = 6.046875 is half way
      // between 6.03125 (0x40C1) and 6.0625 (0x40C2; the step in [4, 8) is 1/32): a tie, to the even 0x40C2.
      EXPECT_EQ(rounded.read()[0], 0x4120);
      EXPECT_EQ(rounded.read()[1], 0x40C2);
    } else {
      EXPECT_EQ(rounded.read()[0], 0x4640);  // 6.25
      EXPECT_EQ(rounded.read()[1], 0xC600);  // -6
    }
  }
  DeviceArray<std::uint16_t> a(brain), b(half);
  DeviceArray<float> c(std::vector<float>(4, 0));
  auto call = [&](cudaDataType b_type, cudaDataType c_type, cublasComputeType_t compute) {
    return cublasGemmEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.get(), CUDA_R_16BF, 2, b.get(), b_type, 2,
                        &zero, c.get(), c_type, 2, compute, CUBLAS_GEMM_DEFAULT);
  };
  EXPECT_EQ(call(CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(call(CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(call(CUDA_R_16BF, CUDA_R_64F, CUBLAS_COMPUTE_64F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(call(CUDA_R_16BF, CUDA_R_16F, CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(SimulatedCublas, ChecksItsArgumentsAsCublasDoes) {
  DeviceArray<float> a(std::vector<float>(64, 1)), b(std::vector<float>(64, 1)), c(std::vector<float>(64, 1));
  const float one = 1;
  auto call = [&](cublasHandle_t handle, cublasOperation_t transa, int m, int lda, int ldc, cudaDataType b_type,
                  cublasComputeType_t compute, cublasGemmAlgo_t algorithm, const float* alpha) {
    return cublasGemmEx(handle, transa, CUBLAS_OP_N, m, 4, 4, alpha, a.get(), CUDA_R_32F, lda, b.get(), b_type, 4, &one,
                        c.get(), CUDA_R_32F, ldc, compute, algorithm);
  };
  const cublasOperation_t n = CUBLAS_OP_N;
  const cublasGemmAlgo_t standard = CUBLAS_GEMM_DEFAULT;
  EXPECT_EQ(call(handle_, n, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, &one), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(call(nullptr, n, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, &one), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(call(handle_, n, -1, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, &one), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(call(handle_, n, 4, 3, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, &one), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(call(handle_, n, 4, 4, 3, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, &one), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(call(handle_, n, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(call(handle_, static_cast<cublasOperation_t>(7), 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, &one),
            CUBLAS_STATUS_INVALID_VALUE);
  // What kiln does not use is refused, not ignored.
  EXPECT_EQ(call(handle_, CUBLAS_OP_C, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, &one),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(call(handle_, n, 4, 4, 4, CUDA_R_64F, CUBLAS_COMPUTE_32F, standard, &one), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(call(handle_, n, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC, standard, &one),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(call(handle_, n, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_16F, standard, &one), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(call(handle_, n, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_64F, standard, &one), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(call(handle_, n, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_ALGO1, &one),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasGemmStridedBatchedEx(handle_, n, n, 4, 4, 4, &one, a.get(), CUDA_R_32F, 4, 16, b.get(), CUDA_R_32F, 4,
                                       16, &one, c.get(), CUDA_R_32F, 4, 16, -1, CUBLAS_COMPUTE_32F, standard),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasHandle_t destroyed = nullptr;
  ASSERT_EQ(cublasCreate(&destroyed), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasDestroy(destroyed), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(call(destroyed, n, 4, 4, 4, CUDA_R_32F, CUBLAS_COMPUTE_32F, standard, &one), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(SimulatedCublas, RunsOnTheStreamSetOnTheHandle) {
  cudaStream_t stream = nullptr;
  require(cudaStreamCreate(&stream));
  ASSERT_EQ(cublasSetStream(handle_, stream), CUBLAS_STATUS_SUCCESS);
  const Problem p = complete({.m = 5, .n = 3, .k = 4, .beta = 1});
  const Operands<double> operands = random_operands<double>(p, 71);
  DeviceArray<double> a(operands.a), b(operands.b), c(operands.c);
  ASSERT_EQ(gemm<double>(p, a.get(), b.get(), c.get()), CUBLAS_STATUS_SUCCESS);
  require(cudaStreamSynchronize(stream));
  expect_matches(p, operands, c.read());
  ASSERT_EQ(cublasSetStream(handle_, nullptr), CUBLAS_STATUS_SUCCESS);
  require(cudaStreamDestroy(stream));
}

TEST(SimulatedCublasStatus, NamesAndDescriptions) {
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE), "an invalid numeric value was used as an argument");
  EXPECT_STREQ(cublasGetStatusName(static_cast<cublasStatus_t>(1234)), "CUBLAS_STATUS_UNKNOWN");
}

// ---- cuBLASLt -------------------------------------------------------------------------

// A problem's descriptors, destroyed with it.
struct LtPlan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  LtPlan() = default;
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;
  ~LtPlan() {
    cublasLtMatmulPreferenceDestroy(preference);
    for (cublasLtMatrixLayout_t layout : {a, b, c}) cublasLtMatrixLayoutDestroy(layout);
    cublasLtMatmulDescDestroy(operation);
  }
};

cublasLtEpilogue_t epilogue_of(const Problem& p) {
  switch (p.activation) {
    case Activation::none:
      return p.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case Activation::relu:
      return p.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case Activation::gelu:
      return p.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <class Value>
void set(cublasLtMatmulDesc_t operation, cublasLtMatmulDescAttributes_t attribute, Value value) {
  ASSERT_EQ(cublasLtMatmulDescSetAttribute(operation, attribute, &value, sizeof value), CUBLAS_STATUS_SUCCESS);
}

template <class Value>
void set(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, Value value) {
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof value), CUBLAS_STATUS_SUCCESS);
}

void make_layout(cublasLtMatrixLayout_t& layout, cudaDataType type, int rows, int columns, int leading, int batch,
                 int64_t stride) {
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                       static_cast<std::uint64_t>(columns), leading),
            CUBLAS_STATUS_SUCCESS);
  if (batch == 1) return;
  set(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, std::int32_t{batch});
  set(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
}

// The descriptors as kiln's blas_lt.cpp sets them: compute and scale types,
// transposes, epilogue and bias, one layout for C and D; and a preference.
template <class T>
void make_plan(const Problem& p, const void* bias, LtPlan& plan) {
  const cudaDataType type = data_type<T>();
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.operation, compute_type<T>(p.tf32), type), CUBLAS_STATUS_SUCCESS);
  set(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, operation(p.transpose_a));
  set(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB, operation(p.transpose_b));
  if (epilogue_of(p) != CUBLASLT_EPILOGUE_DEFAULT) set(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue_of(p));
  if (p.bias) set(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  make_layout(plan.a, type, p.a_rows(), p.a_columns(), p.lda, p.batch, p.stride_a);
  make_layout(plan.b, type, p.b_rows(), p.b_columns(), p.ldb, p.batch, p.stride_b);
  make_layout(plan.c, type, p.m, p.n, p.ldc, p.batch, p.stride_c);
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.preference), CUBLAS_STATUS_SUCCESS);
  const std::uint64_t workspace = 1 << 20;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(plan.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                 sizeof workspace),
            CUBLAS_STATUS_SUCCESS);
  // Operands aligned to no more than their element (the tests' batch strides are odd), as kiln tells it.
  const std::uint32_t alignment = sizeof(T);
  for (cublasLtMatmulPreferenceAttributes_t attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(plan.preference, attribute, &alignment, sizeof alignment),
              CUBLAS_STATUS_SUCCESS);
}

class SimulatedCublasLt : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasLtCreate(&handle_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cublasLtDestroy(handle_), CUBLAS_STATUS_SUCCESS); }

  // The heuristic's one algorithm for `plan`, as blas_lt.cpp asks for it.
  cublasStatus_t heuristic(const LtPlan& plan, cublasLtMatmulHeuristicResult_t& result, int& count) {
    return cublasLtMatmulAlgoGetHeuristic(handle_, plan.operation, plan.a, plan.b, plan.c, plan.c, plan.preference, 1,
                                          &result, &count);
  }

  template <class T>
  cublasStatus_t matmul(const LtPlan& plan, const Problem& p, const T* a, const T* b, T* c,
                        const cublasLtMatmulAlgo_t* algorithm) {
    const T alpha = static_cast<T>(p.alpha), beta = static_cast<T>(p.beta);
    return cublasLtMatmul(handle_, plan.operation, &alpha, a, plan.a, b, plan.b, &beta, c, plan.c, c, plan.c, algorithm,
                          workspace_.get(), 1 << 20, nullptr);
  }

  // The heuristic, then the product with its algorithm, against the reference.
  template <class T>
  void check(Problem problem, unsigned seed) {
    const Problem p = complete(problem);
    const Operands<T> operands = random_operands<T>(p, seed);
    DeviceArray<T> a(operands.a), b(operands.b), c(operands.c), bias(operands.bias);
    LtPlan plan;
    make_plan<T>(p, bias.get(), plan);
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    ASSERT_EQ(heuristic(plan, result, count), CUBLAS_STATUS_SUCCESS) << describe(p);
    ASSERT_EQ(count, 1);
    ASSERT_EQ(result.state, CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(result.workspaceSize, 0u);
    ASSERT_EQ(matmul<T>(plan, p, a.get(), b.get(), c.get(), &result.algo), CUBLAS_STATUS_SUCCESS) << describe(p);
    expect_matches(p, operands, c.read());
  }

  cublasLtHandle_t handle_ = nullptr;
  DeviceArray<char> workspace_{std::vector<char>(1 << 20)};
};

TEST_F(SimulatedCublasLt, EveryTransposeAndOddSizeMatchesTheReference) {
  unsigned seed = 100;
  for_each_problem({1, 3, 17, 33}, {1, 17}, {1, 3, 33}, -0.5, 1.5, [&](const Problem& p) {
    check<float>(p, ++seed);
    check<double>(p, ++seed);
    Problem tf32 = p;
    tf32.tf32 = true;
    check<float>(tf32, ++seed);
  });
}

TEST_F(SimulatedCublasLt, LeadingDimensionsAndStridedBatches) {
  for (bool transpose_a : {false, true}) {
    // A stored 17 x 33 (33 x 17 transposed), B stored 3 x 33: each leading dimension past its rows.
    Problem p{.transpose_a = transpose_a,
              .transpose_b = true,
              .m = 17,
              .n = 3,
              .k = 33,
              .batch = 3,
              .lda = transpose_a ? 36 : 20,
              .ldb = 4,
              .ldc = 22,
              .beta = 0.25};
    check<float>(p, 201);
    check<double>(p, 202);
    p.beta = 0;  // over a C of NaN
    check<float>(p, 203);
  }
}

TEST_F(SimulatedCublasLt, EachEpilogueWithAndWithoutBias) {
  unsigned seed = 300;
  for (Activation activation : {Activation::none, Activation::relu, Activation::gelu})
    for (bool bias : {false, true})
      for (bool transpose_a : {false, true}) {
        Problem p{.transpose_a = transpose_a, .m = 17, .n = 5, .k = 3, .activation = activation, .bias = bias};
        check<float>(p, ++seed);
        p.beta = -0.75;
        p.tf32 = true;
        check<float>(p, ++seed);
        p.batch = 2;  // the same bias for each item
        check<float>(p, ++seed);
      }
}

// RELU as an H200 computes it: relu(-0) = +0 and relu(NaN) = NaN, as kiln's
// relu; GELU keeps NaN; without an epilogue, -0 stays -0.
TEST_F(SimulatedCublasLt, EpiloguesOnSignedZeroAndNaN) {
  // k = 1, A = [0, NaN], B = [1], alpha = -1: the products are -0 and NaN.
  const Problem p = complete({.m = 2, .n = 1, .k = 1, .alpha = -1});
  DeviceArray<float> a(std::vector<float>{0, std::nanf("")}), b(std::vector<float>{1}), c(std::vector<float>{7, 7});
  auto run = [&](Activation activation) {
    Problem with = p;
    with.activation = activation;
    LtPlan plan;
    make_plan<float>(with, nullptr, plan);
    EXPECT_EQ(matmul<float>(plan, with, a.get(), b.get(), c.get(), nullptr), CUBLAS_STATUS_SUCCESS);
    return c.read();
  };
  std::vector<float> none = run(Activation::none), relu = run(Activation::relu), gelu = run(Activation::gelu);
  EXPECT_TRUE(none[0] == 0 && std::signbit(none[0]));
  EXPECT_TRUE(std::isnan(none[1]));
  EXPECT_TRUE(relu[0] == 0 && !std::signbit(relu[0]));
  EXPECT_TRUE(std::isnan(relu[1]));
  EXPECT_TRUE(std::isnan(gelu[1]));
}

TEST_F(SimulatedCublasLt, KZeroLeavesBetaCAndTheEpilogue) {
  check<float>({.m = 5, .n = 3, .k = 0, .beta = 0.5, .activation = Activation::relu, .bias = true}, 401);
  check<float>({.m = 5, .n = 3, .k = 0, .beta = 0, .bias = true}, 402);
  check<double>({.m = 5, .n = 3, .k = 0, .batch = 2, .beta = 2}, 403);
}

// kiln's row-major C[m, n] = act(A[m, k] B[k, n] + bias[n]) as blas_lt.cpp
// poses it: the column-major C^T = B^T A^T, kiln's B as cuBLASLt's A, and the
// bias along the rows of C^T, so one value per kiln column.
TEST_F(SimulatedCublasLt, KilnsRowMajorMappingAddsTheBiasPerColumn) {
  const int m = 17, n = 5, k = 3;
  for (bool transpose_a : {false, true})
    for (bool transpose_b : {false, true}) {
      Random random(500 + 2 * transpose_a + transpose_b);
      std::vector<float> a(m * k), b(k * n), bias(n);
      for (float& value : a) value = static_cast<float>(random.next());
      for (float& value : b) value = static_cast<float>(random.next());
      for (float& value : bias) value = static_cast<float>(random.next());
      // Row-major A [m, k] (transposed: stored [k, m]) and B [k, n] (transposed: stored [n, k]).
      auto a_at = [&](int i, int q) { return transpose_a ? a[q * m + i] : a[i * k + q]; };
      auto b_at = [&](int q, int j) { return transpose_b ? b[j * k + q] : b[q * n + j]; };
      const Problem column_major{.transpose_a = transpose_b,
                                 .transpose_b = transpose_a,
                                 .m = n,
                                 .n = m,
                                 .k = k,
                                 .lda = transpose_b ? k : n,
                                 .ldb = transpose_a ? m : k,
                                 .ldc = n,
                                 .activation = Activation::relu,
                                 .bias = true};
      DeviceArray<float> device_a(a), device_b(b), device_bias(bias), c(std::vector<float>(m * n));
      LtPlan plan;
      make_plan<float>(column_major, device_bias.get(), plan);
      ASSERT_EQ(matmul<float>(plan, column_major, device_b.get(), device_a.get(), c.get(), nullptr),
                CUBLAS_STATUS_SUCCESS);
      const std::vector<float> result = c.read();
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j) {
          double sum = bias[j];
          for (int q = 0; q < k; ++q) sum += double{a_at(i, q)} * b_at(q, j);
          EXPECT_NEAR(result[i * n + j], std::max(sum, 0.0), 1e-6) << i << ", " << j;
        }
    }
}

TEST_F(SimulatedCublasLt, TheHeuristicRefusesWhatItCannotRun) {
  const Problem p = complete({.m = 4, .n = 3, .k = 2});
  auto heuristic_of = [&](auto&& change, int& count) {
    LtPlan plan;
    make_plan<float>(p, nullptr, plan);
    change(plan);
    cublasLtMatmulHeuristicResult_t result{};
    count = -1;
    return heuristic(plan, result, count);
  };
  int count = 0;
  EXPECT_EQ(heuristic_of([](LtPlan&) {}, count), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(count, 1);
  auto refused = [&](auto&& change, cublasStatus_t status) {
    EXPECT_EQ(heuristic_of(change, count), status);
    EXPECT_EQ(count, 0);
  };
  // Types: mixed, or not the compute type's.
  refused([](LtPlan& plan) { set(plan.a, CUBLASLT_MATRIX_LAYOUT_TYPE, std::uint32_t{CUDA_R_64F}); },
          CUBLAS_STATUS_NOT_SUPPORTED);
  refused(
      [](LtPlan& plan) { set(plan.operation, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, std::int32_t{CUBLAS_COMPUTE_64F}); },
      CUBLAS_STATUS_NOT_SUPPORTED);
  refused([](LtPlan& plan) { set(plan.operation, CUBLASLT_MATMUL_DESC_SCALE_TYPE, std::int32_t{CUDA_R_64F}); },
          CUBLAS_STATUS_NOT_SUPPORTED);
  refused([](LtPlan& plan) { set(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, std::int32_t{CUDA_R_64F}); },
          CUBLAS_STATUS_NOT_SUPPORTED);
  // Shapes that do not fit together, and a leading dimension under the rows.
  refused([](LtPlan& plan) { set(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T); },
          CUBLAS_STATUS_INVALID_VALUE);
  refused([](LtPlan& plan) { set(plan.c, CUBLASLT_MATRIX_LAYOUT_LD, int64_t{3}); }, CUBLAS_STATUS_INVALID_VALUE);
  refused([](LtPlan& plan) { set(plan.b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, std::int32_t{2}); },
          CUBLAS_STATUS_INVALID_VALUE);
  refused([](LtPlan& plan) { set(plan.a, CUBLASLT_MATRIX_LAYOUT_ROWS, std::uint64_t{1} << 32); },
          CUBLAS_STATUS_NOT_SUPPORTED);
  // An alignment under a float's.
  refused(
      [](LtPlan& plan) {
        const std::uint32_t two = 2;
        ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(plan.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                       &two, sizeof two),
                  CUBLAS_STATUS_SUCCESS);
      },
      CUBLAS_STATUS_NOT_SUPPORTED);
  // f64 with an epilogue, f64 data under a TF32 compute type.
  LtPlan f64;
  make_plan<double>({.m = 4, .n = 3, .k = 2, .lda = 4, .ldb = 2, .ldc = 4, .activation = Activation::relu}, nullptr,
                    f64);
  cublasLtMatmulHeuristicResult_t result{};
  EXPECT_EQ(heuristic(f64, result, count), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(count, 0);
  set(f64.operation, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT);
  EXPECT_EQ(heuristic(f64, result, count), CUBLAS_STATUS_SUCCESS);
  set(f64.operation, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, std::int32_t{CUBLAS_COMPUTE_32F_FAST_TF32});
  EXPECT_EQ(heuristic(f64, result, count), CUBLAS_STATUS_NOT_SUPPORTED);
  // Its own arguments.
  LtPlan plan;
  make_plan<float>(p, nullptr, plan);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.operation, plan.a, plan.b, plan.c, plan.c, plan.preference, 0,
                                           &result, &count),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(nullptr, plan.operation, plan.a, plan.b, plan.c, plan.c, plan.preference, 1,
                                           &result, &count),
            CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtMatrixLayout_t destroyed = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&destroyed, CUDA_R_32F, 4, 2, 4), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutDestroy(destroyed), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.operation, destroyed, plan.b, plan.c, plan.c, plan.preference,
                                           1, &result, &count),
            CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(SimulatedCublasLt, AttributesAndValuesKilnDoesNotUseAreRefused) {
  LtPlan plan;
  make_plan<float>(complete({.m = 4, .n = 3, .k = 2}), nullptr, plan);
  auto desc = [&](cublasLtMatmulDescAttributes_t attribute, std::int32_t value) {
    return cublasLtMatmulDescSetAttribute(plan.operation, attribute, &value, sizeof value);
  };
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_FILL_MODE, CUBLAS_FILL_MODE_FULL), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_TRANSC, CUBLAS_OP_N), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_C), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU_AUX_BIAS), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU_BGRAD), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, CUBLAS_COMPUTE_32F_PEDANTIC), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(desc(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, 4), CUBLAS_STATUS_NOT_SUPPORTED);
  const void* null = nullptr;
  EXPECT_EQ(
      cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &null, sizeof null),
      CUBLAS_STATUS_NOT_SUPPORTED);
  const std::int64_t wrong_size = CUBLAS_OP_T;  // an int32 attribute given 8 bytes
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, &wrong_size, sizeof wrong_size),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  auto layout = [&](cublasLtMatrixLayoutAttribute_t attribute, std::int32_t value) {
    return cublasLtMatrixLayoutSetAttribute(plan.a, attribute, &value, sizeof value);
  };
  EXPECT_EQ(layout(CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_ROW), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(layout(CUBLASLT_MATRIX_LAYOUT_ORDER, CUBLASLT_ORDER_COL), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(layout(CUBLASLT_MATRIX_LAYOUT_BATCH_MODE, CUBLASLT_BATCH_MODE_POINTER_ARRAY), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(layout(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 0), CUBLAS_STATUS_INVALID_VALUE);
  const std::int64_t plane = 0;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(plan.a, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, &plane, sizeof plane),
            CUBLAS_STATUS_NOT_SUPPORTED);
  const std::uint32_t search = CUBLASLT_SEARCH_BEST_FIT;
  EXPECT_EQ(
      cublasLtMatmulPreferenceSetAttribute(plan.preference, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &search, sizeof search),
      CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatmulDesc_t half = nullptr;
  EXPECT_EQ(cublasLtMatmulDescCreate(&half, CUBLAS_COMPUTE_16F, CUDA_R_16F), CUBLAS_STATUS_NOT_SUPPORTED);
  cublasLtMatrixLayout_t byte_layout = nullptr;  // (16-bit floats kiln multiplies: MultipliesBf16AndF16...)
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&byte_layout, CUDA_R_8I, 2, 2, 2), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(SimulatedCublasLt, RefusesMemoryOutsideADeviceAllocation) {
  const Problem p = complete({.m = 4, .n = 3, .k = 2, .beta = 1, .bias = true});
  const Operands<float> operands = random_operands<float>(p, 601);
  DeviceArray<float> a(operands.a), b(operands.b), c(operands.c), bias(operands.bias);
  std::vector<float> host_a = operands.a, host_c = operands.c, host_bias = operands.bias;
  LtPlan plan;
  make_plan<float>(p, bias.get(), plan);
  EXPECT_EQ(matmul<float>(plan, p, host_a.data(), b.get(), c.get(), nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(matmul<float>(plan, p, a.get(), b.get(), host_c.data(), nullptr), CUBLAS_STATUS_INVALID_VALUE);
  set(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(host_bias.data()));
  EXPECT_EQ(matmul<float>(plan, p, a.get(), b.get(), c.get(), nullptr), CUBLAS_STATUS_INVALID_VALUE);
  set(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(nullptr));
  EXPECT_EQ(matmul<float>(plan, p, a.get(), b.get(), c.get(), nullptr), CUBLAS_STATUS_INVALID_VALUE);
  // Past the end of the bias's allocation, rounded up to 256 bytes or not.
  set(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.get() + 62));
  EXPECT_EQ(matmul<float>(plan, p, a.get(), b.get(), c.get(), nullptr), CUBLAS_STATUS_INVALID_VALUE);
  set(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.get()));
  const float one = 1;
  std::vector<char> host_workspace(64);
  EXPECT_EQ(cublasLtMatmul(handle_, plan.operation, &one, a.get(), plan.a, b.get(), plan.b, &one, c.get(), plan.c,
                           c.get(), plan.c, nullptr, host_workspace.data(), host_workspace.size(), nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(c.read(), operands.c);  // nothing was queued
}

TEST_F(SimulatedCublasLt, AnAlgorithmNeedsTheAlignmentItWasChosenFor) {
  const Problem p = complete({.m = 4, .n = 3, .k = 2});
  DeviceArray<float> a(std::vector<float>(64, 1)), b(std::vector<float>(64, 1)), c(std::vector<float>(64, 1));
  LtPlan plan;
  make_plan<float>(p, nullptr, plan);
  // A fresh preference: 256-byte aligned operands (cuBLASLt's default).
  ASSERT_EQ(cublasLtMatmulPreferenceDestroy(plan.preference), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.preference), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  ASSERT_EQ(heuristic(plan, result, count), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul<float>(plan, p, a.get(), b.get(), c.get(), &result.algo), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul<float>(plan, p, a.get() + 1, b.get(), c.get(), &result.algo), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(matmul<float>(plan, p, a.get() + 1, b.get(), c.get(), nullptr), CUBLAS_STATUS_SUCCESS);
  const std::uint32_t four = 4;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(plan.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four,
                                                 sizeof four),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(heuristic(plan, result, count), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul<float>(plan, p, a.get() + 1, b.get(), c.get(), &result.algo), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(matmul<float>(plan, p, a.get(), b.get(), c.get() + 1, &result.algo), CUBLAS_STATUS_INVALID_VALUE);
  const cublasLtMatmulAlgo_t made_up{};
  EXPECT_EQ(matmul<float>(plan, p, a.get(), b.get(), c.get(), &made_up), CUBLAS_STATUS_INVALID_VALUE);
  require(cudaDeviceSynchronize());
}

TEST_F(SimulatedCublasLt, InPlaceNeedsCLaidOutAsD) {
  const Problem p = complete({.m = 4, .n = 3, .k = 2, .beta = 1});
  DeviceArray<float> a(std::vector<float>(64, 1)), b(std::vector<float>(64, 1)), c(std::vector<float>(64, 1));
  LtPlan plan;
  make_plan<float>(p, nullptr, plan);
  cublasLtMatrixLayout_t wider = nullptr;
  make_layout(wider, CUDA_R_32F, 4, 3, 5, 1, 0);
  const float one = 1;
  EXPECT_EQ(cublasLtMatmul(handle_, plan.operation, &one, a.get(), plan.a, b.get(), plan.b, &one, c.get(), plan.c,
                           c.get(), wider, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  DeviceArray<float> d(std::vector<float>(64, 0));  // out of place, D with its own leading dimension
  EXPECT_EQ(cublasLtMatmul(handle_, plan.operation, &one, a.get(), plan.a, b.get(), plan.b, &one, c.get(), plan.c,
                           d.get(), wider, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<float> result = d.read();
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 5; ++i) EXPECT_EQ(result[i + 5 * j], i < 4 ? 3.0f : 0.0f) << i << ", " << j;  // 2 + C
  cublasLtMatrixLayoutDestroy(wider);
}

TEST_F(SimulatedCublasLt, ChecksItsHandleAndDescriptors) {
  LtPlan plan;
  make_plan<float>(complete({.m = 4, .n = 3, .k = 2}), nullptr, plan);
  DeviceArray<float> buffer(std::vector<float>(64, 1));
  const float one = 1;
  EXPECT_EQ(cublasLtMatmul(nullptr, plan.operation, &one, buffer.get(), plan.a, buffer.get(), plan.b, &one,
                           buffer.get(), plan.c, buffer.get(), plan.c, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasLtMatmul(handle_, plan.operation, nullptr, buffer.get(), plan.a, buffer.get(), plan.b, &one,
                           buffer.get(), plan.c, buffer.get(), plan.c, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmul(handle_, nullptr, &one, buffer.get(), plan.a, buffer.get(), plan.b, &one, buffer.get(),
                           plan.c, buffer.get(), plan.c, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasLtCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescDestroy(nullptr), CUBLAS_STATUS_SUCCESS);
}

}  // namespace
