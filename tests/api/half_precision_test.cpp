// bf16 and f16 as storage types (include/kiln/dtype.h): rounding to nearest even, once, from every dtype;
// exact conversion back; casts both ways in the standard executor and in functions (the JIT leaves them to the
// standard executor, with its warning); printing, IR text, tensor files (safetensors BF16/F16 as PyTorch writes
// them, .npy '<f2'); DLPack; and the clear error every other op gives.

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
  // Rank 0 and empty tensors.
  EXPECT_EQ(cast(from_vector(std::vector<float>{2.5f}, Shape{}), DType::bf16).item<float>(), 2.5f);
  EXPECT_EQ(cast(from_vector(std::vector<float>{}, Shape{0, 3}), DType::f16).shape(), (Shape{0, 3}));
}

TEST(HalfPrecision, OtherOpsAskForACastWithTheLine) {
  const Tensor x = cast(random::normal({3}, {.seed = 1}), DType::bf16);
  std::string message = error_of<DTypeError>([&] { (void)(x + x); });
  EXPECT_TRUE(contains(message, "add: takes no bf16 operand")) << message;
  EXPECT_TRUE(contains(message, "kiln::cast(x, kiln::DType::f32)")) << message;
  EXPECT_TRUE(contains(message, "half_precision_test.cpp:" + std::to_string(__LINE__ - 3))) << message;
  // Creation in a 16-bit dtype is a creation in f32 or f64 and a cast.
  EXPECT_EQ(full({2}, 0.1, DType::f16).to_vector<float>(), (std::vector<float>(2, to_float(to_float16(0.1)))));
  EXPECT_EQ(arange(0.0, 3.0, 1.0, DType::bf16).to_vector<float>(), (std::vector<float>{0, 1, 2}));
  const Tensor normals = random::normal({1000}, {.seed = 3, .dtype = DType::bf16});
  EXPECT_EQ(normals.dtype(), DType::bf16);
  EXPECT_EQ(normals.to_vector<float>(),
            cast(random::normal({1000}, {.seed = 3, .dtype = DType::f32}), DType::bf16).to_vector<float>());
  // Uniform values stay in [low, high) after rounding: 1 - 2^-10 and above would round to 1 in bf16.
  const std::vector<float> uniforms =
      random::uniform({20000}, {.seed = 4, .low = 0.5, .high = 1.0, .dtype = DType::bf16}).to_vector<float>();
  EXPECT_LT(*std::max_element(uniforms.begin(), uniforms.end()), 1.0f);
  EXPECT_GE(*std::min_element(uniforms.begin(), uniforms.end()), 0.5f);
  EXPECT_EQ(*std::max_element(uniforms.begin(), uniforms.end()), 1.0f - 0x1p-8f) << "the largest bf16 below 1";
  // Computing after a cast works.
  EXPECT_NEAR(reduce_sum(cast(x, DType::f32)).item<float>(),
              static_cast<float>(x.to_vector<float>()[0] + x.to_vector<float>()[1] + x.to_vector<float>()[2]), 1e-6);
}

TEST(HalfPrecision, FunctionsCastInAndOutOnTheStandardExecutor) {
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
  EXPECT_EQ(jit.statistics().fallbacks, 1) << "the JIT does not compile bf16 yet: the standard executor runs it";
  EXPECT_TRUE(contains(jit.get_compiler_ir(Stage::fused, weights, x), "the JIT does not compile bf16 and f16 yet"));
}

TEST(HalfPrecision, PrintsAndReadsAsIrText) {
  const Tensor x = cast(from_vector(std::vector<float>{1.5f, -0.1f}, Shape{2}), DType::bf16);
  EXPECT_EQ(x.to_string(), "bf16[2] cpu\n[1.5, -0.1]");
  EXPECT_EQ(cast(x, DType::f16).to_string(), "f16[2] cpu\n[1.5, -0.1001]") << "bf16's -0.1 is -0.10009765625";
  const std::string text = "func @f(%0: bf16[2,3]) -> (f32[2,3]) {\n  %1 = f32[2,3] cast(%0)\n  return %1\n}\n";
  EXPECT_EQ(ir::print(ir::parse(text)), text);
  EXPECT_THROW((void)ir::parse("func @f(%0: f16[2]) -> (f16[2]) {\n  %1 = f16[2] neg(%0)\n  return %1\n}\n"), Error);
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
