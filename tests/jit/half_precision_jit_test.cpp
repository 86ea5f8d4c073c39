// bf16 and f16 in the CPU JIT (compiler/widen_half_precision.h): their bits are loaded, moved and stored, every op
// computes in f32 and rounds where the standard executor rounds. Elementwise chains agree with the standard
// executor to the bit, special values included; reductions, softmax, layer_norm and matmul agree with it and with
// the float64 reference within the tolerance of the 16-bit format; a fused chain is one kernel that reads and
// writes 16 bits.

#include "kernels/cpu/gemm_bf16.h"
#include "support/differential.h"
#include "support/test_support.h"
#include "support/workloads.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

using testing::expect_same_bits;
using testing::same_bits;

// A mix of ordinary values and every special one (NaN, infinities, zeros of both signs, subnormals of the
// 16-bit format, values past its range that round to infinity), in `dtype`.
Tensor special_tensor(DType dtype, std::int64_t count, std::uint64_t seed) {
  std::vector<double> values = random_tensor(DType::f64, {count}, seed).to_vector<double>();
  const double tiny = dtype == DType::bf16 ? 0x1p-130 : 0x1p-20;  // subnormal in each
  const std::vector<double> special = {std::nan(""), -std::nan(""), INFINITY, -INFINITY, 0.0,     -0.0,
                                       tiny,         -tiny,         1e38,     70000.0,   65504.0, 1.0 + 0x1p-8};
  for (std::size_t i = 0; i < special.size() && i < values.size(); ++i) values[i * 3 % values.size()] = special[i];
  return cast(from_vector(values, {count}), dtype);
}

TEST(HalfPrecisionJit, ElementwiseChainsAgreeWithTheStandardExecutorToTheBit) {
  for (DType half : {DType::bf16, DType::f16}) {
    const std::string name(to_string(half));
    for (const Shape& shape : {Shape{5, 7}, Shape{3, 33}, Shape{}, Shape{0, 4}, Shape{2, 3, 17}}) {
      const Tensor a = random_tensor(half, shape, 1), b = random_tensor(half, shape, 2);
      // Arithmetic, transcendentals, compares and selects, casts every way.
      expect_same_bits(name + " " + shape.to_string(), testing::half_precision_chain(half), a, b);
    }
    const Tensor a = random_tensor(half, {5, 7}, 1), b = random_tensor(half, {5, 7}, 2);
    const Tensor row = random_tensor(half, {7}, 3), wide = random_tensor(DType::f32, {5, 7}, 4);
    expect_same_bits(
        name + " broadcasting, mixed widths, transposed views",
        [](Tensor x, Tensor y, Tensor r, Tensor w) {
          return std::tuple{x * r + 1, x + w, r * 2, transpose(x) * 2 + transpose(y)};
        },
        a, b, row, wide);
    const Tensor special = special_tensor(half, 37, 5), other = special_tensor(half, 37, 6);
    expect_same_bits(
        name + " special values",
        [](Tensor x, Tensor y) {
          return std::tuple{x * y, x + 1, exp(x), cast(x, DType::f32) * 1e5};
        },
        special, other);
    expect_same_bits(
        name + " rounding from f32 and f64",
        [half](Tensor x) {
          return std::tuple{cast(x * 1e5, half), cast(cast(x, DType::f64) * 1e5, half)};
        },
        random_tensor(DType::f32, {67}, 7));
  }
}

TEST(HalfPrecisionJit, AChainIsOneKernelReadingAndWritingSixteenBits) {
  const Tensor a = random_tensor(DType::bf16, {64, 130}, 1), b = random_tensor(DType::bf16, {130}, 2);
  auto body = [](Tensor x, Tensor y) { return nn::gelu(x * y + 1); };
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const Tensor result = jit(a, b);
  EXPECT_EQ(result.dtype(), DType::bf16);
  EXPECT_EQ(jit.statistics().kernels_per_call, 1) << jit.get_compiler_ir(Stage::fused, a, b);
  const std::string source = jit.get_compiler_ir(Stage::source, a, b);
  EXPECT_TRUE(contains(source, "widen_bf16(")) << source;
  EXPECT_TRUE(contains(source, "round_to_bf16(")) << source;
  EXPECT_TRUE(contains(source, "const uint16_t* input0;")) << source;
}

TEST(HalfPrecisionJit, ABf16ProductAndItsEpilogueAreOneGemmKernel) {
  if (!kernels::cpu::has_bf16_products())
    GTEST_SKIP() << "neither AMX-BF16 nor AVX512_BF16 here: bf16 products are widened f32 ones";
  const Tensor x = random_tensor(DType::bf16, {70, 96}, 1), w = random_tensor(DType::bf16, {96, 50}, 2);
  const Tensor bias = random_tensor(DType::bf16, {50}, 3);
  // The epilogue rounds the f32 sums to the product's bf16 as the standard executor's matmul does: the same bits.
  expect_same_bits(
      "dense layer", [](Tensor a, Tensor b, Tensor c) { return nn::gelu(matmul(a, b) + c); }, x, w, bias);
  auto layer = function(
      [](Tensor a, Tensor b, Tensor c) {
        return std::tuple{matmul(a, b), nn::relu(matmul(a, b) + c)};
      },
      {.jit_compile = true, .on_compile_failure = Fallback::none});
  layer(x, w, bias);
  EXPECT_EQ(layer.statistics().kernels_per_call, 1) << layer.get_compiler_ir(Stage::fused, x, w, bias);
  EXPECT_TRUE(contains(layer.get_compiler_ir(Stage::source, x, w, bias), "runtime->gemm_bf16("));
  // The seed: the product's epilogue accumulates the sum; its rounding to bf16 is a scalar kernel after.
  auto seed = function([](Tensor a, Tensor b) { return reduce_sum(nn::relu(matmul(a, b) + sin(matmul(a, b)))); },
                       {.jit_compile = true, .on_compile_failure = Fallback::none});
  const Tensor square = random_tensor(DType::bf16, {96, 96}, 4);
  seed(square, square);
  const std::string fused = seed.get_compiler_ir(Stage::fused, square, square);
  EXPECT_EQ(seed.statistics().kernels_per_call, 2) << fused;
  EXPECT_TRUE(contains(fused, "which the GEMM's epilogue accumulates tile by tile")) << fused;
  expect_same_bits(
      "seed", [](Tensor a, Tensor b) { return reduce_sum(nn::relu(matmul(a, b) + sin(matmul(a, b)))); }, square,
      square);
}

// Mixed precision (testing::mixed_precision_step): the whole training step in one compiled function.
TEST(HalfPrecisionJit, AMixedPrecisionTrainingStepCompiles) {
  const Tensor weights = random_tensor(DType::f32, {64, 10}, 1);
  const Tensor m = zeros({64, 10}), v = zeros({64, 10});
  const Tensor x = random_tensor(DType::bf16, {32, 64}, 2);
  const Tensor labels = cast(floor(random::uniform({32}, {.seed = 3, .low = 0, .high = 10})), DType::i32);
  auto standard = function(testing::mixed_precision_step);
  auto jit = function(testing::mixed_precision_step, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const auto expected = testing::flatten_result(standard(weights, m, v, x, labels));
  const auto got = testing::flatten_result(jit(weights, m, v, x, labels));
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0].dtype(), DType::f32);
  EXPECT_EQ(got[1].dtype(), DType::f32);
  EXPECT_EQ(got[2].dtype(), DType::bf16);
  testing::expect_within_bf16_rounding(expected, got);
  // The step moved the weights, and the bf16 copy is the new weights rounded.
  EXPECT_NE(got[1].to_vector<float>(), weights.to_vector<float>());
  EXPECT_TRUE(same_bits(got[2], cast(got[1], DType::bf16)));
  EXPECT_LE(jit.statistics().kernels_per_call, 8) << jit.get_compiler_ir(Stage::fused, weights, m, v, x, labels);
}

TEST(HalfPrecisionJit, ReductionsMatmulAndCompositesAgreeWithTheReference) {
  for (DType half : {DType::bf16, DType::f16}) {
    const std::string name(to_string(half));
    const Tensor a = random_tensor(half, {6, 45}, 1), b = random_tensor(half, {45, 9}, 2);
    const Tensor scale = random_tensor(half, {45}, 3), offset = random_tensor(half, {45}, 4);
    expect_agreement(
        name + " reductions",
        [](Tensor x) {
          return std::tuple{reduce_sum(x, {1}), reduce_mean(x), reduce_max(x, {0}), argmax(x, 1), cumsum(x, 1)};
        },
        a);
    expect_agreement(
        name + " softmax and layer_norm",
        [](Tensor x, Tensor s, Tensor o) {
          return std::tuple{nn::softmax(x), nn::layer_norm(x, s, o)};
        },
        a, scale, offset);
    expect_agreement(
        name + " matmul with an epilogue", [](Tensor x, Tensor w) { return nn::relu(matmul(x, w) + 1); }, a, b);
    // The seed's sum over a product of 70 x 50: the epilogue's pieces past the edge blocks' last rows are empty, and
    // their partial sums must still count as zeros.
    expect_agreement(
        name + " the seed at a size no block fits",
        [](Tensor x, Tensor w) { return reduce_sum(nn::relu(matmul(x, w) + sin(matmul(x, w)))); },
        random_tensor(half, {70, 45}, 5), random_tensor(half, {45, 50}, 6));
    expect_agreement(
        name + " sort and concat",
        [](Tensor x) {
          return std::tuple{sort(x, 1), concat({x, x * 2}, 1),
                            slice(x, {.start = {1, 0}, .stop = {5, 45}, .step = {2, 3}})};
        },
        a);
  }
}

// Every bf16 value widened, and f32 values at each bf16 boundary rounded: the upper 16 bits take all 65536 patterns
// (every sign, exponent, NaN payload, quiet or signaling, and infinity), the lower ones each case of round to
// nearest even (zero, just above, just below half, half itself with an even or odd bf16, just above half, all ones).
// The generated code rounds with the target's own instructions (AVX-512 BF16, or AVX2's integer arithmetic and
// pack), the standard executor with half_bits::bf16_rounded: the same bits, NaNs included.
TEST(HalfPrecisionJit, EveryBf16PatternWidensAndEveryRoundingCaseRoundsAsTheStandardExecutor) {
  std::vector<bfloat16> halves(65536);
  for (std::uint32_t high = 0; high < 65536; ++high) halves[high] = bfloat16{static_cast<std::uint16_t>(high)};
  const Tensor every_bf16 = from_vector(halves, {65536});
  expect_same_bits(
      "widening",
      [](Tensor x) {
        return std::tuple{cast(x, DType::f32), cast(x, DType::f32) * 3};
      },
      every_bf16);

  const std::uint32_t lows[] = {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu};
  std::vector<float> values;
  for (std::uint32_t high = 0; high < 65536; ++high)
    for (std::uint32_t low : lows) values.push_back(std::bit_cast<float>(high << 16 | low));
  const Tensor boundaries = from_vector(values, {static_cast<std::int64_t>(values.size())});
  expect_same_bits(
      "rounding",
      [](Tensor x) {
        return std::tuple{cast(x, DType::bf16), cast(x * 1, DType::bf16)};
      },
      boundaries);
}

}  // namespace
}  // namespace kiln
