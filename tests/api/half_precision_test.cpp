// bf16 and f16 (include/kiln/dtype.h): rounding to nearest even, once, from every dtype; exact conversion back;
// every op computing in f32 and rounding once at its output (the standard executor; the JIT's agreement with it is
// tests/jit/half_precision_jit_test.cpp); JAX's promotion; gradients; printing, IR text, tensor files (safetensors
// BF16/F16 as PyTorch writes them, .npy '<f2'); DLPack.

#include "ir/parser.h"
#include "ir/printer.h"
#include "support/files.h"

#include <gtest/gtest.h>
#include <kiln/dlpack.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace kiln {
namespace {

using testing::error_of;
using testing::TemporaryDirectory;

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }
std::uint16_t bf16_bits(double value) { return to_bfloat16(value).bits; }
std::uint16_t f16_bits(double value) { return to_float16(value).bits; }

TEST(HalfPrecision, Bfloat16RoundsToNearestEvenOnce) {
  EXPECT_EQ(bf16_bits(1.0), 0x3F80);
  EXPECT_EQ(bf16_bits(-2.0), 0xC000);
  EXPECT_EQ(bf16_bits(1.0 + 0x1p-8), 0x3F80) << "a tie goes to the even neighbour (1)";
  EXPECT_EQ(bf16_bits(1.0 + 3 * 0x1p-8), 0x3F82) << "a tie goes to the even neighbour (1 + 2^-6)";
  EXPECT_EQ(bf16_bits(1.0 + 0x1p-8 + 0x1p-30), 0x3F81)
      << "just above the tie: rounding through f32 first would have made it a tie, and 1";
  EXPECT_EQ(bf16_bits(3.4e38), 0x7F80) << "past the largest finite bf16: infinity";
  EXPECT_EQ(bf16_bits(-std::numeric_limits<double>::infinity()), 0xFF80);
  EXPECT_EQ(bf16_bits(1e300), 0x7F80);
  EXPECT_TRUE(std::isnan(to_float(to_bfloat16(std::numeric_limits<double>::quiet_NaN()))));
  EXPECT_EQ(bf16_bits(0x1p-133), 0x0001) << "the smallest subnormal";
  EXPECT_EQ(bf16_bits(-0.0), 0x8000);
  for (double value : {0.1, -3.14159, 65504.0, 1e-20, 123456.789})
    EXPECT_EQ(to_float(to_bfloat16(value)), to_float(to_bfloat16(to_float(to_bfloat16(value))))) << value;
}

TEST(HalfPrecision, Float16RoundsToNearestEvenOnceWithSubnormalsAndInfinity) {
  EXPECT_EQ(f16_bits(1.0), 0x3C00);
  EXPECT_EQ(f16_bits(1.0 / 3.0), 0x3555);
  EXPECT_EQ(f16_bits(65504.0), 0x7BFF) << "the largest finite f16";
  EXPECT_EQ(f16_bits(65519.0), 0x7BFF);
  EXPECT_EQ(f16_bits(65520.0), 0x7C00) << "the tie past the largest rounds to (even) infinity";
  EXPECT_EQ(f16_bits(0x1p-24), 0x0001) << "the smallest subnormal";
  EXPECT_EQ(f16_bits(0x1p-25), 0x0000) << "half of it: a tie, to even (zero)";
  EXPECT_EQ(f16_bits(0x1p-25 + 0x1p-40), 0x0001);
  EXPECT_EQ(f16_bits(0x1p-14), 0x0400) << "the smallest normal";
  EXPECT_EQ(f16_bits(0x1p-14 - 0x1p-24), 0x03FF) << "the largest subnormal";
  EXPECT_EQ(f16_bits(1.0 + 0x1p-11), 0x3C00) << "tie to even";
  EXPECT_EQ(f16_bits(1.0 + 0x1p-11 + 0x1p-40), 0x3C01) << "just above the tie: one rounding, not two";
  EXPECT_EQ(f16_bits(-2.5), 0xC100);
  EXPECT_TRUE(std::isnan(to_float(to_float16(std::numeric_limits<double>::quiet_NaN()))));
  EXPECT_EQ(to_float(float16{0x7C00}), std::numeric_limits<float>::infinity());
  EXPECT_EQ(to_float(float16{0x0001}), 0x1p-24f);
  EXPECT_EQ(to_float(float16{0x3555}), 0.333251953125f);
  // Every f16 converts to f32 and back unchanged.
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = to_float(float16{static_cast<std::uint16_t>(bits)});
    if (!std::isnan(value)) {
      ASSERT_EQ(to_float16(value).bits, bits) << std::hex << bits;
    }
  }
}

TEST(HalfPrecision, CastsBothWaysFromEveryDtype) {
  const Tensor x = from_vector(std::vector<double>{1.0 + 0x1p-8 + 0x1p-30, -3.75, 70000.0, 0.0}, Shape{4});
  const Tensor brain = cast(x, DType::bf16);
  EXPECT_EQ(brain.dtype(), DType::bf16);
  EXPECT_EQ(to_bfloat16(1.0 + 0x1p-8 + 0x1p-30).bits, static_cast<const std::uint16_t*>(brain.data())[0])
      << "from f64: one rounding";
  EXPECT_EQ(brain.to_vector<float>(), (std::vector<float>{1.0078125f, -3.75f, 70144.0f, 0.0f}));
  const Tensor half = cast(x, DType::f16);
  EXPECT_EQ(half.to_vector<float>(),
            (std::vector<float>{1.00390625f, -3.75f, std::numeric_limits<float>::infinity(), 0.0f}));
  EXPECT_EQ(cast(half, DType::f32).to_vector<float>(), half.to_vector<float>());
  EXPECT_EQ(cast(brain, DType::f16).to_vector<float>()[1], -3.75f);
  EXPECT_EQ(cast(from_vector(std::vector<std::int32_t>{3, -7, 257}, Shape{3}), DType::bf16).to_vector<float>(),
            (std::vector<float>{3, -7, 256}))
      << "257 ties between 256 and 258: to even";
  EXPECT_EQ(cast(brain, DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, -3, 70144, 0}));
  EXPECT_EQ(cast(brain, DType::boolean).to_vector<bool>(), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(cast(Tensor(from_vector(std::vector<bool>{true, false}, Shape{2})), DType::f16).to_vector<float>(),
            (std::vector<float>{1, 0}));
  // From f32 (the kernel's own bit rounding) as to_bfloat16 rounds: ties, NaN, infinities, overflow, subnormals,
  // signed zeros and random bit patterns.
  std::vector<float> singles = {1.00390625f,
                                1.01171875f,
                                std::numeric_limits<float>::quiet_NaN(),
                                -std::numeric_limits<float>::infinity(),
                                3.4e38f,
                                -0.0f,
                                0x1p-140f,
                                0x1.fffffep127f};
  std::uint32_t state = 12345;
  for (int i = 0; i < 100000; ++i) {
    state = state * 1664525u + 1013904223u;
    singles.push_back(std::bit_cast<float>(state));
  }
  const Tensor narrowed = cast(from_vector(singles, Shape{static_cast<std::int64_t>(singles.size())}), DType::bf16);
  const auto* narrowed_bits = static_cast<const std::uint16_t*>(narrowed.data());
  for (std::size_t i = 0; i < singles.size(); ++i) {
    if (std::isnan(singles[i])) {
      ASSERT_TRUE(std::isnan(to_float(bfloat16{narrowed_bits[i]}))) << i;
    } else {
      ASSERT_EQ(narrowed_bits[i], bf16_bits(singles[i])) << singles[i];
    }
  }
  const std::vector<float> widened = cast(narrowed, DType::f32).to_vector<float>();
  for (std::size_t i = 0; i < singles.size(); ++i)
    if (!std::isnan(singles[i])) {
      ASSERT_EQ(widened[i], to_float(bfloat16{narrowed_bits[i]}));
    }
  // Raw 16-bit patterns, every bit kept (a signalling NaN's payload too).
  const Tensor patterns = from_vector(std::vector<bfloat16>{{0x3F80}, {0x7F81}, {0x8001}}, Shape{3});
  EXPECT_EQ(patterns.dtype(), DType::bf16);
  EXPECT_EQ(static_cast<const std::uint16_t*>(patterns.data())[1], 0x7F81);
  EXPECT_EQ(patterns.to_vector<float>()[0], 1.0f);
  const Tensor halves = from_pointer(std::vector<float16>{{0x3C00}, {0x7BFF}}.data(), Shape{2});
  EXPECT_EQ(halves.dtype(), DType::f16);
  EXPECT_EQ(halves.to_vector<float>()[1], 65504.0f);
  // Rank 0 and empty tensors.
  EXPECT_EQ(cast(from_vector(std::vector<float>{2.5f}, Shape{}), DType::bf16).item<float>(), 2.5f);
  EXPECT_EQ(cast(from_vector(std::vector<float>{}, Shape{0, 3}), DType::f16).shape(), (Shape{0, 3}));
}

// Bitwise equality of two tensors of one dtype and shape.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.numel()) * size_of(a.dtype())) == 0;
}

TEST(HalfPrecision, OpsComputeInF32AndRoundOnceAtTheirOutput) {
  for (DType half : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(to_string(half)));
    const Tensor a = cast(random::normal({5, 7}, {.seed = 1}), half);
    const Tensor b = cast(random::normal({5, 7}, {.seed = 2}), half);
    const Tensor wide_a = cast(a, DType::f32), wide_b = cast(b, DType::f32);
    auto rounded = [&](const Tensor& x) { return cast(x, half); };
    // Elementwise: the f32 result rounded once, as XLA and PyTorch compute bf16 and f16.
    EXPECT_TRUE(same_bits(a + b, rounded(wide_a + wide_b)));
    EXPECT_TRUE(same_bits(a * b - a, rounded(rounded(wide_a * wide_b) - wide_a))) << "each op rounds";
    EXPECT_TRUE(same_bits(exp(a), rounded(exp(wide_a))));
    EXPECT_TRUE(same_bits(a * 0.1, rounded(wide_a * cast(full({}, 0.1, half), DType::f32))))
        << "a C++ number takes the tensor's dtype (weak typing), rounded once from the double";
    EXPECT_TRUE(same_bits(gt(a, b), gt(wide_a, wide_b)));
    EXPECT_TRUE(same_bits(where(gt(a, 0), a, b), where(gt(wide_a, 0), a, b)));
    // Reductions and matmul accumulate in f32 and round once.
    EXPECT_TRUE(same_bits(reduce_sum(a, {1}), rounded(reduce_sum(wide_a, {1}))));
    EXPECT_TRUE(same_bits(reduce_mean(a), rounded(reduce_mean(wide_a))));
    EXPECT_TRUE(same_bits(reduce_max(a, {0}), rounded(reduce_max(wide_a, {0}))));
    EXPECT_TRUE(same_bits(matmul(a, transpose(b)), rounded(matmul(wide_a, transpose(wide_b)))));
    EXPECT_TRUE(same_bits(cumsum(a, 1), rounded(cumsum(wide_a, 1))));
    // Data movement, sorting and arg-reductions are exact.
    EXPECT_TRUE(same_bits(cast(transpose(a), DType::f32), transpose(wide_a)));
    EXPECT_TRUE(same_bits(cast(concat({a, b}, 0), DType::f32), concat({wide_a, wide_b}, 0)));
    EXPECT_TRUE(same_bits(cast(sort(a, 1), DType::f32), sort(wide_a, 1)));
    EXPECT_TRUE(same_bits(argmax(a, 1), argmax(wide_a, 1)));
    EXPECT_EQ(reshape(a, {35}).dtype(), half);
    // Promotion: JAX's lattice.
    EXPECT_EQ((a + wide_b).dtype(), DType::f32);
    EXPECT_EQ((a + cast(b, DType::i32)).dtype(), half);
    EXPECT_EQ((a + cast(b, half == DType::bf16 ? DType::f16 : DType::bf16)).dtype(), DType::f32);
    EXPECT_EQ((a + cast(b, DType::f64)).dtype(), DType::f64);
    // A composite against the float64 oracle: within a few roundings of the 16-bit format.
    const std::vector<float> probabilities = nn::softmax(a).to_vector<float>();
    const std::vector<double> exact = nn::softmax(cast(a, DType::f64)).to_vector<double>();
    const double unit = half == DType::bf16 ? 0x1p-8 : 0x1p-11;  // half an ulp, relative
    for (std::size_t i = 0; i < exact.size(); ++i)
      EXPECT_NEAR(probabilities[i], exact[i], 8 * unit * exact[i] + 1e-30) << i;
  }
  // Zero-size and rank-0 tensors.
  EXPECT_EQ((cast(zeros({0, 3}), DType::bf16) * 2).shape(), (Shape{0, 3}));
  EXPECT_EQ(reduce_sum(cast(zeros({0, 3}), DType::f16)).item<float>(), 0.0f);
  EXPECT_EQ((cast(full({}, 1.5), DType::bf16) + 1).item<float>(), 2.5f);
}

TEST(HalfPrecision, CompositesComputeInF32AndRoundOnceAtTheirResult) {
  // nn's composites are one op each, as PyTorch's kernels for them are: computed in f32, rounded once.
  for (DType half : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(std::string(to_string(half)));
    const Tensor x = cast(random::normal({6, 33}, {.seed = 7}), half);
    const Tensor wide = cast(x, DType::f32);
    const Tensor gamma = random::normal({33}, {.seed = 8}), beta = cast(random::normal({33}, {.seed = 9}), half);
    auto rounded = [&](const Tensor& t) { return cast(t, half); };
    EXPECT_TRUE(same_bits(nn::gelu(x), rounded(nn::gelu(wide))));
    EXPECT_TRUE(
        same_bits(nn::gelu(x, nn::GeluApproximation::erf), rounded(nn::gelu(wide, nn::GeluApproximation::erf))));
    EXPECT_TRUE(same_bits(nn::softmax(x), rounded(nn::softmax(wide))));
    EXPECT_TRUE(same_bits(nn::log_softmax(x, 0), rounded(nn::log_softmax(wide, 0))));
    EXPECT_TRUE(same_bits(nn::silu(x), rounded(nn::silu(wide))));
    EXPECT_TRUE(same_bits(reduce_logsumexp(x, {1}), rounded(reduce_logsumexp(wide, {1}))));
    EXPECT_TRUE(same_bits(reduce_std(x, {0}), rounded(reduce_std(wide, {0}))));
    // Operands of several dtypes: the result takes the promoted one (an f32 gamma makes it f32).
    const Tensor normalized = nn::layer_norm(x, gamma, beta);
    EXPECT_EQ(normalized.dtype(), DType::f32);
    EXPECT_TRUE(same_bits(normalized, nn::layer_norm(wide, gamma, cast(beta, DType::f32))));
    EXPECT_TRUE(same_bits(nn::layer_norm(x, beta, beta),
                          rounded(nn::layer_norm(wide, cast(beta, DType::f32), cast(beta, DType::f32)))));
    const Tensor labels = from_vector(std::vector<std::int32_t>{0, 5, 32, 1, 2, 3}, Shape{6});
    EXPECT_TRUE(same_bits(nn::sparse_softmax_cross_entropy(x, labels),
                          rounded(nn::sparse_softmax_cross_entropy(wide, labels))));
  }
}

TEST(HalfPrecision, GradientsOfBf16Functions) {
  // The derivative's ops are bf16 ops too: each rounds once; compared with the f32 gradient, rounded.
  const Tensor w = cast(random::normal({4, 3}, {.seed = 5}), DType::bf16);
  const Tensor x = cast(random::normal({2, 4}, {.seed = 6}), DType::bf16);
  auto loss = [](Tensor weights, Tensor inputs) { return reduce_sum(square(matmul(inputs, weights))); };
  const Tensor gradient = grad(loss)(w, x);
  EXPECT_EQ(gradient.dtype(), DType::bf16);
  const Tensor wide = grad(loss)(cast(w, DType::f32), cast(x, DType::f32));
  const std::vector<float> got = gradient.to_vector<float>(), expected = wide.to_vector<float>();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 0.03 * std::fabs(expected[i]) + 1e-3);
}

TEST(HalfPrecision, FunctionsCastInAndOutOnBothExecutors) {
  auto body = [](Tensor weights, Tensor x) { return cast(matmul(x, cast(weights, DType::f32)), DType::bf16); };
  const Tensor weights = cast(random::normal({4, 3}, {.seed = 2}), DType::bf16);
  const Tensor x = random::normal({2, 4}, {.seed = 3});
  const Tensor expected = cast(matmul(x, cast(weights, DType::f32)), DType::bf16);
  auto standard = function(body);
  EXPECT_EQ(standard(weights, x).to_vector<float>(), expected.to_vector<float>());
  auto jit = function(body, {.jit_compile = true});
  const Tensor compiled = jit(weights, x);
  EXPECT_EQ(compiled.dtype(), DType::bf16);
  EXPECT_EQ(compiled.to_vector<float>(), expected.to_vector<float>());
  EXPECT_EQ(jit.statistics().fallbacks, 0) << "the CPU JIT compiles bf16 (tests/jit/half_precision_jit_test.cpp)";
}

TEST(HalfPrecision, PrintsAndReadsAsIrText) {
  const Tensor x = cast(from_vector(std::vector<float>{1.5f, -0.1f}, Shape{2}), DType::bf16);
  EXPECT_EQ(x.to_string(), "bf16[2] cpu\n[1.5, -0.1]");
  EXPECT_EQ(cast(x, DType::f16).to_string(), "f16[2] cpu\n[1.5, -0.1001]") << "bf16's -0.1 is -0.10009765625";
  const std::string text = "func @f(%0: bf16[2,3]) -> (f32[2,3]) {\n  %1 = f32[2,3] cast(%0)\n  return %1\n}\n";
  EXPECT_EQ(ir::print(ir::parse(text)), text);
  const std::string negated = "func @f(%0: f16[2]) -> (f16[2]) {\n  %1 = f16[2] neg(%0)\n  return %1\n}\n";
  EXPECT_EQ(ir::print(ir::parse(negated)), negated);
}

// The file safetensors.torch.save_file wrote (safetensors 0.8, PyTorch 2.15, 2026-12-05) for
//   {"b": torch.tensor([1.5, -0.1, 3e38], dtype=torch.bfloat16),
//    "h": torch.tensor([[65504, 1/3]], dtype=torch.float16)}
// PyTorch reads those back as 1.5, -0.10009765625, 3.00405527047391e+38 and 65504, 0.333251953125.
std::string pytorch_file() {
  return std::string(
      "p\x00"
      "\x00"
      "\x00"
      "\x00"
      "\x00"
      "\x00"
      "\x00"
      "{\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_"
      "offsets\":[0,6]},\"h\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[6,10]}} \xc0"
      "\x3f"
      ""
      "\xcd"
      "\xbd"
      "b\x7f"
      "\xff"
      "{U5",
      130);
}

TEST(HalfPrecision, SafetensorsAndNpyFilesKeepTheBits) {
  TemporaryDirectory directory;
  const Tensor brain = cast(random::normal({3, 5}, {.seed = 4}), DType::bf16);
  const Tensor half = cast(random::normal({7}, {.seed = 5}), DType::f16);
  save_safetensors(directory / "both.safetensors", {{"b", brain}, {"h", half}});
  const NamedTensors loaded = load_safetensors(directory / "both.safetensors");
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].second.dtype(), DType::bf16);
  EXPECT_EQ(std::memcmp(loaded[0].second.data(), brain.data(), 30), 0);
  EXPECT_EQ(loaded[1].second.dtype(), DType::f16);
  EXPECT_EQ(std::memcmp(loaded[1].second.data(), half.data(), 14), 0);
  EXPECT_TRUE(contains(testing::read_file(directory / "both.safetensors"), "\"dtype\":\"BF16\""));

  testing::write_file(directory / "torch.safetensors", pytorch_file());
  const NamedTensors from_torch = load_safetensors(directory / "torch.safetensors");
  ASSERT_EQ(from_torch.size(), 2u);
  EXPECT_EQ(from_torch[0].first, "b");
  EXPECT_EQ(from_torch[0].second.to_vector<float>(),
            (std::vector<float>{1.5f, -0.10009765625f, 3.00405527047391e+38f}));
  EXPECT_EQ(from_torch[1].second.shape(), (Shape{1, 2}));
  EXPECT_EQ(from_torch[1].second.to_vector<float>(), (std::vector<float>{65504.0f, 0.333251953125f}));

  save_npy(directory / "half.npy", half);
  const Tensor half_back = load_npy(directory / "half.npy");
  EXPECT_EQ(half_back.dtype(), DType::f16);
  EXPECT_EQ(std::memcmp(half_back.data(), half.data(), 14), 0);
  EXPECT_TRUE(contains(testing::read_file(directory / "half.npy"), "'descr': '<f2'"));
  const std::string message = error_of<DTypeError>([&] { save_npy(directory / "brain.npy", brain); });
  EXPECT_TRUE(contains(message, "NumPy has no bfloat16")) << message;
  EXPECT_FALSE(std::filesystem::exists(directory / "brain.npy"));
}

TEST(HalfPrecision, DLPackTypesBothWays) {
  const Tensor brain = cast(random::normal({2, 2}, {.seed = 6}), DType::bf16);
  DLManagedTensorVersioned* managed = to_dlpack(brain);
  EXPECT_EQ(managed->dl_tensor.dtype.code, kDLBfloat);
  EXPECT_EQ(managed->dl_tensor.dtype.bits, 16);
  const Tensor back = from_dlpack(managed);
  EXPECT_EQ(back.dtype(), DType::bf16);
  EXPECT_EQ(back.data(), brain.data());
  DLManagedTensorVersioned* half = to_dlpack(cast(brain, DType::f16));
  EXPECT_EQ(half->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(half->dl_tensor.dtype.bits, 16);
  EXPECT_EQ(from_dlpack(half).dtype(), DType::f16);
}

}  // namespace
}  // namespace kiln
