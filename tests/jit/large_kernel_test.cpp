// Kernels over data far larger than the caches take three paths that small
// tests never reach: element outputs of 16 MiB or more are written with
// non-temporal stores (store_streaming, falling back to plain stores on rows
// that are not 64-byte aligned), and multi-pass row kernels over rows of 4 KiB
// or more prefetch the next row, and loop kernels over inputs of 16 MiB or
// more prefetch each input 8 KiB ahead. All are checked here against the standard
// executor and the float64 reference, with the generated source showing that
// the path was taken.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

std::string source_of(auto body, const Tensor& x) {
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  return jit.get_compiler_ir(Stage::source, x);
}

TEST(LargeKernels, SoftmaxOverLongMisalignedRowsStreamsAndPrefetches) {
  // 4099 floats per row: rows start at every 4-byte offset modulo 64, so some
  // take the streaming stores and the others the plain fallback.
  Tensor x = random_tensor(DType::f32, {1031, 4099}, 21);
  auto softmax = [](Tensor x) { return nn::softmax(x); };
  expect_agreement("softmax 1031x4099", softmax, x);
  std::string source = source_of(softmax, x);
  EXPECT_NE(source.find("store_streaming<float>(row_"), std::string::npos);
  EXPECT_NE(source.find("__builtin_prefetch(row_x0 + 4099 + j"), std::string::npos);
  EXPECT_NE(source.find("end_streaming();"), std::string::npos);
}

TEST(LargeKernels, LayerNormOverAlignedRows) {
  Tensor x = random_tensor(DType::f32, {1024, 4096}, 22);
  Tensor gamma = random_tensor(DType::f32, {4096}, 23), beta = random_tensor(DType::f32, {4096}, 24);
  expect_agreement(
      "layer_norm 1024x4096", [](Tensor x, Tensor gamma, Tensor beta) { return nn::layer_norm(x, gamma, beta); }, x,
      gamma, beta);
}

TEST(LargeKernels, ElementwiseF64AndBooleanOutputs) {
  // f64 vectors are two 64-byte stores; booleans are never streamed.
  Tensor x = random_tensor(DType::f64, {(std::int64_t{1} << 21) + 5}, 25);
  auto body = [](Tensor x) { return std::vector<Tensor>{tanh(x) * 2.0, x > 0.5}; };
  expect_agreement("f64 tanh and compare, 2M + 5", body, x);
  std::string source = source_of(body, x);
  EXPECT_NE(source.find("store_streaming<double>("), std::string::npos);
  EXPECT_NE(source.find("store<uint8_t>("), std::string::npos);
  // The 16 MiB input is prefetched 8 KiB (1024 doubles) ahead.
  EXPECT_NE(source.find("__builtin_prefetch(row_x0 + j + 1024, 0, 2)"), std::string::npos);
}

TEST(LargeKernels, AGemmEpilogueStreamsItsLargeOutputs) {
  // A 1027 x 4099 product (16.8 MB of f32) through its epilogue: the f32 output streamed, rows at every offset
  // modulo 64 (some take the plain fallback), the boolean one not.
  Tensor a = random_tensor(DType::f32, {1027, 67}, 27), b = random_tensor(DType::f32, {67, 4099}, 28);
  auto body = [](Tensor a, Tensor b) {
    Tensor product = matmul(a, b);
    return std::vector<Tensor>{nn::relu(product + 1.0), product > 0.5};
  };
  expect_agreement("matmul epilogue 1027x67x4099", body, a, b);
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::string source = jit.get_compiler_ir(Stage::source, a, b);
  EXPECT_NE(source.find("_epilogue("), std::string::npos) << source;
  EXPECT_NE(source.find("store_streaming<float>(row_"), std::string::npos) << source;
  EXPECT_NE(source.find("store<uint8_t>(row_"), std::string::npos) << source;
  EXPECT_NE(source.find("end_streaming();"), std::string::npos) << source;
}

TEST(LargeKernels, SmallOutputsUsePlainStores) {
  Tensor x = random_tensor(DType::f32, {64, 301}, 26);
  std::string source = source_of([](Tensor x) { return nn::softmax(x); }, x);
  EXPECT_EQ(source.find("store_streaming<float>(row_"), std::string::npos);
  EXPECT_EQ(source.find("__builtin_prefetch(row_"), std::string::npos);
}

}  // namespace
}  // namespace kiln
