// Tests of the CPU matmul kernel (OpenBLAS for f32/f64, a plain loop for
// i32/i64) against a reference loop written here: double for floats with a
// tolerance relative to sum |a||b| (the rounding bound of any summation
// order), exact two's-complement wraparound for integers. Covers the four
// transpose combinations, odd sizes (1, 17, 129), batch broadcasting, zero
// sizes, batches split across threads (evenly and not), and the OpenBLAS
// wrapper itself.

#include "kernels/cpu/blas.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::runtime::Array;
namespace cpu = kiln::kernels::cpu;
namespace blas = kiln::kernels::cpu::blas;
using std::int64_t;

const DType matmul_dtypes[] = {DType::f32, DType::f64, DType::i32, DType::i64};

Array make(DType dtype, const Shape& shape) { return kiln::runtime::allocate_array(dtype, shape); }

// Never zero: floats uniform in +-[0.1, 2], integers in +-[1, 9].
void fill_random(const Array& array, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<double> magnitude(0.1, 2.0);
  std::uniform_int_distribution<int> small(1, 9), sign(0, 1);
  kiln::visit_dtype(array.dtype, [&]<class T>() {
    T* data = array.mutable_data<T>();
    for (int64_t i = 0; i < array.shape.numel(); ++i) {
      double s = sign(generator) ? 1.0 : -1.0;
      if constexpr (std::is_floating_point_v<T>)
        data[i] = static_cast<T>(s * magnitude(generator));
      else
        data[i] = static_cast<T>(s * small(generator));
    }
  });
}

// The result shape of matmul(a, b) with the given transposes.
Shape result_shape(const Shape& a, const Shape& b, bool transpose_a, bool transpose_b) {
  int rank_a = a.rank(), rank_b = b.rank();
  int rank = std::max(rank_a, rank_b);
  std::vector<int64_t> dims;
  for (int i = 0; i < rank - 2; ++i) {
    int axis_a = rank_a - rank + i, axis_b = rank_b - rank + i;
    int64_t dim_a = axis_a >= 0 ? a[axis_a] : 1, dim_b = axis_b >= 0 ? b[axis_b] : 1;
    dims.push_back(dim_a == 1 ? dim_b : dim_a);
  }
  dims.push_back(transpose_a ? a[rank_a - 1] : a[rank_a - 2]);
  dims.push_back(transpose_b ? b[rank_b - 2] : b[rank_b - 1]);
  return Shape(dims);
}

// Element offset of the matrix that batch index `item` of `out` reads from
// an operand of shape `shape` (broadcast batch axes read matrix 0 of them).
int64_t batch_offset(const Shape& shape, const Shape& out, int64_t item) {
  int out_batch = out.rank() - 2, batch = shape.rank() - 2;
  int64_t offset = 0, stride = shape[shape.rank() - 1] * shape[shape.rank() - 2];
  for (int axis = out_batch - 1; axis >= 0; --axis) {
    int64_t index = item % out[axis];
    item /= out[axis];
    int own = axis - (out_batch - batch);
    if (own < 0) continue;
    if (shape[own] != 1) offset += index * stride;
    stride *= shape[own];
  }
  return offset;
}

void check_matmul(const Array& a, const Array& b, bool transpose_a, bool transpose_b, const Array& out) {
  const Shape& shape = out.shape;
  int rank = shape.rank();
  int64_t m = shape[rank - 2], n = shape[rank - 1];
  int64_t k = transpose_a ? a.shape[a.shape.rank() - 2] : a.shape[a.shape.rank() - 1];
  int64_t batch = shape.numel() / std::max<int64_t>(1, m * n);
  if (m * n == 0) batch = 0;
  std::string where = "matmul " + std::string(kiln::to_string(a.dtype)) + a.shape.to_string() + " x " +
                      b.shape.to_string() + (transpose_a ? " ta" : "") + (transpose_b ? " tb" : "");
  kiln::visit_dtype(a.dtype, [&]<class T>() {
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    const T* z = out.data<T>();
    for (int64_t item = 0; item < batch; ++item) {
      const T* xa = x + batch_offset(a.shape, shape, item);
      const T* yb = y + batch_offset(b.shape, shape, item);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          T actual = z[(item * m + i) * n + j];
          if constexpr (std::is_floating_point_v<T>) {
            double expected = 0, magnitude = 0;
            for (int64_t p = 0; p < k; ++p) {
              double product = static_cast<double>(transpose_a ? xa[p * m + i] : xa[i * k + p]) *
                               static_cast<double>(transpose_b ? yb[j * k + p] : yb[p * n + j]);
              expected += product;
              magnitude += std::fabs(product);
            }
            double eps = std::numeric_limits<T>::epsilon();
            ASSERT_NEAR(actual, expected, (static_cast<double>(k) + 2) * eps * magnitude)
                << where << " at [" << item << "," << i << "," << j << "]";
          } else {
            using U = std::make_unsigned_t<T>;
            U expected = 0;
            for (int64_t p = 0; p < k; ++p)
              expected += static_cast<U>(transpose_a ? xa[p * m + i] : xa[i * k + p]) *
                          static_cast<U>(transpose_b ? yb[j * k + p] : yb[p * n + j]);
            ASSERT_EQ(actual, static_cast<T>(expected)) << where << " at [" << item << "," << i << "," << j << "]";
          }
        }
    }
  });
}

// Operand shapes for logical sizes m x k times k x n, with batch prefixes.
Shape operand(std::vector<int64_t> batch, int64_t rows, int64_t columns, bool transposed) {
  batch.push_back(transposed ? columns : rows);
  batch.push_back(transposed ? rows : columns);
  return Shape(batch);
}

Array run_matmul(const Array& a, const Array& b, bool transpose_a, bool transpose_b) {
  Array out = make(a.dtype, result_shape(a.shape, b.shape, transpose_a, transpose_b));
  cpu::matmul(transpose_a, transpose_b, a, b, out);
  return out;
}

void check_case(DType dtype, std::vector<int64_t> batch_a, std::vector<int64_t> batch_b, int64_t m, int64_t k,
                int64_t n, bool transpose_a, bool transpose_b, std::uint64_t seed) {
  Array a = make(dtype, operand(batch_a, m, k, transpose_a));
  Array b = make(dtype, operand(batch_b, k, n, transpose_b));
  fill_random(a, seed);
  fill_random(b, seed + 1);
  check_matmul(a, b, transpose_a, transpose_b, run_matmul(a, b, transpose_a, transpose_b));
}

TEST(MatmulKernel, OddSizesAllTransposesAllDtypes) {
  std::uint64_t seed = 1;
  for (DType dtype : matmul_dtypes)
    for (int64_t m : {1, 17, 129})
      for (int64_t k : {1, 17, 129})
        for (int64_t n : {1, 17, 129})
          for (int transposes = 0; transposes < 4; ++transposes)
            check_case(dtype, {}, {}, m, k, n, transposes & 1, transposes & 2, seed += 2);
}

TEST(MatmulKernel, BatchBroadcasting) {
  std::uint64_t seed = 100;
  for (DType dtype : matmul_dtypes)
    for (int transposes = 0; transposes < 4; ++transposes) {
      // [2,1,3,4] x [5,4,6] -> [2,5,3,6]
      check_case(dtype, {2, 1}, {5}, 3, 4, 6, transposes & 1, transposes & 2, seed += 2);
      check_case(dtype, {5}, {2, 1}, 3, 4, 6, transposes & 1, transposes & 2, seed += 2);
      check_case(dtype, {3, 1, 2}, {1, 4, 1}, 5, 7, 3, transposes & 1, transposes & 2, seed += 2);
      check_case(dtype, {1}, {}, 17, 9, 5, transposes & 1, transposes & 2, seed += 2);
      check_case(dtype, {}, {4}, 17, 9, 5, transposes & 1, transposes & 2, seed += 2);
    }
}

// Batches split over threads: evenly (64 items), with a remainder run
// multithreaded (3 and 65 items), and with tiny GEMMs; with several thread
// counts.
TEST(MatmulKernel, LargeBatchesAcrossThreads) {
  int original = kiln::runtime::thread_count();
  std::uint64_t seed = 300;
  for (int threads : {1, 2, 3, 4}) {
    kiln::runtime::set_thread_count(threads);
    for (DType dtype : matmul_dtypes) {
      check_case(dtype, {64}, {64}, 33, 16, 31, false, false, seed += 2);
      check_case(dtype, {3}, {3}, 129, 65, 130, false, true, seed += 2);
      check_case(dtype, {65}, {1}, 4, 3, 5, true, false, seed += 2);
    }
  }
  kiln::runtime::set_thread_count(original);
}

TEST(MatmulKernel, LargeSingleProduct) {
  for (DType dtype : matmul_dtypes) check_case(dtype, {}, {}, 300, 257, 513, false, false, 400);
  check_case(DType::f32, {}, {}, 513, 300, 257, true, true, 402);
}

// K = 0 gives zeros; M = 0, N = 0 or an empty batch give empty results.
TEST(MatmulKernel, ZeroSizes) {
  for (DType dtype : matmul_dtypes) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      bool ta = transposes & 1, tb = transposes & 2;
      Array a = make(dtype, operand({2}, 3, 0, ta)), b = make(dtype, operand({2}, 0, 4, tb));
      Array out = run_matmul(a, b, ta, tb);
      ASSERT_EQ(out.shape, Shape({2, 3, 4}));
      kiln::visit_dtype(dtype, [&]<class T>() {
        for (int64_t i = 0; i < out.shape.numel(); ++i) ASSERT_EQ(out.data<T>()[i], T(0)) << "element " << i;
      });
      for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{0, 5, 3}, {4, 5, 0}, {0, 0, 0}}) {
        Array x = make(dtype, operand({}, m, k, ta)), y = make(dtype, operand({}, k, n, tb));
        fill_random(x, 1);
        fill_random(y, 2);
        EXPECT_EQ(run_matmul(x, y, ta, tb).shape.numel(), 0);
      }
      Array x = make(dtype, operand({0}, 3, 5, ta)), y = make(dtype, operand({}, 5, 2, tb));
      EXPECT_EQ(run_matmul(x, y, ta, tb).shape, Shape({0, 3, 2}));
    }
  }
}

TEST(MatmulKernel, IntegerWraparound) {
  for (DType dtype : {DType::i32, DType::i64}) {
    Array a = make(dtype, Shape{3, 4}), b = make(dtype, Shape{4, 5});
    kiln::visit_dtype(dtype, [&]<class T>() {
      if constexpr (std::is_integral_v<T>) {
        for (int i = 0; i < 12; ++i) a.mutable_data<T>()[i] = std::numeric_limits<T>::max() - i;
        for (int i = 0; i < 20; ++i) b.mutable_data<T>()[i] = std::numeric_limits<T>::max() / 3 + i;
      }
    });
    for (int transposes = 0; transposes < 4; ++transposes) {
      bool ta = transposes & 1, tb = transposes & 2;
      Array x = make(dtype, operand({}, 3, 4, ta)), y = make(dtype, operand({}, 4, 5, tb));
      std::memcpy(x.mutable_raw(), a.raw(), a.bytes());
      std::memcpy(y.mutable_raw(), b.raw(), b.bytes());
      check_matmul(x, y, ta, tb, run_matmul(x, y, ta, tb));
    }
  }
}

TEST(MatmulKernel, RejectsBool) {
  Array a = make(DType::boolean, Shape{2, 2}), b = make(DType::boolean, Shape{2, 2});
  EXPECT_THROW(run_matmul(a, b, false, false), kiln::DTypeError);
}

// ---- the BLAS wrapper -------------------------------------------------------

TEST(Blas, LoadsAndReportsItsCore) {
  const blas::Functions& functions = blas::functions();
  ASSERT_NE(functions.sgemm, nullptr);
  ASSERT_NE(functions.dgemm, nullptr);
  EXPECT_FALSE(blas::core_name().empty());
  std::string description = blas::describe();
  if (blas::name() == "oneMKL") {  // KILN_BLAS, or found by the loader on an Intel CPU
    EXPECT_NE(description.find("KMP_BLOCKTIME"), std::string::npos) << description;
    return;
  }
  ASSERT_EQ(blas::name(), "OpenBLAS");
  EXPECT_NE(description.find("OPENBLAS_CORETYPE"), std::string::npos) << description;
  EXPECT_NE(description.find("OPENBLAS_THREAD_TIMEOUT"), std::string::npos) << description;
  // When kiln chose the core type (the user did not), OpenBLAS must run it,
  // not its SSE3 fallback.
  if (description.find("OPENBLAS_CORETYPE=SkylakeX (set by kiln)") != std::string::npos) {
    EXPECT_EQ(blas::core_name(), "SkylakeX") << description;
  }
  if (description.find("OPENBLAS_CORETYPE=Haswell (set by kiln)") != std::string::npos) {
    EXPECT_EQ(blas::core_name(), "Haswell") << description;
  }
}

TEST(Blas, KilnBlasNamesTheLibraryAndItsErrors) {
  EXPECT_EQ(blas::probe_library("libopenblas.so.0"), "OpenBLAS");
  // Unset: oneMKL where the loader finds it on an Intel CPU, else OpenBLAS.
  const std::string chosen = blas::probe_library(nullptr);
  EXPECT_TRUE(chosen == "OpenBLAS" || chosen == "oneMKL") << chosen;
  try {
    blas::probe_library("/nonexistent/libblas-kiln-test.so", "matmul");
    ADD_FAILURE() << "no error for a library that does not exist";
  } catch (const kiln::DeviceError& error) {
    EXPECT_NE(std::string(error.what()).find("KILN_BLAS=/nonexistent/libblas-kiln-test.so cannot be loaded"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("matmul"), std::string::npos) << error.what();
  }
  try {
    blas::probe_library("libz.so.1");  // loads, but is no BLAS
    ADD_FAILURE() << "no error for a library without cblas_sgemm";
  } catch (const kiln::DeviceError& error) {
    EXPECT_NE(std::string(error.what()).find("KILN_BLAS=libz.so.1 has no cblas_sgemm"), std::string::npos)
        << error.what();
  }
  // The process's BLAS is still the one it loaded first, and works.
  EXPECT_NE(blas::functions().sgemm, nullptr);
}

TEST(Blas, FunctionPointersComputeAGemm) {
  const blas::Functions& functions = blas::functions();
  const float a[6] = {1, 2, 3, 4, 5, 6};     // 2x3
  const float b[6] = {7, 8, 9, 10, 11, 12};  // 3x2
  float c[4] = {};
  functions.sgemm(blas::row_major, blas::no_transpose, blas::no_transpose, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2);
  EXPECT_EQ(c[0], 58);
  EXPECT_EQ(c[1], 64);
  EXPECT_EQ(c[2], 139);
  EXPECT_EQ(c[3], 154);
  const double ad[6] = {1, 2, 3, 4, 5, 6};
  double cd[4] = {};
  // A^T A with A 2x3 -> 3x3 would not fit; compute A A^T (2x2).
  functions.dgemm(blas::row_major, blas::no_transpose, blas::transpose, 2, 2, 3, 1.0, ad, 3, ad, 3, 0.0, cd, 2);
  EXPECT_EQ(cd[0], 14);
  EXPECT_EQ(cd[1], 32);
  EXPECT_EQ(cd[2], 32);
  EXPECT_EQ(cd[3], 77);
}

TEST(Blas, SingleThreadedScopesNest) {
  {
    blas::SingleThreadedScope outer;
    {
      blas::SingleThreadedScope inner;
      check_case(DType::f32, {}, {}, 64, 64, 64, false, false, 900);
    }
    check_case(DType::f32, {}, {}, 64, 64, 64, false, false, 902);
  }
  blas::sync_thread_count();
  check_case(DType::f32, {}, {}, 64, 64, 64, false, false, 904);
}

}  // namespace
