// bf16 and f16 on a CUDA device, against the CPU: casts round to the same bits (both devices take them from
// core/half_precision_bits.h), every other op computes in f32 and rounds once at its output as on the CPU, and
// matmul multiplies the 16-bit operands on the tensor cores with f32 sums (cuBLAS, CUDA_R_16BF / CUDA_R_16F).
// The CUDA JIT (compiler/widen_half_precision.h) agrees with the standard CUDA kernels to the bit: fused chains
// move 16-bit packs and compute in f32, and a 16-bit product's epilogue rounds cuBLAS's f32 sums where the
// standard matmul rounds them.

#include "cuda/cuda_test_support.h"
#include "support/differential.h"
#include "support/workloads.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace {

using namespace kiln;
using kiln::testing::gpu;

bool is_nan_bits(DType dtype, std::uint64_t bits) {
  switch (dtype) {
    case DType::bf16:
      return (bits & 0x7FFF) > 0x7F80;
    case DType::f16:
      return (bits & 0x7FFF) > 0x7C00;
    case DType::f32:
      return (bits & 0x7FFFFFFF) > 0x7F800000;
    case DType::f64:
      return (bits & 0x7FFFFFFFFFFFFFFF) > 0x7FF0000000000000;
    default:
      return false;
  }
}

// Element i of `tensor` (on the CPU) as its bits.
std::uint64_t bits_of(const Tensor& tensor, std::int64_t i) {
  std::uint64_t bits = 0;
  const std::size_t size = size_of(tensor.dtype());
  std::memcpy(&bits, static_cast<const char*>(tensor.data()) + static_cast<std::size_t>(i) * size, size);
  return bits;
}

// `actual` (any device) has `expected`'s dtype, shape and bits, element for element; a NaN equals any NaN (a GPU
// converting a NaN between f32 and f64 gives its canonical NaN, not the payload the CPU keeps).
void expect_same_bits(const Tensor& expected, const Tensor& actual, const std::string& what) {
  ASSERT_EQ(expected.dtype(), actual.dtype()) << what;
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  const Tensor want = expected.to(Device::cpu()), got = actual.to(Device::cpu());
  int reported = 0;
  for (std::int64_t i = 0; i < want.numel() && reported < 5; ++i) {
    const std::uint64_t a = bits_of(want, i), b = bits_of(got, i);
    if (a == b || (is_nan_bits(want.dtype(), a) && is_nan_bits(want.dtype(), b))) continue;
    ++reported;
    ADD_FAILURE() << what << ": element " << i << " of " << to_string(want.dtype()) << want.shape().to_string()
                  << " is 0x" << std::hex << b << " on the GPU, 0x" << a << " on the CPU";
  }
}

// Values where rounding to bf16 and f16 is delicate (ties, just past them, the edges of the range, subnormals,
// signed zeros, infinities, NaN), then random ones of many magnitudes: `count` in all.
Tensor delicate_values(std::int64_t count) {
  const double infinity = std::numeric_limits<double>::infinity();
  std::vector<double> values = {1.0 + 0x1p-8,
                                1.0 + 0x1p-8 + 0x1p-30,
                                1.0 + 3 * 0x1p-8,
                                1.0 + 0x1p-11,
                                1.0 + 0x1p-11 + 0x1p-40,
                                65504.0,
                                65519.0,
                                65520.0,
                                3.4e38,
                                1e300,
                                -0.0,
                                0.0,
                                infinity,
                                -infinity,
                                std::nan(""),
                                -std::nan(""),
                                0x1p-133,
                                0x1p-24,
                                0x1p-25,
                                0x1p-25 + 0x1p-40,
                                0x1p-14 - 0x1p-24,
                                -2.5,
                                2147483648.0,
                                -9.3e18,
                                0.1,
                                1.0 / 3.0};
  const std::vector<double> random = random::normal({count}, {.seed = 5, .dtype = DType::f64}).to_vector<double>();
  for (std::int64_t i = static_cast<std::int64_t>(values.size()); i < count; ++i)
    values.push_back(random[static_cast<std::size_t>(i)] * std::ldexp(1.0, static_cast<int>(i % 48) - 24));
  return from_vector(values, Shape{count});
}

TEST(CudaHalfPrecision, CastsRoundToTheBitsTheCpuRoundsTo) {
  KILN_REQUIRE_GPU();
  const std::vector<DType> every = {DType::boolean, DType::i32,  DType::i64, DType::f32,
                                    DType::f64,     DType::bf16, DType::f16};
  // A size whose elements fill 16-byte packs and leave a tail, a few odd ones, rank 0 and empty.
  for (std::int64_t count : {std::int64_t{100003}, std::int64_t{7}, std::int64_t{1}, std::int64_t{0}}) {
    const Tensor values = delicate_values(std::max<std::int64_t>(count, 26));
    const Tensor source = count == 1 ? reshape(slice(values, {.start = {2}, .stop = {3}}), {})
                                     : slice(values, {.start = {0}, .stop = {count}});
    for (DType from : every) {
      const Tensor input = cast(source, from);  // on the CPU
      const Tensor on_gpu = input.to(gpu);
      for (DType to : every) {
        if (!is_half_precision(from) && !is_half_precision(to)) continue;
        expect_same_bits(
            cast(input, to), cast(on_gpu, to),
            std::string(to_string(from)) + " -> " + std::string(to_string(to)) + " of " + std::to_string(count));
      }
    }
  }
}

TEST(CudaHalfPrecision, TransfersKeepEveryBit) {
  KILN_REQUIRE_GPU();
  std::vector<bfloat16> brain;
  std::vector<float16> half;
  for (std::uint32_t bits = 0; bits < 0x10000; bits += 7) {  // NaN payloads and signalling NaNs too
    brain.push_back(bfloat16{static_cast<std::uint16_t>(bits)});
    half.push_back(float16{static_cast<std::uint16_t>(bits)});
  }
  for (const Tensor& x : {from_vector(brain, Shape{static_cast<std::int64_t>(brain.size())}),
                          from_vector(half, Shape{static_cast<std::int64_t>(half.size())})}) {
    const Tensor back = x.to(gpu).to(Device::cpu());
    ASSERT_EQ(back.dtype(), x.dtype());
    EXPECT_EQ(std::memcmp(back.data(), x.data(), static_cast<std::size_t>(x.numel()) * 2), 0);
  }
}

TEST(CudaHalfPrecision, OpsComputeInF32AndRoundOnceAsOnTheCpu) {
  KILN_REQUIRE_GPU();
  for (DType half : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(to_string(half)));
    const Tensor a = cast(random::normal({37, 129}, {.seed = 1}), half);
    const Tensor b = cast(random::normal({37, 129}, {.seed = 2}), half);
    const Tensor row = cast(random::normal({129}, {.seed = 3}), half);
    const Tensor ga = a.to(gpu), gb = b.to(gpu), grow = row.to(gpu);
    // Correctly rounded in f32, and so to the bit after one more rounding; exact ops too.
    expect_same_bits(a + b, ga + gb, "add");
    expect_same_bits(a * b - a, ga * gb - ga, "mul, sub");
    expect_same_bits(a / row, ga / grow, "div, broadcast");
    expect_same_bits(sqrt(abs(a)), sqrt(abs(ga)), "sqrt");
    expect_same_bits(a * 0.1, ga * 0.1, "a weak scalar");
    expect_same_bits(maximum(a, b), maximum(ga, gb), "maximum");
    expect_same_bits(gt(a, b), gt(ga, gb), "gt");
    expect_same_bits(where(gt(a, 0), a, b), where(gt(ga, 0), ga, gb), "where");
    expect_same_bits(transpose(a), transpose(ga), "transpose");
    expect_same_bits(concat({a, b}, 1), concat({ga, gb}, 1), "concat");
    const SliceOptions strided{.start = {1, 2}, .stop = {30, 100}, .step = {2, 3}};
    expect_same_bits(slice(a, strided), slice(ga, strided), "slice");
    expect_same_bits(sort(a, 1), sort(ga, 1), "sort");
    expect_same_bits(argmax(a, 1), argmax(ga, 1), "argmax");
    expect_same_bits(reduce_max(a, {0}), reduce_max(ga, {0}), "reduce_max");
    // The GPU's math functions and summation order differ from the CPU's by a few f32 ulps: after rounding to
    // 16 bits, at most one 16-bit ulp apart.
    const double ulp = half == DType::bf16 ? 0x1p-7 : 0x1p-10;
    auto close = [&](const Tensor& want, const Tensor& got, const Tensor& scale, const char* what) {
      EXPECT_EQ(got.dtype(), half) << what;
      kiln::testing::expect_close_scaled(want, got, scale, ulp, what);
    };
    close(exp(a), exp(ga), exp(cast(a, DType::f32)), "exp");
    close(tanh(a), tanh(ga), abs(tanh(cast(a, DType::f32))) + 1e-3, "tanh");
    close(reduce_sum(a, {1}), reduce_sum(ga, {1}), reduce_sum(abs(cast(a, DType::f32)), {1}), "reduce_sum");
    close(nn::softmax(a), nn::softmax(ga), nn::softmax(cast(a, DType::f32)), "softmax");
    close(nn::layer_norm(a), nn::layer_norm(ga), abs(nn::layer_norm(cast(a, DType::f32))) + 0.01, "layer_norm");
  }
  // Rank 0 and zero-size tensors.
  EXPECT_EQ((cast(full({}, 1.5), DType::bf16).to(gpu) + 1).item<float>(), 2.5f);
  EXPECT_EQ((cast(zeros({0, 3}), DType::f16).to(gpu) * 2).shape(), (Shape{0, 3}));
  EXPECT_EQ(reduce_sum(cast(zeros({0, 3}), DType::bf16).to(gpu)).item<float>(), 0.0f);
}

TEST(CudaHalfPrecision, MatmulMultipliesTheOperandsAsTheyAreAndSumsInF32) {
  KILN_REQUIRE_GPU();
  for (DType half : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(to_string(half)));
    const double ulp = half == DType::bf16 ? 0x1p-7 : 0x1p-10;
    struct Case {
      Shape a, b;
      bool transpose_a, transpose_b;
    };
    for (const Case& c : {Case{{37, 53}, {53, 29}, false, false}, Case{{53, 37}, {53, 29}, true, false},
                          Case{{37, 53}, {29, 53}, false, true}, Case{{3, 37, 53}, {53, 29}, false, false},
                          Case{{2, 3, 16, 64}, {2, 3, 64, 8}, false, false}, Case{{5, 0}, {0, 4}, false, false},
                          Case{{0, 5}, {5, 4}, false, false}}) {
      const Tensor a = cast(random::normal(c.a, {.seed = 7}), half);
      const Tensor b = cast(random::normal(c.b, {.seed = 8}), half);
      const MatmulOptions options{.transpose_a = c.transpose_a, .transpose_b = c.transpose_b};
      const Tensor want = matmul(a, b, options);
      const Tensor got = matmul(a.to(gpu), b.to(gpu), options);
      ASSERT_EQ(got.dtype(), half);
      // The exact product of the 16-bit values, summed in f32 in another order, rounded once: within one 16-bit
      // ulp of the bound on its terms.
      const Tensor scale = matmul(abs(cast(a, DType::f32)), abs(cast(b, DType::f32)), options);
      kiln::testing::expect_close_scaled(want, got, scale, ulp, c.a.to_string() + " x " + c.b.to_string());
    }
  }
}

// ---- the CUDA JIT ---------------------------------------------------------------------------------

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

// `body` on the GPU with the standard kernels and compiled (a fallback is a failure): the same bits in every output.
template <class Body, class... Inputs>
FunctionStatistics expect_jit_same_bits(const std::string& label, Body body, const Inputs&... inputs) {
  auto standard = function(body, {.name = "standard"});
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "jit"});
  const std::vector<Tensor> expected = kiln::testing::flatten_result(standard(inputs.to(gpu)...));
  const std::vector<Tensor> got = kiln::testing::flatten_result(jit(inputs.to(gpu)...));
  EXPECT_EQ(expected.size(), got.size()) << label;
  for (std::size_t i = 0; i < got.size() && i < expected.size(); ++i) {
    EXPECT_EQ(got[i].device(), gpu) << label;
    expect_same_bits(expected[i], got[i], label + ", output " + std::to_string(i));
  }
  return jit.statistics();
}

TEST(CudaHalfPrecisionJit, ElementwiseChainsAgreeWithTheStandardKernelsToTheBit) {
  KILN_REQUIRE_GPU();
  for (DType half : {DType::bf16, DType::f16}) {
    const std::string name(to_string(half));
    for (const Shape& shape : {Shape{5, 7}, Shape{3, 64}, Shape{}, Shape{0, 4}, Shape{2, 3, 17}}) {
      const Tensor a = cast(random::normal(shape, {.seed = 1}), half);
      const Tensor b = cast(random::normal(shape, {.seed = 2}), half);
      expect_jit_same_bits(name + " " + shape.to_string(), kiln::testing::half_precision_chain(half), a, b);
    }
    // Special values, broadcasting, another width, transposed views.
    const Tensor special = cast(delicate_values(64), half), row = cast(random::normal({64}, {.seed = 3}), half);
    expect_jit_same_bits(
        name + " special values",
        [](Tensor x, Tensor r) {
          return std::tuple{x * r, x + 1, exp(x), cast(x, DType::f32) * 1e5, transpose(reshape(x, {8, 8})) * 2};
        },
        special, row);
    expect_jit_same_bits(
        name + " rounding from f32 and f64",
        [half](Tensor x) {
          return std::tuple{cast(x * 1e5, half), cast(cast(x, DType::f64) * 1e5, half)};
        },
        random::normal({67}, {.seed = 7}));
  }
}

TEST(CudaHalfPrecisionJit, AChainIsOneKernelMovingPacksOfEightValues) {
  KILN_REQUIRE_GPU();
  const Tensor a = cast(random::normal({64, 1024}, {.seed = 1}), DType::bf16);
  const Tensor b = cast(random::normal({1024}, {.seed = 2}), DType::bf16);
  auto body = [](Tensor x, Tensor y) { return nn::gelu(x * y + 1); };
  const FunctionStatistics statistics = expect_jit_same_bits("gelu chain", body, a, b);
  EXPECT_EQ(statistics.kernels_per_call, 1);
  const std::string source = function(body, {.jit_compile = true}).get_compiler_ir(Stage::source, a.to(gpu), b.to(gpu));
  EXPECT_TRUE(contains(source, "widen_bf16(")) << source;
  EXPECT_TRUE(contains(source, "round_to_bf16(")) << source;
  EXPECT_TRUE(contains(source, "Pack<uint16_t, 8>")) << "16-byte accesses of 8 values\n" << source;
}

TEST(CudaHalfPrecisionJit, ADenseLayerIsATensorCoreProductAndOneEpilogueKernel) {
  KILN_REQUIRE_GPU();
  for (DType half : {DType::bf16, DType::f16}) {
    const std::string name(to_string(half));
    for (const Shape& rows : {Shape{70, 96}, Shape{2, 35, 96}}) {
      const Tensor x = cast(random::normal(rows, {.seed = 1}), half);
      const Tensor w = cast(random::normal({96, 50}, {.seed = 2}), half);
      const Tensor bias = cast(random::normal({50}, {.seed = 3}), half);
      // The epilogue rounds cuBLAS's f32 sums where the standard matmul rounds them: the same bits.
      const FunctionStatistics statistics = expect_jit_same_bits(
          name + " dense layer " + rows.to_string(),
          [](Tensor a, Tensor b, Tensor c) {
            return std::tuple{matmul(a, b), nn::gelu(matmul(a, b) + c)};
          },
          x, w, bias);
      EXPECT_EQ(statistics.kernels_per_call, 1) << name << rows.to_string();
      EXPECT_EQ(statistics.fallbacks, 0);
    }
  }
  // The seed in bf16: the product, its epilogue and the sum of the epilogue.
  const Tensor square = cast(random::normal({96, 96}, {.seed = 4}), DType::bf16);
  auto seed = [](Tensor a, Tensor b) { return reduce_sum(nn::relu(matmul(a, b) + sin(matmul(a, b)))); };
  auto jit = function(seed, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const Tensor got = jit(square.to(gpu), square.to(gpu));
  const Tensor want = function(seed)(square.to(gpu), square.to(gpu));
  EXPECT_EQ(got.dtype(), DType::bf16);
  EXPECT_NEAR(got.item<float>(), want.item<float>(), 0x1p-6 * std::fabs(want.item<float>()));
  const std::string source = jit.get_compiler_ir(Stage::source, square.to(gpu), square.to(gpu));
  EXPECT_TRUE(contains(source, "round_to_bf16(product[")) << source;
}

TEST(CudaHalfPrecisionJit, SoftmaxAndLayerNormAreOneRowKernelEach) {
  KILN_REQUIRE_GPU();
  for (DType half : {DType::bf16, DType::f16}) {
    const std::string name(to_string(half));
    const double ulp = half == DType::bf16 ? 0x1p-7 : 0x1p-10;
    const Tensor x = cast(random::normal({48, 1000}, {.seed = 1}), half);
    const Tensor gamma = cast(random::normal({1000}, {.seed = 2}), half);
    const Tensor beta = cast(random::normal({1000}, {.seed = 3}), half);
    auto softmax =
        function([](Tensor a) { return nn::softmax(a); }, {.jit_compile = true, .on_compile_failure = Fallback::none});
    auto layer_norm = function([](Tensor a, Tensor g, Tensor b) { return nn::layer_norm(a, g, b); },
                               {.jit_compile = true, .on_compile_failure = Fallback::none});
    const Tensor probabilities = softmax(x.to(gpu));
    const Tensor normalized = layer_norm(x.to(gpu), gamma.to(gpu), beta.to(gpu));
    EXPECT_EQ(softmax.statistics().kernels_per_call, 1) << name << softmax.get_compiler_ir(Stage::fused, x.to(gpu));
    EXPECT_EQ(layer_norm.statistics().kernels_per_call, 1) << name;
    ASSERT_EQ(probabilities.dtype(), half);
    ASSERT_EQ(normalized.dtype(), half);
    // Against the CPU's standard kernels: sums in another order, within a 16-bit ulp of the result.
    const Tensor wide = cast(x, DType::f32);
    kiln::testing::expect_close_scaled(nn::softmax(x), probabilities, nn::softmax(wide), ulp, name + " softmax");
    kiln::testing::expect_close_scaled(
        nn::layer_norm(x, gamma, beta), normalized,
        abs(nn::layer_norm(wide, cast(gamma, DType::f32), cast(beta, DType::f32))) + abs(cast(beta, DType::f32)) + 0.01,
        ulp, name + " layer_norm");
  }
}

// Mixed precision on the GPU (testing::mixed_precision_step): the whole training step in one compiled function.
TEST(CudaHalfPrecisionJit, AMixedPrecisionTrainingStepCompiles) {
  KILN_REQUIRE_GPU();
  const Tensor weights = random::normal({64, 10}, {.seed = 1, .device = gpu});
  const Tensor m = zeros({64, 10}).to(gpu), v = zeros({64, 10}).to(gpu);
  const Tensor x = cast(random::normal({32, 64}, {.seed = 2}), DType::bf16).to(gpu);
  const Tensor labels = cast(floor(random::uniform({32}, {.seed = 3, .low = 0, .high = 10})), DType::i32).to(gpu);
  auto standard = function(kiln::testing::mixed_precision_step);
  auto jit = function(kiln::testing::mixed_precision_step, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const auto expected = kiln::testing::flatten_result(standard(weights, m, v, x, labels));
  const auto got = kiln::testing::flatten_result(jit(weights, m, v, x, labels));
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[2].dtype(), DType::bf16);
  kiln::testing::expect_within_bf16_rounding(expected, got);
  expect_same_bits(cast(got[1], DType::bf16), got[2], "the bf16 copy of the new weights");
  EXPECT_EQ(jit.statistics().fallbacks, 0);
}

}  // namespace
