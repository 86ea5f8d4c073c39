// Attention of bf16 tensors on the CPU (compiler/fusion_attention.cpp, kernels/cpu/attention_bf16.cpp): where the
// CPU has AMX, softmax(Q K^T / sqrt(d)) V and its variants in bf16 are one attention kernel whose products are the
// standard executor's bf16 matmuls, sum for sum, so the two executors agree to the bit; the scores and the
// probabilities never reach memory. Without AMX the products stay apart (or, with no bf16 products at all, widen
// to an f32 attention) and still agree.

#include "kernels/cpu/gemm_bf16.h"
#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::random_tensor;

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

Tensor scaled_dot_product(Tensor q, Tensor k, Tensor v) {
  return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.25, -1), v);
}

// One attention kernel where the CPU has AMX. With AVX512_BF16's dot products only, the bf16 products stay apart
// (no attention kernel); with neither, the products are of widened operands, an f32 attention kernel between casts.
void expect_fused_where_amx(const testing::DifferentialResult& result) {
  if (kernels::cpu::has_amx_bf16()) {
    EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
    EXPECT_TRUE(contains(result.fused, "(attention over")) << result.fused;
  } else if (kernels::cpu::has_bf16_products()) {
    EXPECT_FALSE(contains(result.fused, "(attention over")) << result.fused;
  }
}

Tensor bf16(const Shape& shape, std::uint64_t seed) { return random_tensor(DType::bf16, shape, seed); }

// The same bits in every output of both executors, any NaN alike (a NaN's sign after a product is the hardware's),
// where both multiply bf16 in gemm_bf16's blocks. Where no instruction multiplies bf16, each executor takes the
// f32 product of the widened operands its own way (the JIT's GEMM, the standard executor's BLAS), summed in other
// orders: within the reference's tolerance.
template <class Body, class... Inputs>
testing::DifferentialResult expect_same_values(const std::string& label, Body body, const Inputs&... inputs) {
  if (!kernels::cpu::has_bf16_products()) return testing::expect_agreement(label, body, inputs...);
  return testing::expect_same_bits_where(label, true, body, inputs...);
}

TEST(AttentionBf16Fusion, ScaledDotProductAgreesToTheBit) {
  // Odd sizes: 37 query rows (a strip of 32 and one of 5), 45 keys and 35 value columns (partial 32-column panels),
  // a head size of 20 (a partial chunk of k).
  expect_fused_where_amx(expect_same_values("scaled dot product", scaled_dot_product, bf16({2, 3, 37, 20}, 1),
                                            bf16({2, 3, 45, 20}, 2), bf16({2, 3, 45, 35}, 3)));
  // Keys and values shared by the batch; a single query row; K stored as K^T and V as V^T.
  expect_fused_where_amx(expect_same_values("shared keys and values", scaled_dot_product, bf16({3, 29, 16}, 4),
                                            bf16({45, 16}, 5), bf16({45, 33}, 6)));
  expect_fused_where_amx(expect_same_values("one query", scaled_dot_product, bf16({4, 1, 64}, 7), bf16({4, 70, 64}, 8),
                                            bf16({4, 70, 64}, 9)));
  expect_fused_where_amx(expect_same_values(
      "transposed operands",
      [](Tensor q, Tensor k_t, Tensor v_t) {
        return matmul(nn::softmax(matmul(q, k_t) * 0.25), v_t, {.transpose_b = true});
      },
      bf16({2, 29, 16}, 10), bf16({2, 16, 45}, 11), bf16({2, 33, 45}, 12)));
}

TEST(AttentionBf16Fusion, MasksInfinitiesAndNaN) {
  // An additive mask with a fully -inf row (its probabilities 0/0: NaN, as the standard softmax gives), a causal
  // mask from iota comparisons, and a NaN among the queries: NaN exactly where the standard executor has it.
  std::vector<double> mask_values = random_tensor(DType::f64, {29 * 45}, 13).to_vector<double>();
  for (std::int64_t j = 0; j < 45; ++j) mask_values[static_cast<std::size_t>(3 * 45 + j)] = -INFINITY;
  for (std::int64_t i = 0; i < 29; ++i) mask_values[static_cast<std::size_t>(i * 45 + (i * 7) % 45)] = -INFINITY;
  const Tensor mask = cast(from_vector(mask_values, {29, 45}), DType::bf16);
  std::vector<double> query_values = random_tensor(DType::f64, {2 * 29 * 16}, 14).to_vector<double>();
  query_values[5 * 16 + 3] = std::nan("");
  const Tensor q = cast(from_vector(query_values, {2, 29, 16}), DType::bf16);
  const Tensor k = bf16({2, 45, 16}, 15), v = bf16({2, 45, 33}, 16);
  expect_fused_where_amx(expect_same_values(
      "additive mask",
      [](Tensor q, Tensor k, Tensor v, Tensor mask) {
        return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.25 + mask), v);
      },
      q, k, v, mask));
  expect_fused_where_amx(expect_same_values(
      "causal",
      [](Tensor q, Tensor k, Tensor v) {
        Tensor scores = matmul(q, k, {.transpose_b = true}) * 0.25;
        Tensor rows = reshape(arange(q.dim(1)), {q.dim(1), 1}), columns = reshape(arange(k.dim(1)), {1, k.dim(1)});
        return matmul(nn::softmax(where(columns <= rows, scores, -INFINITY)), v);
      },
      q, k, v));
}

TEST(AttentionBf16Fusion, TheScoresAndProbabilitiesAreNeverMaterialized) {
  if (!kernels::cpu::has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 here: bf16 attention stays three kernels";
  const Tensor q = bf16({2, 4, 256, 64}, 20), k = bf16({2, 4, 256, 64}, 21), v = bf16({2, 4, 256, 64}, 22);
  auto jit = function(scaled_dot_product, {.jit_compile = true, .on_compile_failure = Fallback::none});
  jit(q, k, v);
  const std::int64_t before = memory_statistics().bytes_in_use;
  reset_peak_memory();
  Tensor out = jit(q, k, v);
  const std::int64_t temporaries = memory_statistics().peak_bytes_in_use - before - out.numel() * 2;
  const std::int64_t scores = 2 * 4 * 256 * 256 * 2;
  EXPECT_LE(temporaries, scores / 4) << "peak temporary bytes " << temporaries;
  const std::string source = jit.get_compiler_ir(Stage::source, q, k, v);
  EXPECT_TRUE(contains(source, "problem.bf16 = 1;")) << source;
  EXPECT_TRUE(contains(source, "static_cast<uint16_t*>(probabilities)")) << source;
}

// A training step's backward reads the probabilities too: the kernel writes them (bf16) as it goes, and the
// forward's value and every gradient agree with the standard executor to the bit.
TEST(AttentionBf16Fusion, ProbabilitiesOtherKernelsReadAreWrittenByTheKernel) {
  const Tensor q = bf16({2, 37, 16}, 30), k = bf16({2, 45, 16}, 31), v = bf16({2, 45, 35}, 32);
  const Tensor w = bf16({2, 37, 20}, 33);
  auto also_read = [](Tensor q, Tensor k, Tensor v, Tensor w) {
    Tensor probabilities = nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.25, -1);
    return std::vector<Tensor>{matmul(probabilities, v), matmul(probabilities, w, {.transpose_a = true})};
  };
  const testing::DifferentialResult result =
      expect_same_values("probabilities read by another kernel", also_read, q, k, v, w);
  if (kernels::cpu::has_amx_bf16()) {
    EXPECT_TRUE(contains(result.fused, "(attention over")) << result.fused;
    const std::string source = function(also_read, {.jit_compile = true, .on_compile_failure = Fallback::none})
                                   .get_compiler_ir(Stage::source, q, k, v, w);
    EXPECT_TRUE(contains(source, "store<uint16_t>(memory_row + j, load<uint16_t>(strip_row + j, count), count)") ||
                contains(source, "store_streaming<uint16_t>(memory_row + j"))
        << source;
  }
  // The loss sums in another order in each executor: within the reference's tolerance, not to the bit.
  auto loss = [](Tensor q, Tensor k, Tensor v) {
    return reduce_sum(square(cast(scaled_dot_product(q, k, v), DType::f32)));
  };
  testing::expect_agreement(
      "value and gradients",
      [&](Tensor q, Tensor k, Tensor v) {
        auto [value, all] = value_and_grad(loss, {.argnums = {0, 1, 2}})(q, k, v);
        std::vector<Tensor> results{value};
        for (const Tensor& gradient : all.tensors()) results.push_back(gradient);
        return results;
      },
      q, k, v);
}

}  // namespace
}  // namespace kiln
