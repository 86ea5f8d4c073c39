// Pieces of models as users write them, each through the standard executor, the JIT and the float64
// reference: the graphs kiln-fuzz's random ops rarely form (several products, products feeding products,
// masks built from iota, losses, embeddings looked up with gather), where fusion decisions meet each other.
// A sum of two products in one gemm kernel (x W + h U) returned a wrong result until 2026-12-01.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;

// Weights of order 1/sqrt(fan-in), as initializers make them: activations stay of order 1.
Tensor weight(std::int64_t rows, std::int64_t columns, std::uint64_t seed) {
  return random::normal({rows, columns}, {.seed = seed, .stddev = 1 / std::sqrt(double(rows))});
}

TEST(Models, GruCell) {
  // z, r gates and the candidate from x W + h U, the new state a blend of both.
  auto gru = [](Tensor x, Tensor h, Tensor wz, Tensor uz, Tensor wr, Tensor ur, Tensor wh, Tensor uh, Tensor bias) {
    Tensor z = nn::sigmoid(matmul(x, wz) + matmul(h, uz) + bias);
    Tensor r = nn::sigmoid(matmul(x, wr) + matmul(h, ur));
    Tensor candidate = tanh(matmul(x, wh) + matmul(r * h, uh));
    return (1.0 - z) * h + z * candidate;
  };
  expect_agreement("GRU cell", gru, random_tensor(DType::f32, {17, 24}, 1), random_tensor(DType::f32, {17, 40}, 2),
                   weight(24, 40, 3), weight(40, 40, 4), weight(24, 40, 5), weight(40, 40, 6), weight(24, 40, 7),
                   weight(40, 40, 8), random_tensor(DType::f32, {40}, 9));
}

TEST(Models, LstmCellWithTwoOutputs) {
  // The four gates from one product each of x and h, sliced from a [batch, 4 * hidden] sum.
  auto lstm = [](Tensor x, Tensor h, Tensor c, Tensor w, Tensor u, Tensor bias) {
    Tensor gates = matmul(x, w) + matmul(h, u) + bias;
    const std::int64_t hidden = c.dim(1);
    auto gate = [&](std::int64_t index) {
      return slice(gates, {.start = {0, index * hidden}, .stop = {gates.dim(0), (index + 1) * hidden}});
    };
    Tensor new_c = nn::sigmoid(gate(1)) * c + nn::sigmoid(gate(0)) * tanh(gate(2));
    return std::make_tuple(nn::sigmoid(gate(3)) * tanh(new_c), new_c);
  };
  expect_agreement("LSTM cell", lstm, random_tensor(DType::f32, {9, 20}, 10), random_tensor(DType::f32, {9, 16}, 11),
                   random_tensor(DType::f32, {9, 16}, 12), weight(20, 64, 13), weight(16, 64, 14),
                   random_tensor(DType::f32, {64}, 15));
}

TEST(Models, ResidualMlpWithRmsNorm) {
  // Three layers, each x + W2 relu(W1 rmsnorm(x)): products feeding products through epilogues.
  auto mlp = [](Tensor x, Tensor w1, Tensor w2, Tensor w3, Tensor w4, Tensor scale) {
    auto rms_norm = [&](Tensor t) { return t * rsqrt(reduce_mean(square(t), {-1}, true) + 1e-6) * scale; };
    x = x + matmul(nn::relu(matmul(rms_norm(x), w1)), w2);
    x = x + matmul(nn::relu(matmul(rms_norm(x), w3)), w4);
    return rms_norm(x);
  };
  expect_agreement("residual MLP", mlp, random_tensor(DType::f32, {33, 48}, 16), weight(48, 96, 17), weight(96, 48, 18),
                   weight(48, 96, 19), weight(96, 48, 20), random_tensor(DType::f32, {48}, 21));
}

TEST(Models, CausalSelfAttentionWithItsProjections) {
  // Q, K, V from one input, a causal mask from iota-built positions, the heads merged and projected.
  auto attend = [](Tensor x, Tensor wq, Tensor wk, Tensor wv, Tensor wo) {
    const std::int64_t tokens = x.dim(0), width = x.dim(1), heads = 2, head = width / heads;
    auto split = [&](Tensor t) { return transpose(reshape(t, {tokens, heads, head}), {1, 0, 2}); };
    Tensor q = split(matmul(x, wq)), k = split(matmul(x, wk)), v = split(matmul(x, wv));
    Tensor rows = reshape(arange(tokens), {tokens, 1}), columns = reshape(arange(tokens), {1, tokens});
    Tensor scores = matmul(q, k, {.transpose_b = true}) * (1 / std::sqrt(double(head)));
    scores = where(columns <= rows, scores, -1e9);
    Tensor merged = reshape(transpose(matmul(nn::softmax(scores), v), {1, 0, 2}), {tokens, width});
    return matmul(merged, wo);
  };
  expect_agreement("causal self-attention", attend, random_tensor(DType::f32, {21, 32}, 22), weight(32, 32, 23),
                   weight(32, 32, 24), weight(32, 32, 25), weight(32, 32, 26));
}

TEST(Models, ClassifierLossAndAccuracyInputs) {
  // Logits of a two-layer classifier, the mean cross-entropy against one-hot labels, and the log-probabilities.
  auto loss = [](Tensor x, Tensor w1, Tensor b1, Tensor w2, Tensor labels) {
    Tensor logits = matmul(nn::gelu(matmul(x, w1) + b1), w2);
    Tensor log_probabilities = nn::log_softmax(logits);
    return std::make_tuple(-reduce_mean(reduce_sum(labels * log_probabilities, {-1})), log_probabilities);
  };
  Tensor labels = cast(random::uniform({19, 10}, {.seed = 27}) > 0.9, DType::f32);
  expect_agreement("classifier loss", loss, random_tensor(DType::f32, {19, 30}, 28), weight(30, 50, 29),
                   random_tensor(DType::f32, {50}, 30), weight(50, 10, 31), labels);
}

TEST(Models, LanguageModelFirstLayerAndLossWithIntegerTokens) {
  // Token embeddings looked up (gather) and scaled, positions added, a causal attention layer, the output projected
  // onto the vocabulary, and the mean cross-entropy of the next tokens as integers (one_hot), with the logits.
  auto language_model = [](Tensor table, Tensor positions, Tensor wq, Tensor wk, Tensor wv, Tensor tokens,
                           Tensor next_tokens) {
    const std::int64_t length = tokens.dim(0), width = table.dim(1), vocabulary = table.dim(0);
    Tensor x = gather(table, tokens) * std::sqrt(double(width)) + positions;
    Tensor rows = reshape(arange(length), {length, 1}), columns = reshape(arange(length), {1, length});
    Tensor scores = where(columns <= rows, matmul(matmul(x, wq), matmul(x, wk), {.transpose_b = true}), -1e9);
    x = x + matmul(nn::softmax(scores * (1 / std::sqrt(double(width)))), matmul(x, wv));
    Tensor logits = matmul(nn::layer_norm(x), table, {.transpose_b = true});  // tied embeddings
    Tensor loss = -reduce_mean(reduce_sum(nn::one_hot(next_tokens, vocabulary) * nn::log_softmax(logits), {-1}));
    return std::make_tuple(loss, logits);
  };
  std::vector<std::int32_t> tokens, next_tokens;
  for (std::int32_t i = 0; i < 23; ++i) tokens.push_back((i * 37 + 5) % 61);
  for (std::int32_t i = 0; i < 23; ++i) next_tokens.push_back(tokens[static_cast<std::size_t>((i + 1) % 23)]);
  expect_agreement("language model", language_model, weight(61, 32, 40), random_tensor(DType::f32, {23, 32}, 41),
                   weight(32, 32, 42), weight(32, 32, 43), weight(32, 32, 44), from_vector(tokens),
                   from_vector(next_tokens));
}

}  // namespace
}  // namespace kiln
