// The fusion contract of the JIT, asserted by kernel count (as tinygrad's
// check_schedule does): the seed function, gelu, softmax, layer_norm and an
// Adam step compile into the promised number of kernels, and the seed's
// matmul output is never materialized in full where kiln's own GEMM runs it.

#include "support/differential.h"
#include "support/test_support.h"
#include "support/workloads.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

using testing::adam_step;
using testing::seed_function;

// A product less than 768 deep (deeper ones go to OpenBLAS, below) on kiln's own GEMM: the epilogue is computed
// tile by tile, within a quarter of the product's bytes.
TEST(KernelCount, SeedIsOneGemmKernelAndNeverWritesTheMatmulOutput) {
  Tensor x = random_tensor(DType::f32, {1024, 512}, 1), y = random_tensor(DType::f32, {512, 1024}, 2);
  auto result = expect_agreement("seed", seed_function, x, y);
  EXPECT_LE(result.jit.kernels_per_call, 2) << result.fused;
  EXPECT_NE(result.fused.find("gemm"), std::string::npos) << result.fused;

  auto jit = function(seed_function, {.jit_compile = true, .on_compile_failure = Fallback::none});
  jit(x, y);
  std::int64_t before = memory_statistics().bytes_in_use;
  reset_peak_memory();
  Tensor total = jit(x, y);
  std::int64_t temporaries = memory_statistics().peak_bytes_in_use - before;
  std::int64_t matmul_output = 1024 * 1024 * 4;
  EXPECT_LE(temporaries, matmul_output / 4) << "peak temporary bytes " << temporaries;
}

// A product at least 768 deep with at least 256^2 outputs is computed by OpenBLAS a panel of rows at a time
// (kernels::cpu::prefers_openblas), with the same epilogue on its blocks: still one kernel, and the same results
// as the standard executor; a product it writes is the standard executor's, bit for bit (the same OpenBLAS
// call). (Against the standard executor only: the float64 reference would take minutes.)
template <class Body>
void expect_one_kernel_agreeing_with_standard(const std::string& what, Body body, const Tensor& x, const Tensor& y,
                                              int bitwise_output = -1) {
  auto standard = function(body);
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::vector<Tensor> expected = standard(x, y), actual = jit(x, y);
  EXPECT_EQ(jit.statistics().kernels_per_call, 1) << what << "\n" << jit.get_compiler_ir(Stage::fused, x, y);
  for (std::size_t output = 0; output < expected.size(); ++output) {
    const std::vector<float> want = expected[output].to_vector<float>(), got = actual[output].to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    double largest = 0, difference = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      largest = std::max(largest, static_cast<double>(std::fabs(want[i])));
      difference = std::max(difference, static_cast<double>(std::fabs(got[i] - want[i])));
    }
    EXPECT_LE(difference, 1e-5 * largest) << what << ", output " << output;
    if (static_cast<int>(output) == bitwise_output) {
      EXPECT_EQ(difference, 0.0) << what << ", output " << output;
    }
  }
}

TEST(KernelCount, SeedOfALargeDeepProductIsStillOneKernel) {
  Tensor x = random_tensor(DType::f32, {2048, 2049}, 11), y = random_tensor(DType::f32, {2049, 2048}, 12);
  expect_one_kernel_agreeing_with_standard(
      "the product not written", [](Tensor x, Tensor y) { return std::vector<Tensor>{seed_function(x, y)}; }, x, y);
  expect_one_kernel_agreeing_with_standard(
      "the product written",
      [](Tensor x, Tensor y) {
        return std::vector<Tensor>{seed_function(x, y), matmul(x, y)};
      },
      x, y,
      /*bitwise_output=*/1);
}

// A dense layer on a batch of sequences, [batch, tokens, width] x [width, hidden] + bias, then gelu: the leading
// axes are rows of one product, so it is one gemm kernel as a 2-D layer is (it was a batched library matmul and
// a loop kernel over its output until 2026-12-01). Operands broadcast along any of the leading axes (a position
// table, a per-sequence scale) are read at each row's coordinates.
TEST(KernelCount, DenseLayerOnABatchOfSequencesIsOneGemmKernel) {
  auto dense = [](Tensor x, Tensor w, Tensor bias) { return nn::gelu(matmul(x, w) + bias); };
  auto result = expect_agreement("dense [4,37,24]", dense, random_tensor(DType::f32, {4, 37, 24}, 20),
                                 random_tensor(DType::f32, {24, 40}, 21), random_tensor(DType::f32, {40}, 22));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_NE(result.fused.find("kernel 0 (gemm over [4,37,40])"), std::string::npos) << result.fused;

  // Rank 4, a transposed weight, operands broadcast along each leading axis, and a full reduction.
  auto layer = [](Tensor x, Tensor w, Tensor positions, Tensor scale, Tensor residual) {
    Tensor y = tanh(matmul(x, w, {.transpose_b = true}) * scale + positions) + residual;
    return std::make_tuple(y, reduce_sum(square(y)));
  };
  result = expect_agreement("dense [2,3,13,9]", layer, random_tensor(DType::f32, {2, 3, 13, 9}, 23),
                            random_tensor(DType::f32, {33, 9}, 24), random_tensor(DType::f32, {13, 33}, 25),
                            random_tensor(DType::f32, {2, 1, 1, 1}, 26), random_tensor(DType::f32, {2, 3, 13, 33}, 27));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;

  // Deep enough for OpenBLAS (prefers_openblas): the epilogue runs on its panels, at the same coordinates.
  auto deep = [](Tensor x, Tensor w, Tensor positions) { return nn::relu(matmul(x, w) + positions); };
  result = expect_agreement("dense [3,100,800]", deep, random_tensor(DType::f32, {3, 100, 800}, 28),
                            random_tensor(DType::f32, {800, 300}, 29), random_tensor(DType::f32, {100, 300}, 30));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;

  // Empty leading axes and an empty depth.
  expect_agreement("dense [2,0,7]", dense, random_tensor(DType::f32, {2, 0, 7}, 31),
                   random_tensor(DType::f32, {7, 5}, 32), random_tensor(DType::f32, {5}, 33));
  expect_agreement("dense [2,3,0]", dense, random_tensor(DType::f32, {2, 3, 0}, 34),
                   random_tensor(DType::f32, {0, 5}, 35), random_tensor(DType::f32, {5}, 36));
}

// A transposed batched left operand, and a right operand with batch axes, stay batched library matmuls.
// A value smaller than the product, broadcast into it (a row of scales scaled), is computed in the
// epilogue where it is read, as a loop kernel recomputes it; and a full reduction of the product read by scalar ops
// (a mean scaled) stays the epilogue's, the scalar ops a kernel of their own after it.
TEST(KernelCount, EpiloguesComputeBroadcastValuesAndLeaveScalarOpsAfterTheirReductions) {
  const Tensor x = random_tensor(DType::f32, {67, 96}, 1), w = random_tensor(DType::f32, {96, 80}, 2);
  const Tensor scales = random_tensor(DType::f32, {80}, 3);
  auto scaled = expect_agreement(
      "relu(x @ w + s * 2)", [](Tensor a, Tensor b, Tensor s) { return nn::relu(matmul(a, b) + s * 2); }, x, w, scales);
  EXPECT_EQ(scaled.jit.kernels_per_call, 1) << scaled.fused;
  auto mean = expect_agreement(
      "sum(tanh(x @ w)) * 0.5", [](Tensor a, Tensor b) { return reduce_sum(tanh(matmul(a, b))) * 0.5; }, x, w);
  EXPECT_EQ(mean.jit.kernels_per_call, 2) << mean.fused;
  EXPECT_NE(mean.fused.find("kernel 0 (gemm"), std::string::npos) << mean.fused;
}

TEST(KernelCount, BatchedProductsOfOtherShapesStayLibraryKernels) {
  auto transposed = [](Tensor x, Tensor w) { return exp(matmul(x, w, {.transpose_a = true})); };
  auto result = expect_agreement("transposed batch", transposed, random_tensor(DType::f32, {3, 8, 5}, 37),
                                 random_tensor(DType::f32, {8, 6}, 38));
  EXPECT_NE(result.fused.find("batched matmul with a transposed left operand"), std::string::npos) << result.fused;
  auto batched = [](Tensor x, Tensor w) { return exp(matmul(x, w)); };
  result = expect_agreement("batched right", batched, random_tensor(DType::f32, {3, 8, 5}, 39),
                            random_tensor(DType::f32, {3, 5, 6}, 40));
  EXPECT_NE(result.fused.find("batched matmul: the right operand has batch axes"), std::string::npos) << result.fused;
}

TEST(KernelCount, GeluIsOneKernel) {
  auto result = expect_agreement(
      "gelu", [](Tensor x) { return nn::gelu(x); }, random_tensor(DType::f32, {4099}, 3));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
}

TEST(KernelCount, SoftmaxIsOneKernel) {
  auto result = expect_agreement(
      "softmax", [](Tensor x) { return nn::softmax(x); }, random_tensor(DType::f32, {37, 301}, 4));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
}

TEST(KernelCount, LayerNormIsOneKernel) {
  Tensor x = random_tensor(DType::f32, {37, 301}, 5);
  Tensor gamma = random_tensor(DType::f32, {301}, 6), beta = random_tensor(DType::f32, {301}, 7);
  auto result = expect_agreement(
      "layer_norm", [](Tensor x, Tensor gamma, Tensor beta) { return nn::layer_norm(x, gamma, beta); }, x, gamma, beta);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
}

// The row composites are row kernels like softmax: logsumexp's maximum, shifted exponentials, sum and log (squeezed
// by a view); the mean of squares and the scaling of rms_norm; variance's two means. (argmin, like argmax, runs
// its standard kernel: one library kernel.)
TEST(KernelCount, RowCompositesAreOneKernelEach) {
  const Tensor x = random_tensor(DType::f32, {37, 301}, 13), gamma = random_tensor(DType::f32, {301}, 14);
  const std::vector<std::pair<std::string, std::function<Tensor(Tensor, Tensor)>>> composites = {
      {"reduce_logsumexp", [](Tensor x, Tensor) { return reduce_logsumexp(x, {-1}); }},
      {"rms_norm", [](Tensor x, Tensor gamma) { return nn::rms_norm(x, gamma); }},
      {"reduce_variance", [](Tensor x, Tensor) { return reduce_variance(x, {-1}); }},
      {"reduce_std", [](Tensor x, Tensor) { return reduce_std(x, {-1}); }},
      {"argmin", [](Tensor x, Tensor) { return argmin(x, -1); }},
      {"silu", [](Tensor x, Tensor) { return nn::silu(x); }},
      {"clip of leaky_relu", [](Tensor x, Tensor) { return clip(nn::leaky_relu(x), -0.5, 0.5); }},
      {"softmax_cross_entropy", [](Tensor x, Tensor gamma) { return nn::softmax_cross_entropy(x, gamma * gamma); }},
      {"sigmoid_cross_entropy", [](Tensor x, Tensor gamma) { return nn::sigmoid_cross_entropy(x, gamma); }},
      {"softplus, log_sigmoid and elu",
       [](Tensor x, Tensor) { return nn::softplus(x) + nn::log_sigmoid(x) * nn::elu(x); }}};
  for (const auto& [name, body] : composites) {
    auto result = expect_agreement(name, body, x, gamma);
    EXPECT_EQ(result.jit.kernels_per_call, 1) << name << "\n" << result.fused;
  }
}

// Per-row values written with keepdims=false, as users write them, stay in the row kernel: a value of the
// reduction's shape, [rows] or [5] of [3,5] rows, is read at its row (the nest's kept coordinates) and stored once
// per row; the square input's maximum broadcast along its rows (NumPy alignment: one value per column) is read at
// another row's coordinate and must not join.
TEST(KernelCount, RowValuesWithoutKeepdimsStayInTheRowKernel) {
  const Tensor x = random_tensor(DType::f32, {37, 301}, 19), gamma = random_tensor(DType::f32, {301}, 20);
  const Tensor per_row = random_tensor(DType::f32, {37}, 21);
  const std::vector<std::pair<std::string, std::function<Tensor(Tensor, Tensor, Tensor)>>> bodies = {
      {"l2 norm", [](Tensor x, Tensor, Tensor) { return sqrt(reduce_sum(x * x, {-1})); }},
      {"logsumexp by hand",
       [](Tensor x, Tensor, Tensor) {
         Tensor maximum = reduce_max(x, {-1});
         return maximum + log(reduce_sum(exp(x - expand_dims(maximum, -1)), {-1}));
       }},
      {"rms_norm by hand",
       [](Tensor x, Tensor gamma, Tensor) {
         Tensor scale = rsqrt(reduce_mean(x * x, {-1}) + 1e-6f);
         return x * expand_dims(scale, -1) * gamma;
       }},
      {"a row sum with a value per row",
       [](Tensor x, Tensor, Tensor rows) { return reduce_sum(x, {-1}) * rows - 1.0f; }},
      {"a composite's squeezed rows, then more",
       [](Tensor x, Tensor, Tensor rows) { return reduce_std(x, {-1}) + reduce_logsumexp(x, {-1}) * rows; }},
      {"a maximum compared",
       [](Tensor x, Tensor, Tensor rows) { return where(reduce_max(x, {-1}) > rows, rows, 0.0f); }},
  };
  for (const auto& [name, body] : bodies) {
    auto result = expect_agreement(name, body, x, gamma, per_row);
    EXPECT_EQ(result.jit.kernels_per_call, 1) << name << "\n" << result.fused;
  }
  auto batched = expect_agreement(
      "a sum over rows of [3,5,7] scaled per column of [3,5]",
      [](Tensor x, Tensor columns) { return reduce_sum(x, {-1}) * columns + 0.5f; },
      random_tensor(DType::f32, {3, 5, 7}, 22), random_tensor(DType::f32, {5}, 23));
  EXPECT_EQ(batched.jit.kernels_per_call, 1) << batched.fused;
  auto two_axes = expect_agreement(
      "a mean over the last two axes, squared",
      [](Tensor x) {
        return square(reduce_mean(x, {1, 2}));
      },
      random_tensor(DType::f32, {6, 5, 7}, 24));
  EXPECT_EQ(two_axes.jit.kernels_per_call, 1) << two_axes.fused;
  expect_agreement(
      "a square input's maximum per row, broadcast as columns", [](Tensor x) { return x - reduce_max(x, {-1}); },
      random_tensor(DType::f32, {37, 37}, 25));
}

// Fusion by structure, not by name: a composite spelled by hand with primitives gets the kernels of the named
// composite (a cross-entropy with take_along_axis, a layer norm with sums, a softmax over the first axis, a
// logsumexp), and both agree with the standard executor and the float64 reference.
TEST(KernelCount, HandSpelledCompositesGetTheirNamedCompositesKernels) {
  const Tensor x = random_tensor(DType::f32, {37, 301}, 26), gamma = random_tensor(DType::f32, {301}, 27);
  const Tensor beta = random_tensor(DType::f32, {301}, 28);
  const Tensor labels = remainder(abs(random_tensor(DType::i32, {37}, 29)), 301);
  using Body = std::function<Tensor(Tensor, Tensor, Tensor, Tensor)>;
  struct Pair {
    std::string name;
    Body named, by_hand;
  };
  const std::vector<Pair> pairs = {
      {"cross-entropy",
       [](Tensor x, Tensor labels, Tensor, Tensor) { return nn::sparse_softmax_cross_entropy(x, labels); },
       [](Tensor x, Tensor labels, Tensor, Tensor) {
         const Tensor largest = reduce_max(x, {-1});
         const Tensor log_total = log(reduce_sum(exp(x - expand_dims(largest, -1)), {-1})) + largest;
         return log_total - squeeze(take_along_axis(x, expand_dims(labels, -1), -1), {-1});
       }},
      {"layer norm", [](Tensor x, Tensor, Tensor gamma, Tensor beta) { return nn::layer_norm(x, gamma, beta); },
       [](Tensor x, Tensor, Tensor gamma, Tensor beta) {
         const Tensor centered = x - expand_dims(reduce_sum(x, {-1}) / 301.0, -1);
         const Tensor variance = reduce_sum(centered * centered, {-1}) / 301.0;
         return centered / sqrt(expand_dims(variance, -1) + 1e-5) * gamma + beta;
       }},
      {"softmax over the first axis", [](Tensor x, Tensor, Tensor, Tensor) { return nn::softmax(x, 0); },
       [](Tensor x, Tensor, Tensor, Tensor) {
         const Tensor exponentials = exp(x - reduce_max(x, {0}));
         return exponentials / reduce_sum(exponentials, {0});
       }},
      {"logsumexp", [](Tensor x, Tensor, Tensor, Tensor) { return reduce_logsumexp(x, {-1}); },
       [](Tensor x, Tensor, Tensor, Tensor) {
         const Tensor largest = reduce_max(x, {-1});
         return largest + log(reduce_sum(exp(x - expand_dims(largest, -1)), {-1}));
       }},
  };
  for (const Pair& pair : pairs) {
    auto named = expect_agreement(pair.name, pair.named, x, labels, gamma, beta);
    auto by_hand = expect_agreement(pair.name + " by hand", pair.by_hand, x, labels, gamma, beta);
    EXPECT_EQ(by_hand.jit.kernels_per_call, named.jit.kernels_per_call) << pair.name << "\nnamed:\n"
                                                                        << named.fused << "by hand:\n"
                                                                        << by_hand.fused;
  }
}

// A reshape at the end is a view of the kernel before it, which keeps its own shape: a dense layer split into heads
// stays the product's epilogue (it was a product kernel and a loop over the heads' shape).
// The sparse cross-entropy's one-hot rows are an iota compared with the labels, computed in the row kernel of the
// logits' logsumexp: one kernel, the one-hot never written.
TEST(KernelCount, SparseSoftmaxCrossEntropyIsOneKernel) {
  const Tensor logits = random_tensor(DType::f32, {37, 301}, 17);
  const Tensor labels = abs(random_tensor(DType::i32, {37}, 18));
  auto result = expect_agreement(
      "sparse_softmax_cross_entropy",
      [](Tensor logits, Tensor labels) { return nn::sparse_softmax_cross_entropy(logits, labels); }, logits, labels);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
}

TEST(KernelCount, AReshapedDenseLayerStaysTheProductsEpilogue) {
  const Tensor x = random_tensor(DType::f32, {64, 96}, 15), w = random_tensor(DType::f32, {96, 128}, 16);
  auto result = expect_agreement(
      "relu(x w) as heads",
      [](Tensor x, Tensor w) {
        return reshape(relu(matmul(x, w)), {64, 2, 64});
      },
      x, w);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_NE(result.fused.find("1 kernel and 1 view"), std::string::npos) << result.fused;
}

TEST(KernelCount, AdamIsOneKernelWithThreeOutputs) {
  Tensor p = random_tensor(DType::f32, {10007}, 8), g = random_tensor(DType::f32, {10007}, 9);
  Tensor m = random_tensor(DType::f32, {10007}, 10), v = abs(random_tensor(DType::f32, {10007}, 11));
  auto result = expect_agreement("adam", adam_step, p, g, m, v);
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_NE(result.fused.find("writes %"), std::string::npos);
  std::size_t line = result.fused.find("writes ");
  std::string writes = result.fused.substr(line, result.fused.find('\n', line) - line);
  EXPECT_EQ(std::count(writes.begin(), writes.end(), '%'), 3) << writes;
}

// The values of `shape` a plan writes to memory ("writes" lines naming it).
int writes_of_shape(const std::string& fused, const std::string& shape) {
  int count = 0;
  for (std::size_t line = fused.find("writes "); line != std::string::npos; line = fused.find("writes ", line + 1)) {
    const std::string writes = fused.substr(line, fused.find('\n', line) - line);
    for (std::size_t at = writes.find(shape); at != std::string::npos; at = writes.find(shape, at + 1)) ++count;
  }
  return count;
}

TEST(KernelCount, ExpensiveProducersAreNotDuplicated) {
  // exp(sin(x)) feeds two reductions over different axes: computed once, by the kernel of one of them, which
  // writes it for the other (recomputing its 40 flops per element would cost more than the copy's bytes).
  Tensor x = random_tensor(DType::f32, {33, 65}, 12);
  auto result = expect_agreement(
      "shared producer",
      [](Tensor x) {
        Tensor e = exp(sin(x));
        return std::vector<Tensor>{reduce_sum(e, {0}), reduce_sum(e, {1})};
      },
      x);
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  EXPECT_NE(result.fused.find("fused %2 exp: elementwise producer of the same size; also written out"),
            std::string::npos)
      << result.fused;
  EXPECT_EQ(writes_of_shape(result.fused, "f32[33,65]"), 1) << result.fused;
}

TEST(KernelCount, AProductReadByTwoKernelsIsWrittenByItsEpilogue) {
  // A gelu-like layer whose product a column sum reads too (a training step's backward reads the pre-activation):
  // the GEMM computes the activation in its epilogue and writes the product as well, instead of writing the
  // product for a loop kernel to read back. Two kernels: the GEMM and the column sum.
  Tensor x = random_tensor(DType::f32, {33, 24}, 13), w = random_tensor(DType::f32, {24, 20}, 14);
  auto result = expect_agreement(
      "product read by an epilogue and a column sum",
      [](Tensor x, Tensor w) {
        Tensor h = matmul(x, w);
        return std::vector<Tensor>{h * sigmoid(h), reduce_sum(h, {0})};
      },
      x, w);
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  EXPECT_NE(result.fused.find("(gemm over [33,20]): %2 matmul %3 sigmoid %4 mul"), std::string::npos) << result.fused;
  EXPECT_NE(result.fused.find("fused %2 matmul: matmul with its consumers as the epilogue, computed tile by tile "
                              "while each tile is in cache; written: only elementwise ops"),
            std::string::npos)
      << result.fused;
  EXPECT_EQ(writes_of_shape(result.fused, "f32[33,20]"), 2) << result.fused;  // the product and the activation
}

TEST(KernelCount, CheapProducersReadByTwoKernelsAreRecomputed) {
  // A batch norm: x - mean(x) feeds the variance and the output, kernels that cannot be one (the output needs the
  // variance's scale, which a loop kernel would compute at every element). It is recomputed in both, which read x;
  // only the output is written at x's size. The mean and the variance are passes of one column kernel.
  auto batch_norm = [](Tensor x, Tensor gamma, Tensor beta) {
    const Tensor centered = x - reduce_mean(x, {0}, true);
    return centered * rsqrt(reduce_mean(square(centered), {0}, true) + 1e-5) * gamma + beta;
  };
  auto result = expect_agreement("batch norm", batch_norm, random_tensor(DType::f32, {129, 67}, 13),
                                 random_tensor(DType::f32, {67}, 14), random_tensor(DType::f32, {67}, 15));
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  EXPECT_NE(result.fused.find("recomputed %4 sub in each of the 2 kernels"), std::string::npos) << result.fused;
  EXPECT_EQ(writes_of_shape(result.fused, "f32[129,67]"), 1) << result.fused;
  // Read by a row reduction and, transposed, by a loop kernel over another space.
  auto two_spaces = [](Tensor x, Tensor shift) {
    const Tensor shifted = x * 0.5 - shift;
    return std::make_tuple(reduce_sum(square(shifted), {1}), transpose(shifted) + 1.0);
  };
  result = expect_agreement("row reduction and transpose", two_spaces, random_tensor(DType::f32, {31, 45}, 16),
                            random_tensor(DType::f32, {45}, 17));
  EXPECT_NE(result.fused.find("recomputed %"), std::string::npos) << result.fused;
  EXPECT_EQ(writes_of_shape(result.fused, "f32[31,45]"), 0) << result.fused;
  // A difference of two arrays would make each kernel read both: the row kernel computes it and writes it for the
  // other kernel to read back.
  auto two_arrays = [](Tensor x, Tensor y) {
    const Tensor difference = x - y;
    return std::make_tuple(reduce_sum(square(difference), {1}), transpose(difference) * 3.0);
  };
  result = expect_agreement("difference of two arrays", two_arrays, random_tensor(DType::f32, {31, 45}, 18),
                            random_tensor(DType::f32, {31, 45}, 19));
  EXPECT_EQ(result.fused.find("recomputed %"), std::string::npos) << result.fused;
  EXPECT_NE(result.fused.find("fused %2 sub: elementwise producer of the same size; also written out"),
            std::string::npos)
      << result.fused;
  EXPECT_EQ(writes_of_shape(result.fused, "f32[31,45]"), 1) << result.fused;
}

TEST(KernelCount, TransposesOfTheInnermostAxisOfLargeArraysAreReadByStripsOrRunTheStandardKernel) {
  // 300 x 200 floats (234 KiB) read by a loop kernel: it reads x by strips of transposed tiles.
  auto transposed_sum = [](Tensor x, Tensor y) { return transpose(x) + y; };
  auto result = expect_agreement("large 2-D transpose", transposed_sum, random_tensor(DType::f32, {300, 200}, 20),
                                 random_tensor(DType::f32, {200, 300}, 21));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  EXPECT_NE(result.fused.find("by strips: tiles transposed in registers"), std::string::npos) << result.fused;
  // Rows too short for a tile (8 < 16): the standard kernel's copy, then the add.
  result = expect_agreement("a transpose to rows of 8", transposed_sum, random_tensor(DType::f32, {8, 3000}, 20),
                            random_tensor(DType::f32, {3000, 8}, 21));
  EXPECT_EQ(result.jit.kernels_per_call, 2) << result.fused;
  // Returned as it is, the transpose is the standard kernel's tiled copy.
  result = expect_agreement(
      "a transpose alone", [](Tensor x) { return transpose(x); }, random_tensor(DType::f32, {300, 200}, 20));
  EXPECT_NE(result.fused.find("transpose runs its standard kernel (it moves the innermost axis"), std::string::npos)
      << result.fused;
  // Of a computed value, read by a row reduction: the value is written, transposed, then reduced.
  auto reduced = [](Tensor x) { return reduce_sum(transpose(exp(x * 0.1)) * 2, {1}); };
  result = expect_agreement("transpose of a computed value", reduced, random_tensor(DType::f32, {257, 190}, 22));
  EXPECT_EQ(result.jit.kernels_per_call, 3) << result.fused;
  // Reduced directly, the value is reduced in its own order instead (simplify): one column kernel.
  auto reduced_directly = [](Tensor x) { return reduce_sum(transpose(exp(x * 0.1)), {1}); };
  result = expect_agreement("reduction of a transpose", reduced_directly, random_tensor(DType::f32, {257, 190}, 22));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  // Small arrays, and rows whose elements lie close together (the innermost input axis is 32 floats: 128
  // bytes), stay index maps of one loop kernel.
  result = expect_agreement("small 2-D transpose", transposed_sum, random_tensor(DType::f32, {60, 50}, 23),
                            random_tensor(DType::f32, {50, 60}, 24));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  auto swap = [](Tensor x) { return transpose(x, {0, 2, 1}) * 2.0; };
  result = expect_agreement("close rows", swap, random_tensor(DType::f32, {8, 300, 32}, 25));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
  // Transposes that keep the innermost axis (a head split) are index maps at any size.
  auto heads = [](Tensor x) { return transpose(reshape(x, {512, 8, 64}), {1, 0, 2}) + 1.0; };
  result = expect_agreement("head split", heads, random_tensor(DType::f32, {512, 512}, 26));
  EXPECT_EQ(result.jit.kernels_per_call, 1) << result.fused;
}

}  // namespace
}  // namespace kiln
