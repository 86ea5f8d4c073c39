// gemm_bf16 (kernels/cpu/gemm_bf16.h): bf16 products in AMX tiles against the float64 product of the same bf16
// values, on sizes that fill no tile exactly and sizes that fill some, both transposes, k long enough to take B's
// panels in runs, one and two threads; and the public matmul of bf16 tensors (AMX where the CPU has it, the widened f32
// product elsewhere) against the widened product, batched and broadcast, in both executors.

#include "kernels/cpu/gemm_bf16.h"

#include "core/half_precision_bits.h"
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::random_bf16_bits;

double value(std::uint16_t bits) { return static_cast<double>(to_float(bfloat16{bits})); }

TEST(GemmBf16, MatchesTheExactProductOfTheSameValuesWithinF32Summation) {
  if (!has_bf16_products()) GTEST_SKIP() << "neither AMX-BF16 nor AVX512_BF16 on this CPU";
  struct Case {
    std::int64_t m, n, k;
    bool transpose_a, transpose_b;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, false, false},
      {33, 17, 45, false, false},
      {64, 64, 64, false, false},
      {5, 70, 3, true, false},
      {40, 31, 100, false, true},
      {97, 65, 33, true, true},
      {128, 160, 300, false, false},
      {40, 64, 33, false, false},
      {2, 3, 0, false, false},
      // Transposed operands in whole 32 x 32 blocks (transposed in registers) beside partial ones (element by
      // element): m and n past a multiple of 32, k of three whole chunks and one of 4.
      {64, 64, 64, true, false},
      {100, 70, 100, true, true},
      {128, 96, 96, false, true},
      // Long k: B's panels taken in runs that each row block sweeps (the last run shorter, the last panel partial).
      {70, 300, 2100, false, false},
      {33, 1000, 1100, false, true}};
  const int original_threads = runtime::thread_count();
  for (const int threads : {1, 2}) {
    runtime::set_thread_count(threads);
    for (const Case& test : cases) {
      const std::string label = std::to_string(test.m) + "x" + std::to_string(test.n) + "x" + std::to_string(test.k) +
                                (test.transpose_a ? " A^T" : "") + (test.transpose_b ? " B^T" : "") + ", threads " +
                                std::to_string(threads);
      const std::vector<std::uint16_t> a = random_bf16_bits(test.m * test.k, 1),
                                       b = random_bf16_bits(test.k * test.n, 2);
      const std::int64_t lda = test.transpose_a ? test.m : test.k, ldb = test.transpose_b ? test.k : test.n;
      const std::int64_t ldc = test.n + 3;  // C's rows wider than the product: nothing past n is written
      std::vector<float> c(static_cast<std::size_t>(test.m * ldc), -7.0f);
      gemm_bf16(test.m, test.n, test.k, a.data(), lda, test.transpose_a, b.data(), ldb, test.transpose_b, c.data(),
                ldc);
      for (std::int64_t i = 0; i < test.m; ++i) {
        for (std::int64_t j = 0; j < test.n; ++j) {
          double exact = 0, magnitude = 0;
          for (std::int64_t p = 0; p < test.k; ++p) {
            const double term = value(test.transpose_a ? a[static_cast<std::size_t>(p * lda + i)]
                                                       : a[static_cast<std::size_t>(i * lda + p)]) *
                                value(test.transpose_b ? b[static_cast<std::size_t>(j * ldb + p)]
                                                       : b[static_cast<std::size_t>(p * ldb + j)]);
            exact += term;
            magnitude += std::fabs(term);
          }
          const float got = c[static_cast<std::size_t>(i * ldc + j)];
          ASSERT_NEAR(got, exact, 1e-5 * magnitude + 1e-30) << label << " at " << i << ", " << j;
        }
        for (std::int64_t j = test.n; j < ldc; ++j) ASSERT_EQ(c[static_cast<std::size_t>(i * ldc + j)], -7.0f) << label;
      }
    }
  }
  runtime::set_thread_count(original_threads);
}

TEST(GemmBf16, MatmulOfBf16TensorsAgreesWithTheWidenedProductInBothExecutors) {
  const Tensor a = cast(random::normal({3, 37, 70}, {.seed = 3}), DType::bf16);
  const Tensor b = cast(random::normal({70, 45}, {.seed = 4}), DType::bf16);
  const Tensor batched_b = cast(random::normal({3, 45, 70}, {.seed = 5}), DType::bf16);
  auto products = [](Tensor x, Tensor y, Tensor z) {
    return std::tuple{matmul(x, y), matmul(x, z, {.transpose_b = true}), nn::relu(matmul(x, y) + 1)};
  };
  const auto [product, transposed, activated] = products(a, b, batched_b);
  // Against the f32 results of the widened operands: within a bf16 rounding of the product and of what is added
  // to it (relu(x + 1) of x near -1 keeps the rounding of x).
  auto wide = [](const Tensor& t) { return cast(t, DType::f32); };
  const auto [expected, expected_transposed, expected_activated] = products(wide(a), wide(b), wide(batched_b));
  auto jit = function(products, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const auto [compiled, compiled_transposed, compiled_activated] = jit(a, b, batched_b);
  for (const auto& [got, exact, name] :
       {std::tuple{product, expected, "matmul"}, std::tuple{transposed, expected_transposed, "transpose_b"},
        std::tuple{activated, expected_activated, "relu(matmul + 1)"}, std::tuple{compiled, expected, "JIT matmul"},
        std::tuple{compiled_transposed, expected_transposed, "JIT transpose_b"},
        std::tuple{compiled_activated, expected_activated, "JIT relu(matmul + 1)"}}) {
    ASSERT_EQ(got.dtype(), DType::bf16) << name;
    const std::vector<float> values = got.to_vector<float>(), reference = exact.to_vector<float>();
    ASSERT_EQ(values.size(), reference.size()) << name;
    for (std::size_t i = 0; i < values.size(); ++i)
      ASSERT_NEAR(values[i], reference[i], 0x1p-7 * (std::fabs(reference[i]) + 1)) << name << " at " << i;
  }
  // With AMX or AVX512_BF16 the compiled product is the standard executor's, bit for bit: the same kernel runs it.
  if (has_bf16_products()) {
    EXPECT_EQ(compiled.to_vector<float>(), product.to_vector<float>());
  }
}

// A batched bf16 product into a bf16 output (the standard executor's, attention's scores in block-bf16) is rounded
// block by block in gemm_bf16's epilogue: bitwise the f32 product's cast, for both transposes, a broadcast operand,
// odd sizes, infinities and a NaN among the operands.
TEST(GemmBf16, ABf16OutputIsTheF32ProductRoundedOnce) {
  if (!has_bf16_products()) GTEST_SKIP() << "no AMX or AVX512_BF16 here";
  for (const bool transpose_a : {false, true})
    for (const bool transpose_b : {false, true}) {
      const std::int64_t batch = 3, m = 37, n = 45, k = 70;
      std::vector<std::uint16_t> a_bits = random_bf16_bits(batch * m * k, 11), b_bits = random_bf16_bits(k * n, 12);
      a_bits[5] = 0x7F80;   // +inf
      a_bits[77] = 0x7FC1;  // a NaN
      b_bits[9] = 0xFF80;   // -inf
      auto array = [](DType dtype, Shape shape, const void* data) {
        runtime::Array result = runtime::allocate_array(dtype, shape, Device::cpu());
        if (data) std::memcpy(result.mutable_raw(), data, result.bytes());
        return result;
      };
      const Shape a_shape = transpose_a ? Shape({batch, k, m}) : Shape({batch, m, k});
      const Shape b_shape = transpose_b ? Shape({n, k}) : Shape({k, n});
      const runtime::Array a = array(DType::bf16, a_shape, a_bits.data()),
                           b = array(DType::bf16, b_shape, b_bits.data());
      const runtime::Array wide = array(DType::f32, Shape({batch, m, n}), nullptr);
      const runtime::Array rounded = array(DType::bf16, Shape({batch, m, n}), nullptr);
      matmul(transpose_a, transpose_b, a, b, wide);
      matmul(transpose_a, transpose_b, a, b, rounded);
      const float* sums = wide.data<float>();
      const std::uint16_t* got = rounded.data<std::uint16_t>();
      for (std::int64_t i = 0; i < batch * m * n; ++i)
        ASSERT_EQ(got[i], half_bits::bf16_from_f32(std::bit_cast<std::uint32_t>(sums[i])))
            << "transpose_a " << transpose_a << ", transpose_b " << transpose_b << ", element " << i;
    }
}

}  // namespace
}  // namespace kiln::kernels::cpu
