// Attention fusion (compiler/fusion_attention.cpp, a case of the scheduler's rule): softmax(Q K^T / sqrt(d)) V and its variants compile into one
// attention kernel that never writes the scores, and agree with the standard executor and the float64
// reference; the cases it refuses keep their three kernels and say why.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

Tensor scaled_dot_product(Tensor q, Tensor k, Tensor v) {
  return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.25, -1), v);
}

// Expects the function to compile into one attention kernel.
void expect_one_attention_kernel(const testing::DifferentialResult& result) {
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_NE(result.fused.find("(attention over"), std::string::npos) << result.fused;
  EXPECT_NE(result.fused.find("never written to memory"), std::string::npos) << result.fused;
}

TEST(AttentionFusion, ScaledDotProductIsOneKernel) {
  // Odd sizes: 37 rows (not a multiple of the 14-row strip), 45 keys and 35 value columns (not multiples of 32).
  Tensor q = random_tensor(DType::f32, {2, 3, 37, 16}, 1), k = random_tensor(DType::f32, {2, 3, 45, 16}, 2);
  Tensor v = random_tensor(DType::f32, {2, 3, 45, 35}, 3);
  auto result = expect_agreement("scaled dot product", scaled_dot_product, q, k, v);
  expect_one_attention_kernel(result);
  EXPECT_EQ(result.fused.find("library:"), std::string::npos) << "stale notes left: " << result.fused;
}

TEST(AttentionFusion, TheScoresAreNeverMaterialized) {
  Tensor q = random_tensor(DType::f32, {2, 4, 256, 32}, 4), k = random_tensor(DType::f32, {2, 4, 256, 32}, 5);
  Tensor v = random_tensor(DType::f32, {2, 4, 256, 32}, 6);
  auto jit = function(scaled_dot_product, {.jit_compile = true, .on_compile_failure = Fallback::none});
  jit(q, k, v);
  const std::int64_t before = memory_statistics().bytes_in_use;
  reset_peak_memory();
  Tensor out = jit(q, k, v);
  const std::int64_t temporaries = memory_statistics().peak_bytes_in_use - before - out.numel() * 4;
  const std::int64_t scores = 2 * 4 * 256 * 256 * 4;
  EXPECT_LE(temporaries, scores / 4) << "peak temporary bytes " << temporaries;
}

TEST(AttentionFusion, VariantsAgreeWithTheStandardExecutor) {
  Tensor q = random_tensor(DType::f32, {2, 29, 16}, 10), k = random_tensor(DType::f32, {2, 45, 16}, 11);
  Tensor v = random_tensor(DType::f32, {2, 45, 33}, 12), mask = random_tensor(DType::f32, {29, 45}, 13);
  expect_one_attention_kernel(expect_agreement(
      "unscaled",
      [](Tensor q, Tensor k, Tensor v) { return matmul(nn::softmax(matmul(q, k, {.transpose_b = true})), v); }, q, k,
      v));
  expect_one_attention_kernel(expect_agreement(
      "additive mask",
      [](Tensor q, Tensor k, Tensor v, Tensor mask) {
        return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.25 + mask * 3), v);
      },
      q, k, v, mask));
  expect_one_attention_kernel(expect_agreement(
      "layer norm between",
      [](Tensor q, Tensor k, Tensor v) { return matmul(nn::layer_norm(matmul(q, k, {.transpose_b = true})), v); }, q, k,
      v));
  // Stored as K^T and V^T: the first matmul's right operand untransposed, the second's transposed; and the
  // queries as Q^T.
  Tensor q_t = random_tensor(DType::f32, {2, 16, 29}, 14), k_t = random_tensor(DType::f32, {2, 16, 45}, 15);
  Tensor v_t = random_tensor(DType::f32, {2, 33, 45}, 16);
  expect_one_attention_kernel(expect_agreement(
      "transposed operands",
      [](Tensor q_t, Tensor k_t, Tensor v_t) {
        Tensor scores = matmul(q_t, k_t, {.transpose_a = true}) * 0.25;
        return matmul(nn::softmax(scores), v_t, {.transpose_b = true});
      },
      q_t, k_t, v_t));
  expect_one_attention_kernel(expect_agreement(
      "a transpose op of the keys",
      [](Tensor q, Tensor k, Tensor v) {
        return matmul(nn::softmax(matmul(q, transpose(k, {0, 2, 1})) * 0.25), v);
      },
      q, k, v));
}

TEST(AttentionFusion, MatricesAndSharedOperands) {
  Tensor q = random_tensor(DType::f32, {29, 16}, 20), k = random_tensor(DType::f32, {45, 16}, 21);
  Tensor v = random_tensor(DType::f32, {45, 33}, 22);
  expect_one_attention_kernel(expect_agreement("matrices", scaled_dot_product, q, k, v));
  // Keys and values shared by every batch item (rank 2 against a batched query).
  Tensor batched_q = random_tensor(DType::f32, {3, 29, 16}, 23);
  expect_one_attention_kernel(expect_agreement("shared keys and values", scaled_dot_product, batched_q, k, v));
}

TEST(AttentionFusion, AnEpilogueOfTheSecondMatmulBecomesALoopKernel) {
  // 2-D: the second matmul's gemm kernel holds the bias and relu; they run after the attention kernel.
  Tensor q = random_tensor(DType::f32, {29, 16}, 24), k = random_tensor(DType::f32, {45, 16}, 25);
  Tensor v = random_tensor(DType::f32, {45, 33}, 26), bias = random_tensor(DType::f32, {33}, 27);
  auto result = expect_agreement("epilogue", [](Tensor q, Tensor k, Tensor v, Tensor bias) {
    return nn::relu(scaled_dot_product(q, k, v) + bias);
  }, q, k, v, bias);
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  EXPECT_NE(result.fused.find("(attention over"), std::string::npos) << result.fused;
  EXPECT_NE(result.fused.find("(loop over [29,33])"), std::string::npos) << result.fused;
  EXPECT_NE(result.fused.find("reads its product from memory"), std::string::npos) << result.fused;
  EXPECT_EQ(result.fused.find("matmul with its consumers as the epilogue"), std::string::npos) << result.fused;
  // A full reduction in the epilogue keeps the gemm kernel (and the scores in memory).
  auto reduced = expect_agreement("reduced epilogue", [](Tensor q, Tensor k, Tensor v) {
    return reduce_sum(scaled_dot_product(q, k, v));
  }, q, k, v);
  EXPECT_EQ(reduced.jit.kernels_per_call, 3) << reduced.fused;
}

TEST(AttentionFusion, SeveralDepthBlocks) {
  // A head size of 300 and 600 keys: both products take two K blocks.
  Tensor q = random_tensor(DType::f32, {1, 2, 20, 300}, 30), k = random_tensor(DType::f32, {1, 2, 600, 300}, 31);
  Tensor v = random_tensor(DType::f32, {1, 2, 600, 40}, 32);
  expect_one_attention_kernel(expect_agreement(
      "deep",
      [](Tensor q, Tensor k, Tensor v) { return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.05), v); },
      q, k, v));
}

TEST(AttentionFusion, ZeroSizes) {
  struct Sizes {
    std::int64_t m, n, k, d;
  };
  for (const Sizes& sizes : {Sizes{0, 9, 8, 6}, Sizes{5, 0, 8, 6}, Sizes{5, 9, 0, 6}, Sizes{5, 9, 8, 0}}) {
    Tensor q = random_tensor(DType::f32, {2, sizes.m, sizes.k}, 40);
    Tensor k = random_tensor(DType::f32, {2, sizes.n, sizes.k}, 41);
    Tensor v = random_tensor(DType::f32, {2, sizes.n, sizes.d}, 42);
    expect_one_attention_kernel(expect_agreement("m n k d = " + std::to_string(sizes.m) + " " +
                                                     std::to_string(sizes.n) + " " + std::to_string(sizes.k) + " " +
                                                     std::to_string(sizes.d),
                                                 scaled_dot_product, q, k, v));
  }
}

// Where other kernels read the probabilities too (a training step's backward), the attention kernel writes them
// to memory as it goes; the scores still never are. Forward and backward of an attention, each an attention kernel
// (the backward's: dP = dO V^T, the softmax's backward row by row, dS K), agree with the standard executor and
// the float64 reference at odd sizes.
TEST(AttentionFusion, ProbabilitiesOtherKernelsReadAreWrittenByTheKernel) {
  Tensor q = random_tensor(DType::f32, {2, 37, 16}, 70), k = random_tensor(DType::f32, {2, 45, 16}, 71);
  Tensor v = random_tensor(DType::f32, {2, 45, 35}, 72), w = random_tensor(DType::f32, {2, 37, 20}, 73);
  auto also_read = [](Tensor q, Tensor k, Tensor v, Tensor w) {  // the second: P^T W, as a backward's dV = P^T dO
    Tensor probabilities = nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.25, -1);
    return std::vector<Tensor>{matmul(probabilities, v), matmul(probabilities, w, {.transpose_a = true})};
  };
  auto result = expect_agreement("probabilities read by another kernel", also_read, q, k, v, w);
  EXPECT_NE(result.fused.find("(attention over"), std::string::npos) << result.fused;
  const std::string source = function(also_read, {.jit_compile = true, .on_compile_failure = Fallback::none})
                                 .get_compiler_ir(Stage::source, q, k, v, w);
  EXPECT_NE(source.find("also to memory, for the kernels after this one that read it"), std::string::npos) << source;

  auto loss = [](Tensor q, Tensor k, Tensor v) { return reduce_sum(square(scaled_dot_product(q, k, v))); };
  auto gradients = [&](Tensor q, Tensor k, Tensor v) {
    auto [value, all] = value_and_grad(loss, {.argnums = {0, 1, 2}})(q, k, v);
    std::vector<Tensor> results{value};
    for (const Tensor& gradient : all.tensors()) results.push_back(gradient);
    return results;
  };
  auto trained = expect_agreement("attention's value and gradients", gradients, q, k, v);
  std::size_t attention_kernels = 0;
  for (std::size_t at = trained.fused.find("(attention over"); at != std::string::npos;
       at = trained.fused.find("(attention over", at + 1))
    ++attention_kernels;
  EXPECT_EQ(attention_kernels, 2u) << trained.fused;
}

TEST(AttentionFusion, RefusalsKeepThreeKernelsAndSayWhy) {
  Tensor q = random_tensor(DType::f32, {2, 29, 16}, 50), k = random_tensor(DType::f32, {2, 45, 16}, 51);
  Tensor v = random_tensor(DType::f32, {2, 45, 33}, 52);
  auto returned = expect_agreement(
      "scores returned",
      [](Tensor q, Tensor k, Tensor v) {
        Tensor scores = matmul(q, k, {.transpose_b = true});
        return std::vector<Tensor>{matmul(nn::softmax(scores), v), scores};
      },
      q, k, v);
  EXPECT_EQ(returned.jit.kernels_per_call, 3) << returned.fused;
  EXPECT_NE(returned.fused.find("not fused into an attention kernel"), std::string::npos) << returned.fused;
  EXPECT_NE(returned.fused.find("returned"), std::string::npos) << returned.fused;

  Tensor v_rows = random_tensor(DType::f32, {2, 29, 33}, 53);
  auto transposed = expect_agreement(
      "probabilities transposed",
      [](Tensor q, Tensor k, Tensor v) {
        return matmul(nn::softmax(matmul(q, k, {.transpose_b = true})), v, {.transpose_a = true});
      },
      q, k, v_rows);
  EXPECT_EQ(transposed.jit.kernels_per_call, 3) << transposed.fused;
  EXPECT_NE(transposed.fused.find("left operand, untransposed"), std::string::npos) << transposed.fused;

  auto row_sums = expect_agreement("row sums into the second matmul", [](Tensor q, Tensor k, Tensor v) {
    return matmul(reduce_sum(exp(matmul(q, k, {.transpose_b = true}) * 0.25), {2}, true), v);
  }, q, k, random_tensor(DType::f32, {2, 1, 33}, 55));
  EXPECT_NE(row_sums.fused.find("not of the scores' shape"), std::string::npos) << row_sums.fused;

  Tensor q_matrix = random_tensor(DType::f32, {29, 16}, 56), k_matrix = random_tensor(DType::f32, {45, 16}, 57);
  auto batched_values = expect_agreement("values batched, scores not", scaled_dot_product, q_matrix, k_matrix, v);
  EXPECT_NE(batched_values.fused.find("batch axes the scores do not have"), std::string::npos)
      << batched_values.fused;

  Tensor k_broadcast = random_tensor(DType::f32, {1, 45, 16}, 54);
  auto broadcast = expect_agreement("broadcast batch", scaled_dot_product, q, k_broadcast, v);
  EXPECT_EQ(broadcast.jit.kernels_per_call, 3) << broadcast.fused;
  EXPECT_NE(broadcast.fused.find("batch axes are broadcast"), std::string::npos) << broadcast.fused;
}

TEST(AttentionFusion, GeneratedSourceCallsTheDriverWithItsRowFunction) {
  Tensor q = random_tensor(DType::f32, {2, 5, 4}, 60), k = random_tensor(DType::f32, {2, 6, 4}, 61);
  Tensor v = random_tensor(DType::f32, {2, 6, 3}, 62);
  auto jit = function(scaled_dot_product, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::string source = jit.get_compiler_ir(Stage::source, q, k, v);
  for (const char* expected :
       {"void kernel_0_rows(void* context, int64_t row_begin, int64_t row_end, const float* scores, void* "
        "probabilities, int64_t ld, void* scratch)",
        "const float* row_tile = scores + (row - row_begin) * ld;", "problem.batch = 2;", "problem.m = 5;",
        "problem.n = 6;", "problem.k = 4;", "problem.d = 3;", "problem.transpose_b = 1;",
        "runtime->attention(&problem, kernel_0_rows, &state);"})
    EXPECT_NE(source.find(expected), std::string::npos) << expected << "\n" << source;
}

}  // namespace
}  // namespace kiln
