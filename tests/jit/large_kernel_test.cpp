// Kernels over data far larger than the caches take three paths that small
// tests never reach: element outputs of 16 MiB or more are written with
// non-temporal stores (store_streaming, falling back to plain stores on rows
// that are not 64-byte aligned), and multi-pass row kernels over rows of 4 KiB
// or more prefetch the next row, and loop kernels over inputs of 16 MiB or
// more prefetch each input 8 KiB ahead. All are checked here against the standard
// executor and the float64 reference, with the generated source showing that
// the path was taken.

#include "compiler/pipeline.h"
#include "ir/parser.h"
#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

int occurrences(const std::string& text, const std::string& pattern) {
  int count = 0;
  for (std::size_t at = text.find(pattern); at != std::string::npos; at = text.find(pattern, at + 1)) ++count;
  return count;
}

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
  // Called for every tile, the epilogue leaves the fence to the pool, which fences after every piece.
  EXPECT_EQ(source.find("end_streaming();"), std::string::npos) << source;
}

TEST(LargeKernels, LargeResultsThatNothingReadsAgainAreStreamed) {
  // A weight gradient with Adam in its epilogue, as a training step has it: three 1030 x 1030 results (12.7 MB, under
  // the 16 MiB that streams any kernel's outputs) that no later kernel reads, in a function returning 17 MB, go
  // past the caches; so does the separate elementwise result (4.2 MB). The product read by another kernel does not.
  Tensor a = random_tensor(DType::f32, {37, 1030}, 31), g = random_tensor(DType::f32, {37, 1030}, 32);
  Tensor p = random_tensor(DType::f32, {1030, 1030}, 33), m = random_tensor(DType::f32, {1030, 1030}, 34);
  Tensor v = abs(random_tensor(DType::f32, {1030, 1030}, 35)) + 0.1;
  auto step = [](Tensor a, Tensor g, Tensor p, Tensor m, Tensor v) {
    Tensor gradient = matmul(a, g, {.transpose_a = true});
    Tensor new_m = 0.9 * m + 0.1 * gradient, new_v = 0.999 * v + 0.001 * square(gradient);
    Tensor new_p = p - 0.001 * new_m / (sqrt(new_v) + 1e-8);
    return std::vector<Tensor>{new_p, new_m, new_v, p * 2.0 + 1.0};
  };
  expect_agreement("adam in a weight gradient's epilogue", step, a, g, p, m, v);
  auto jit = function(step, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::string source = jit.get_compiler_ir(Stage::source, a, g, p, m, v);
  const std::size_t epilogue = source.find("_epilogue(");
  ASSERT_NE(epilogue, std::string::npos) << source;
  const std::size_t entry = source.find("extern \"C\"", epilogue);
  const std::string epilogue_code = source.substr(epilogue, entry - epilogue);
  EXPECT_EQ(occurrences(epilogue_code, "store_streaming<float>(row_"), 3) << epilogue_code;
  EXPECT_EQ(epilogue_code.find("end_streaming();"), std::string::npos) << epilogue_code;
  EXPECT_NE(source.find("store_streaming<float>(", entry), std::string::npos) << source;
}

TEST(LargeKernels, ResultsThatLeaveForTheGraphAroundAreNotStreamed) {
  // The same results of a loop's step or a branch (Program::results_leave false: the next iteration or the enclosing
  // graph reads them at once) keep plain stores; a function's are streamed.
  // Two kernels (their spaces differ) storing 4.2 and 12.8 MB: each under 16 MiB, together over it.
  const char* text =
      R"(func @step(%0: f32[1030,1030], %1: f32[1030,1030], %2: f32[1030,3100]) -> (f32[1030,1030], f32[1030,3100]) {
  %3 = f32[1030,1030] add(%0, %1)
  %4 = f32[1030,3100] mul(%2, %2)
  return %3, %4
}
)";
  for (const bool leave : {true, false}) {
    compiler::Program program = compiler::program_for(ir::parse(text), Device::cpu());
    program.results_leave = leave;
    compiler::optimize(program);
    compiler::run_lowering(program);
    const std::string& source = program.source;
    // Kernel 0's code ends with its entry point, where kernel 1's begins.
    const std::size_t boundary = source.find("void kiln_kernel_0(");
    ASSERT_NE(boundary, std::string::npos) << source;
    EXPECT_EQ(source.find("store_streaming<float>(row_") < boundary, leave) << source;
    EXPECT_EQ(source.find("store_streaming<float>(row_", boundary) != std::string::npos, leave) << source;
  }
}

TEST(LargeKernels, SmallOutputsUsePlainStores) {
  Tensor x = random_tensor(DType::f32, {64, 301}, 26);
  std::string source = source_of([](Tensor x) { return nn::softmax(x); }, x);
  EXPECT_EQ(source.find("store_streaming<float>(row_"), std::string::npos);
  EXPECT_EQ(source.find("__builtin_prefetch(row_"), std::string::npos);
}

}  // namespace
}  // namespace kiln
