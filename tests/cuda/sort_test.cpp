// CUDA sort, argsort and top_k against the CPU's, bit for bit: both order the same (key, index) pairs, so they give
// the one stable order. Every dtype, axis and direction; rows that fit a block's shared memory and rows that are
// merged through global memory (100000 elements); many short rows; NaNs, -0 and ties.

#include "cuda/cuda_test_support.h"

#include <cmath>
#include <limits>

namespace {

using namespace kiln;
using kiln::testing::expect_same;
using kiln::testing::gpu;
using kiln::testing::random_tensor;

const std::vector<DType> every = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};

void expect_orders_agree(const Tensor& x, std::int64_t axis, const std::string& label) {
  const Tensor on_gpu = x.to(gpu);
  for (const bool descending : {false, true}) {
    const std::string what = label + (descending ? " descending" : "");
    expect_same(sort(x, axis, descending), sort(on_gpu, axis, descending), 0, "sort " + what);
    expect_same(argsort(x, axis, descending), argsort(on_gpu, axis, descending), 0, "argsort " + what);
  }
}

// Values with many ties, NaNs, -0 and +0: rounded halves of random normals.
Tensor with_ties_and_nans(DType dtype, const Shape& shape, std::uint64_t seed) {
  std::vector<double> values = random_tensor(DType::f64, shape, seed).to_vector<double>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = std::round(values[i] * 2) / 2;
    if (i % 17 == 3) values[i] = std::numeric_limits<double>::quiet_NaN();
    if (i % 13 == 5) values[i] = i % 2 ? -0.0 : 0.0;
  }
  return cast(from_vector(values, shape), dtype);
}

TEST(CudaSort, EqualsTheCpuForEveryDtypeAndAxis) {
  KILN_REQUIRE_GPU();
  for (DType dtype : every)
    for (std::int64_t axis : {0, 1, 2}) {
      const Tensor x = random_tensor(dtype, {5, 6, 7}, 131);
      expect_orders_agree(x, axis, std::string(to_string(dtype)) + " axis " + std::to_string(axis));
    }
  for (DType dtype : every)
    for (std::int64_t k : {0, 1, 3, 7}) {
      const Tensor x = random_tensor(dtype, {5, 6, 7}, 132);
      const TopK cpu = top_k(x, k), cuda = top_k(x.to(gpu), k);
      const std::string label = "top_k " + std::string(to_string(dtype)) + " k " + std::to_string(k);
      expect_same(cpu.values, cuda.values, 0, label);
      expect_same(cpu.indices, cuda.indices, 0, label);
    }
}

TEST(CudaSort, NansZerosAndTies) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x = with_ties_and_nans(dtype, {9, 301}, 133);
    expect_orders_agree(x, 1, "ties " + std::string(to_string(dtype)));
    expect_orders_agree(x, 0, "ties " + std::string(to_string(dtype)));
    const TopK cpu = top_k(x, 20), cuda = top_k(x.to(gpu), 20);
    expect_same(cpu.indices, cuda.indices, 0, "top_k with ties");
  }
}

// Longer than a block's tile of 2048: tiles, then merge passes (100000: six of them, the last run alone in some).
TEST(CudaSort, LongRowsMergeThroughGlobalMemory) {
  KILN_REQUIRE_GPU();
  expect_orders_agree(with_ties_and_nans(DType::f32, {2, 100000}, 134), 1, "f32 [2, 100000]");
  expect_orders_agree(random_tensor(DType::i64, {4099, 3}, 135), 0, "i64 [4099, 3] axis 0");
  expect_orders_agree(random_tensor(DType::f64, {3, 6000}, 136), 1, "f64 [3, 6000]");
  const Tensor x = random_tensor(DType::f32, {3, 5000}, 137);
  for (std::int64_t k : {1, 5, 5000}) {
    const TopK cpu = top_k(x, k), cuda = top_k(x.to(gpu), k);
    expect_same(cpu.values, cuda.values, 0, "top_k long k " + std::to_string(k));
    expect_same(cpu.indices, cuda.indices, 0, "top_k long k " + std::to_string(k));
  }
}

TEST(CudaSort, ManyShortRowsAndEmptyShapes) {
  KILN_REQUIRE_GPU();
  expect_orders_agree(random_tensor(DType::f32, {20000, 3}, 138), 1, "f32 [20000, 3]");
  expect_orders_agree(random_tensor(DType::i32, {700, 17}, 139), 1, "i32 [700, 17]");
  expect_orders_agree(random_tensor(DType::f32, {1, 1}, 140), 1, "f32 [1, 1]");
  EXPECT_EQ(sort(zeros({0, 4}).to(gpu), 1).shape(), Shape({0, 4}));
  EXPECT_EQ(argsort(zeros({4, 0}).to(gpu), 1).shape(), Shape({4, 0}));
  EXPECT_EQ(top_k(zeros({3, 6}).to(gpu), 0).indices.shape(), Shape({3, 0}));
}

// In a compiled function on the GPU: library kernels between generated ones.
TEST(CudaSort, CompiledFunctionsOnTheGpu) {
  KILN_REQUIRE_GPU();
  auto body = [](Tensor x) {
    const auto [values, indices] = top_k(x * 2.0F, 4);
    return std::tuple{sort(x + 1.0F, 0, true), values, indices};
  };
  auto standard = function(body);
  auto compiled = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const Tensor x = random_tensor(DType::f32, {33, 70}, 141);
  const auto [sorted, values, indices] = standard(x);
  const auto [sorted_gpu, values_gpu, indices_gpu] = compiled(x.to(gpu));
  expect_same(sorted, sorted_gpu, 0, "compiled sort");
  expect_same(values, values_gpu, 0, "compiled top_k values");
  expect_same(indices, indices_gpu, 0, "compiled top_k indices");
}

}  // namespace
