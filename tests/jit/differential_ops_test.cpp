// Every op through the JIT, against the standard executor and the float64
// reference, on random inputs (never zeros): every dtype it accepts, odd
// sizes, rank 0, zero-size dimensions, broadcasting, transposed and sliced
// inputs. Ops are batched into multi-output functions so that one compile
// covers many of them.

#include "support/differential.h"
#include "support/special_values.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <kiln/kiln.h>
#include <cstdint>
#include <random>

#include <cmath>
#include <limits>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::expect_graph_agreement;
using testing::expect_named_agreement;
using testing::random_tensor;
using testing::random_uniform;

using Unary = Tensor (*)(const Tensor&, Location);
using Binary = Tensor (*)(const Tensor&, const Tensor&, Location);

struct NamedUnary {
  const char* name;
  Unary op;
  bool float_only;
};

const std::vector<NamedUnary>& unary_ops() {
  static const std::vector<NamedUnary> ops = {
      {"neg", neg, false},    {"abs", abs, false},     {"sign", sign, false},   {"square", square, false},
      {"relu", relu, false},  {"floor", floor, false}, {"ceil", ceil, false},   {"sin", sin, true},
      {"cos", cos, true},     {"exp", exp, true},      {"tanh", tanh, true},    {"sigmoid", sigmoid, true},
      {"erf", erf, true},     {"erfc", erfc, true},    {"log", log, true},      {"sqrt", sqrt, true},
      {"rsqrt", rsqrt, true}, {"expm1", expm1, true},  {"round", round, false}, {"atan", atan, true},
  };
  return ops;
}

std::string label(const std::string& what, DType dtype, const Shape& shape) {
  return what + " " + std::string(to_string(dtype)) + shape.to_string();
}

const std::vector<Shape> unary_shapes = {Shape(), Shape({7}), Shape({3, 5}), Shape({0, 4}), Shape({2, 3, 129}),
                                         Shape({100003})};

TEST(DifferentialOps, UnaryOpsOnEveryDtypeAndShape) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (const Shape& shape : unary_shapes) {
      std::vector<std::string> names;
      for (const auto& op : unary_ops())
        if (is_floating(dtype) || !op.float_only) names.push_back(op.name);
      // log, sqrt and rsqrt see |x| + 0.1 as well, so most values are in their domain.
      names.push_back("log|x|");
      names.push_back("sqrt|x|");
      names.push_back("log1p|x|");
      auto body = [dtype](Tensor x) {
        std::vector<Tensor> outputs;
        for (const auto& op : unary_ops())
          if (is_floating(dtype) || !op.float_only) outputs.push_back(op.op(x, Location::current()));
        Tensor positive = abs(x) + 0.1;
        outputs.push_back(log(positive));
        outputs.push_back(sqrt(positive));
        outputs.push_back(log1p(positive - 1.05));
        return outputs;
      };
      Tensor x = random_tensor(dtype, shape, 100 + static_cast<std::uint64_t>(shape.numel()));
      expect_named_agreement(label("unary", dtype, shape), names, body, x);
    }
  }
}

TEST(DifferentialOps, TranscendentalsOnWideRanges) {
  // Large arguments take sin/cos's slow range reduction; exp over/underflows.
  Tensor wide = random_uniform(DType::f32, {4099}, -2e5, 2e5, 1);
  Tensor tiny = random_uniform(DType::f32, {1031}, -1e-3, 1e-3, 2);
  Tensor big = random_uniform(DType::f32, {1031}, -120, 120, 3);
  auto body = [](Tensor x) {
    return std::vector<Tensor>{sin(x),     cos(x), tanh(x),  erf(x),        erfc(x),
                               sigmoid(x), exp(x), expm1(x), log1p(abs(x)), atan(x)};
  };
  expect_agreement("wide", body, wide);
  expect_agreement("tiny", body, tiny);
  expect_agreement("big", body, big);
}

struct NamedBinary {
  const char* name;
  Binary op;
};

const std::vector<NamedBinary>& arithmetic_ops() {
  static const std::vector<NamedBinary> ops = {{"add", add},
                                               {"sub", sub},
                                               {"mul", mul},
                                               {"div", div},
                                               {"maximum", maximum},
                                               {"minimum", minimum},
                                               {"eq", eq},
                                               {"ne", ne},
                                               {"lt", lt},
                                               {"le", le},
                                               {"gt", gt},
                                               {"ge", ge},
                                               {"floor_divide", floor_divide},
                                               {"remainder", remainder},
                                               {"fmod", fmod},
                                               {"copysign", copysign}};
  return ops;
}

const std::vector<std::pair<Shape, Shape>> broadcast_pairs = {
    {Shape({4, 5}), Shape({4, 5})}, {Shape({3, 1}), Shape({1, 4})}, {Shape({5}), Shape({2, 3, 5})},
    {Shape(), Shape({6})},          {Shape({2, 0, 3}), Shape({3})}, {Shape({7, 1, 33}), Shape({7, 2, 1})},
    {Shape({1000, 17}), Shape({17})}};

TEST(DifferentialOps, BinaryOpsWithBroadcastingOnEveryDtype) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (const auto& [left, right] : broadcast_pairs) {
      std::vector<std::string> names;
      for (const auto& op : arithmetic_ops()) names.push_back(op.name);
      names.push_back("pow");
      auto body = [](Tensor a, Tensor b) {
        std::vector<Tensor> outputs;
        for (const auto& op : arithmetic_ops()) outputs.push_back(op.op(a, b, Location::current()));
        // A small exponent keeps integer powers meaningful.
        outputs.push_back(pow(abs(a), minimum(abs(b), cast(full({}, 3), b.dtype()))));
        return outputs;
      };
      Tensor a = random_tensor(dtype, left, 200), b = random_tensor(dtype, right, 201);
      expect_named_agreement(label("binary", dtype, left) + " x " + right.to_string(), names, body, a, b);
    }
  }
}

// The bits of integers and bools, with broadcasting; shift counts of either sign and past the width.
TEST(DifferentialOps, BitwiseOpsOnIntegersAndBools) {
  for (DType dtype : {DType::i32, DType::i64, DType::boolean}) {
    for (const auto& [left, right] : broadcast_pairs) {
      const Tensor a = random_tensor(dtype, left, 210), b = random_tensor(dtype, right, 211);
      if (dtype == DType::boolean) {
        expect_agreement(
            label("bitwise", dtype, left) + " x " + right.to_string(),
            [](Tensor a, Tensor b) {
              return std::vector<Tensor>{a & b, a | b, a ^ b, ~a};
            },
            a, b);
        continue;
      }
      expect_agreement(
          label("bitwise", dtype, left) + " x " + right.to_string(),
          [](Tensor a, Tensor b) {
            const Tensor wide = a * 1000, count = b * 9;  // -9000 .. 9000, -81 .. 81
            return std::vector<Tensor>{wide & b,      wide | b,      wide ^ b,       ~wide,
                                       wide << count, wide >> count, (wide >> 3) & 7};
          },
          a, b);
    }
  }
}

TEST(DifferentialOps, LogicalOpsComparisonsAndWhere) {
  for (const auto& [left, right] : broadcast_pairs) {
    Tensor p = random_tensor(DType::boolean, left, 300), q = random_tensor(DType::boolean, right, 301);
    Tensor a = random_tensor(DType::f32, left, 302), b = random_tensor(DType::f32, right, 303);
    auto body = [](Tensor p, Tensor q, Tensor a, Tensor b) {
      return std::vector<Tensor>{logical_and(p, q), logical_or(p, q), logical_not(p), eq(p, q), ne(p, q),
                                 where(p, a, b),    where(q, a, 2.5),  where(a > b, a, b), maximum(p, q),
                                 minimum(p, q)};
    };
    expect_agreement("logical " + left.to_string() + " x " + right.to_string(), body, p, q, a, b);
  }
}

TEST(DifferentialOps, CastsBetweenEveryPairOfDtypes) {
  const std::vector<DType> dtypes = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};
  for (DType from : dtypes) {
    // Include values beyond the i32 range to exercise saturation.
    Tensor x = from == DType::boolean ? random_tensor(from, {1001}, 400)
               : is_floating(from)    ? cast(random_uniform(DType::f64, {1001}, -5e9, 5e9, 401), from)
                                      : random_tensor(from, {1001}, 402);
    auto body = [&dtypes](Tensor x) {
      std::vector<Tensor> outputs;
      for (DType to : dtypes) outputs.push_back(cast(x, to));
      return outputs;
    };
    expect_agreement("cast from " + std::string(to_string(from)), body, x);
  }
}

TEST(DifferentialOps, MixedDtypesPromote) {
  Tensor f = random_tensor(DType::f32, {33}, 500), d = random_tensor(DType::f64, {33}, 501);
  Tensor i = random_tensor(DType::i32, {33}, 502), l = random_tensor(DType::i64, {33}, 503);
  Tensor b = random_tensor(DType::boolean, {33}, 504);
  auto body = [](Tensor f, Tensor d, Tensor i, Tensor l, Tensor b) {
    return std::vector<Tensor>{f + i, f * d, i + l, i / l, b + i, f - b, i * 2, f * 0.5, i * 0.5, b * 3};
  };
  auto result = expect_agreement("promotion", body, f, d, i, l, b);
  (void)result;
}

TEST(DifferentialOps, TransposedSlicedAndBroadcastInputs) {
  Tensor x = random_tensor(DType::f32, {5, 7}, 600), y = random_tensor(DType::f32, {7, 5}, 601);
  Tensor z = random_tensor(DType::f32, {6, 9, 4}, 602);
  auto body = [](Tensor x, Tensor y, Tensor z) {
    Tensor transposed = sin(transpose(x)) * y;
    Tensor sliced = slice(z, {.start = {1, 0, 3}, .stop = {6, 9, -5}, .step = {2, 3, -1}}) + 1;
    Tensor reversed = exp(slice(x, {.start = {4}, .stop = {-6}, .step = {-1}}));
    Tensor permuted = transpose(z, {2, 0, 1}) * 2;
    Tensor broadcast = broadcast_to(reduce_sum(z, {1}, true), {6, 9, 4}) - z;
    Tensor expanded = expand_dims(x, 1) + reshape(y, {5, 1, 7}) * 2.0 + squeeze(expand_dims(x, 0), {0});
    return std::vector<Tensor>{transposed, sliced, reversed, permuted, broadcast, expanded};
  };
  expect_agreement("views", body, x, y, z);
}

TEST(DifferentialOps, ReductionsOverEverySetOfAxes) {
  Tensor x = random_tensor(DType::f32, {3, 5, 7}, 700);
  std::vector<std::vector<std::int64_t>> axis_sets = {{}, {0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (bool keepdims : {false, true}) {
    auto body = [&](Tensor x) {
      std::vector<Tensor> outputs;
      Tensor squared = x * x + 0.5;  // a producer to fuse into each reduction
      for (const auto& axes : axis_sets) {
        outputs.push_back(reduce_sum(squared, axes, keepdims));
        outputs.push_back(reduce_mean(x, axes, keepdims));
        outputs.push_back(reduce_max(x, axes, keepdims));
        outputs.push_back(reduce_min(-x, axes, keepdims));
        outputs.push_back(reduce_prod(x * 0.25 + 1, axes, keepdims));
      }
      for (int axis = 0; axis < 3; ++axis) outputs.push_back(argmax(x, axis, keepdims));
      return outputs;
    };
    expect_agreement(keepdims ? "reductions keepdims" : "reductions", body, x);
  }
}

TEST(DifferentialOps, ReductionsOfEveryDtypeAndSize) {
  for (DType dtype : {DType::f64, DType::i32, DType::i64, DType::boolean}) {
    Tensor x = random_tensor(dtype, {4, 37}, 710);
    auto body = [](Tensor x) {
      return std::vector<Tensor>{reduce_sum(x, {1}), reduce_max(x, {1}), reduce_min(x), reduce_mean(x, {1})};
    };
    expect_agreement("reduce " + std::string(to_string(dtype)), body, x);
  }
  // Long rows take the chunked, partial-sum path; empty rows give identities.
  Tensor long_row = random_tensor(DType::f32, {2, 70001}, 711);
  expect_agreement("long rows", [](Tensor x) { return std::vector<Tensor>{reduce_sum(x * 2, {1}), reduce_max(x)}; },
                   long_row);
  Tensor empty = random_tensor(DType::f32, {3, 0}, 712);
  expect_agreement("empty rows", [](Tensor x) {
    return std::vector<Tensor>{reduce_sum(x, {1}), reduce_mean(x, {1}), reduce_max(x, {1}), reduce_prod(x, {1})};
  }, empty);
}

TEST(DifferentialOps, MatmulWithEpiloguesTransposesAndDtypes) {
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      Tensor a = random_tensor(DType::f32, transpose_a ? Shape({33, 17}) : Shape({17, 33}), 800);
      Tensor b = random_tensor(DType::f32, transpose_b ? Shape({9, 33}) : Shape({33, 9}), 801);
      Tensor bias = random_tensor(DType::f32, {9}, 802);
      auto body = [=](Tensor a, Tensor b, Tensor bias) {
        Tensor z = matmul(a, b, {.transpose_a = transpose_a, .transpose_b = transpose_b});
        Tensor activated = tanh(z + bias);
        return std::vector<Tensor>{z, activated, reduce_sum(activated), reduce_max(z * z)};
      };
      expect_agreement("matmul " + std::to_string(transpose_a) + std::to_string(transpose_b), body, a, b, bias);
    }
  }
  for (DType dtype : {DType::f64, DType::i32, DType::i64}) {
    Tensor a = random_tensor(dtype, {7, 5}, 810), b = random_tensor(dtype, {5, 3}, 811);
    expect_agreement("matmul " + std::string(to_string(dtype)), [](Tensor a, Tensor b) { return matmul(a, b) + 1; }, a, b);
  }
  Tensor batch = random_tensor(DType::f32, {2, 3, 4, 5}, 820), right = random_tensor(DType::f32, {3, 5, 6}, 821);
  Tensor vector = random_tensor(DType::f32, {5}, 822);
  expect_agreement("batched and vectors", [](Tensor a, Tensor b, Tensor v) {
    return std::vector<Tensor>{matmul(a, b) * 2, matmul(a, v), matmul(v, b), matmul(v, v)};
  }, batch, right, vector);
  Tensor zero_k = random_tensor(DType::f32, {4, 0}, 830), zero_k_right = random_tensor(DType::f32, {0, 3}, 831);
  expect_agreement("k = 0", [](Tensor a, Tensor b) { return matmul(a, b) + 1; }, zero_k, zero_k_right);
}

// Rows whose length is a multiple of 16 are generated without a step for a partial vector at their end, and
// reductions whose body has a transcendental with one accumulator instead of four: each beside a row one
// element longer, which keeps the partial step.
TEST(DifferentialOps, WholeVectorRowsAndTranscendentalReductions) {
  for (std::int64_t extra : {0, 1}) {
    const std::string suffix = extra ? " (one more)" : "";
    // 32784 = 2 chunks of 16384 and one of 16.
    Tensor chunked = random_tensor(DType::f32, {3, 32784 + extra}, 840);
    expect_agreement(
        "chunked loop" + suffix, [](Tensor x) { return erfc(x) * x; }, chunked);
    Tensor rows = random_tensor(DType::f32, {5, 4112 + extra}, 841);
    expect_agreement(
        "softmax rows" + suffix,
        [](Tensor x) {
          Tensor shifted = exp(x - reduce_max(x, {1}, true));
          return std::vector<Tensor>{shifted / reduce_sum(shifted, {1}, true), reduce_sum(sin(x) * x, {1}),
                                     reduce_max(tanh(x), {1})};
        },
        rows);
    // 1040 columns: panels of up to 512 columns, the last one 16 wide.
    Tensor a = random_tensor(DType::f32, {37, 64}, 842), b = random_tensor(DType::f32, {64, 1040 + extra}, 843);
    expect_agreement(
        "gemm epilogue" + suffix,
        [](Tensor a, Tensor b) {
          Tensor z = matmul(a, b);
          Tensor activated = relu(z + sin(z));
          return std::vector<Tensor>{activated, reduce_sum(activated)};
        },
        a, b);
  }
}

TEST(DifferentialOps, ShapeOpsConcatAndConstants) {
  Tensor a = random_tensor(DType::f32, {2, 3}, 900), b = random_tensor(DType::f32, {4, 3}, 901);
  auto body = [](Tensor a, Tensor b) {
    Tensor joined = concat({a * 2, b}, 0);
    Tensor reshaped = reshape(exp(joined), {3, 6});
    Tensor constant = full({3, 6}, -1.5) + ones({6}) * zeros({3, 1});
    return std::vector<Tensor>{joined, reshaped + constant, transpose(reshaped) + 1, ones({2, 2}, DType::i32)};
  };
  expect_agreement("shape ops", body, a, b);
}

TEST(DifferentialOps, IotaThroughIr) {
  expect_graph_agreement("iota",
                         "func @iota(%0: f32[3,4]) -> (f32[3,4], i64[3,4]) {\n"
                         "  %1 = i64[3,4] iota() {axis=1}\n"
                         "  %2 = f32[3,4] cast(%1)\n"
                         "  %3 = f32[3,4] add(%0, %2)\n"
                         "  %4 = i64[3,4] iota() {axis=0}\n"
                         "  return %3, %4\n"
                         "}\n",
                         {random_tensor(DType::f32, {3, 4}, 950)});
}

// Philox's bits for keys and counters with every word set (carries out of the low words, the top bits, 0, -1), at
// sizes with and without a partial vector: the JIT's vector rounds (a register of 64-bit lanes at a time, words in
// their low halves) against the standard executor's scalar ones, bit for bit.
TEST(DifferentialOps, RandomBitsOfKeysAndCountersWithEveryWordSet) {
  std::mt19937_64 generator(960);
  for (const std::int64_t size : {std::int64_t{1}, std::int64_t{37}, std::int64_t{1000}}) {
    std::vector<std::int64_t> keys(static_cast<std::size_t>(size)), counters(static_cast<std::size_t>(size));
    for (std::size_t i = 0; i < keys.size(); ++i) {
      keys[i] = static_cast<std::int64_t>(generator());
      counters[i] = static_cast<std::int64_t>(generator());
    }
    const std::int64_t edges[] = {0, -1, 0xFFFFFFFFLL, 0x100000000LL, INT64_MIN, INT64_MAX};
    for (std::size_t i = 0; i < keys.size() && i < 36; ++i) {
      keys[i] = edges[i % 6];
      counters[i] = edges[i / 6];
    }
    const std::string type = "i64[" + std::to_string(size) + "]";
    expect_graph_agreement("random_bits of " + std::to_string(size),
                           "func @bits(%0: " + type + ", %1: " + type + ") -> (" + type + ") {\n  %2 = " + type +
                               " random_bits(%0, %1)\n  return %2\n}\n",
                           {from_vector(keys, Shape({size})), from_vector(counters, Shape({size}))});
  }
}

TEST(DifferentialOps, NeuralNetworkComposites) {
  for (const Shape& shape : {Shape({7, 33}), Shape({4, 1}), Shape({2, 3, 16}), Shape({1, 5000}), Shape({65, 3})}) {
    Tensor x = random_tensor(DType::f32, shape, 1000);
    Tensor gamma = random_tensor(DType::f32, {shape[shape.rank() - 1]}, 1001);
    Tensor beta = random_tensor(DType::f32, {shape[shape.rank() - 1]}, 1002);
    auto body = [](Tensor x, Tensor gamma, Tensor beta) {
      return std::vector<Tensor>{nn::gelu(x),          nn::gelu(x, nn::GeluApproximation::erf),
                                 nn::softmax(x),       nn::softmax(x, 0),
                                 nn::log_softmax(x),   nn::layer_norm(x, gamma, beta),
                                 nn::layer_norm(x),    nn::sigmoid(x) * nn::relu(x)};
    };
    expect_agreement("nn " + shape.to_string(), body, x, gamma, beta);
  }
}

// The composites users expect as one call (ops.h and nn.h: argmin, logsumexp, variance, clip, stack, split, silu,
// leaky_relu, rms_norm): the JIT fuses their steps, and each result must agree with the standard executor's and
// the reference's on odd sizes, a rank-0 input, zero-size axes and transposed views.
TEST(DifferentialOps, CompositesOfThePrimitives) {
  for (const Shape& shape : {Shape({7, 33}), Shape({4, 1}), Shape({2, 3, 16}), Shape({1, 5000}), Shape({65, 3})}) {
    const std::int64_t width = shape[shape.rank() - 1];
    Tensor x = random_tensor(DType::f32, shape, 1100), gamma = random_tensor(DType::f32, {width}, 1101);
    Tensor low = random_uniform(DType::f32, {width}, -1.0, 0.0, 1102);
    auto body = [](Tensor x, Tensor gamma, Tensor low) {
      std::vector<Tensor> outputs = {argmin(x, -1),
                                     argmin(x, 0, true),
                                     reduce_logsumexp(x, {-1}),
                                     reduce_logsumexp(x),
                                     reduce_logsumexp(x * 60.0, {0}, true),
                                     reduce_variance(x, {-1}),
                                     reduce_std(x, {0}),
                                     clip(x, -0.5, 0.75),
                                     clip(x, low, abs(low) + 0.25),
                                     stack({x, x * 2.0, gamma + x}, 1),
                                     stack({x, -x}, -1),
                                     nn::silu(x),
                                     nn::leaky_relu(x),
                                     nn::leaky_relu(x * 3.0, 0.2),
                                     nn::rms_norm(x, gamma),
                                     nn::rms_norm(x),
                                     nn::softplus(x * 40.0),
                                     nn::log_sigmoid(x),
                                     nn::elu(x * 3.0),
                                     nn::selu(x),
                                     nn::hard_swish(x * 4.0),
                                     nn::mish(x * 3.0),
                                     reduce_any(x > 1.0, {-1}),
                                     reduce_all(x > -1.0, {0}),
                                     pad(x, std::vector<std::pair<std::int64_t, std::int64_t>>(
                                                static_cast<std::size_t>(x.rank()), {1, 2}),
                                         0.5),
                                     tile(x, {2, 3}),
                                     nn::softmax_cross_entropy(x, nn::softmax(gamma + 0.0 * x)),
                                     nn::sigmoid_cross_entropy(x * 10.0, nn::sigmoid(x))};
      for (const Tensor& piece : split_sizes(x, {1, -1}, -1)) outputs.push_back(piece * 3.0);
      return outputs;
    };
    expect_agreement("composites " + shape.to_string(), body, x, gamma, low);
  }
  // Integers and bools (argmin reverses them without overflow, logsumexp and variance compute in f32), a
  // transposed view, a rank-0 input and a zero-size axis.
  for (DType dtype : {DType::i32, DType::i64, DType::f64}) {
    Tensor x = random_tensor(dtype, {9, 17}, 1110);
    auto body = [](Tensor x) {
      return std::vector<Tensor>{argmin(x, 0),   argmin(x, 1),     reduce_logsumexp(x, {1}), reduce_variance(x),
                                 clip(x, -3, 4), stack({x, x}, 2), split(x, 3, 0)[1] + 1,    nn::leaky_relu(x, 0.5)};
    };
    expect_agreement(std::string("composites ") + std::string(to_string(dtype)), body, x);
  }
  expect_agreement(
      "argmin of bools", [](Tensor flags) { return argmin(flags, 1); }, random_tensor(DType::boolean, {5, 41}, 1120));
  Tensor wide = random_tensor(DType::f32, {33, 21}, 1121);
  expect_agreement(
      "composites of a transposed view",
      [](Tensor x) {
        return std::vector<Tensor>{argmin(x, -1), reduce_logsumexp(x, {-1}), nn::rms_norm(x), split(x, 3, -1)[2]};
      },
      transpose(wide));
  expect_agreement(
      "composites of a scalar",
      [](Tensor x) {
        return std::vector<Tensor>{reduce_logsumexp(x), reduce_variance(x), clip(x, -0.5, 0.5), stack({x, x}),
                                   nn::silu(x)};
      },
      random_tensor(DType::f32, {}, 1122));
  expect_agreement(
      "composites of a zero-size axis",
      [](Tensor x) {
        return std::vector<Tensor>{reduce_logsumexp(x, {0}), reduce_logsumexp(x, {1}), argmin(x, 1), stack({x, x}),
                                   nn::rms_norm(x),          split(x, 2, 1)[0]};
      },
      random_tensor(DType::f32, {0, 6}, 1123));
}

// Row kernels multiply by the reciprocal of a divisor that is constant along the row (softmax's sum) only where
// that reciprocal is a normal number: rows whose sums are zero, infinite, NaN, huge or subnormal divide.
// Signed zeros, which a division shows (1 / -0 = -inf): relu(-0) is +0 (as
// max(-0, +0), and the reference), where the kernels' x < 0 ? 0 : x kept -0
// (found by kiln-fuzz --executors cuda-emulated; every executor had it);
// maximum and minimum of equal operands give the second (the kernels', and
// PyTorch's), where the reference's std::max gave the first.
TEST(DifferentialOps, SignedZerosThroughReluMaximumAndMinimum) {
  const float infinity = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-0.0f, 0.0f, -0.0f, 0.0f, -1.5f, 2.5f, nan, -infinity, infinity, 1.0f};
  std::vector<float> y = {0.0f, -0.0f, -0.0f, 0.0f, 2.5f, -1.5f, 0.0f, 0.0f, -0.0f, nan};
  for (int copies = 0; copies < 3; ++copies) {
    x.insert(x.end(), x.begin(), x.begin() + 10);
    y.insert(y.end(), y.begin(), y.begin() + 10);
  }
  auto body = [](Tensor x, Tensor y) {
    return std::vector<Tensor>{relu(x), 1.0 / relu(x), 1.0 / maximum(x, y), 1.0 / minimum(x, y)};
  };
  expect_agreement("signed zeros f32", body, from_vector(x, {4, 10}), from_vector(y, {4, 10}));
  std::vector<double> x64(x.begin(), x.end()), y64(y.begin(), y.end());
  expect_agreement("signed zeros f64", body, from_vector(x64, {40}), from_vector(y64, {40}));
}

// An f32 maximum or minimum of a constant compiles to one compare and select (RowKernel::computed: where the
// constant is neither NaN nor zero): the same bits as the standard executor's, NaN, the signs of zero and ties
// included, with the constant on either side, built by GCC and (jit_differential_ops_built_by_clang) by clang.
TEST(DifferentialOps, MaximumAndMinimumOfAConstant) {
  const float infinity = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> values = {-0.0f, 0.0f, -1.5f, 2.5f, nan, -infinity, infinity, 1.0f, -87.0f, 3e-39f};
  for (int copies = 0; copies < 3; ++copies) values.insert(values.end(), values.begin(), values.begin() + 10);
  const Tensor x = from_vector(values, {40});
  for (double constant : {0.0, -0.0, 2.5, -1.5, -87.0, static_cast<double>(infinity), static_cast<double>(-infinity),
                          static_cast<double>(nan), 1e-50}) {
    // Each form a function of its own: clang 14 compiled maximum(x, -0) and maximum(-0, x) in one kernel as one
    // value (its folding of selects took -0 and +0 for the same), which no source spelling of ours controls.
    for (int form = 0; form < 4; ++form) {
      auto body = [constant, form](Tensor x) {
        const Tensor c = full(Shape(), constant, DType::f32);
        const bool left = form % 2 == 1;
        return form < 2 ? maximum(left ? c : x, left ? x : c) : minimum(left ? c : x, left ? x : c);
      };
      const std::string label = "constant " + std::to_string(constant) + ", form " + std::to_string(form);
      testing::expect_same_bits(label, body, x);
      const std::string source =
          function(body, {.jit_compile = true, .on_compile_failure = Fallback::none}).get_compiler_ir(Stage::source, x);
      // Neither a NaN nor a zero (1e-50 is zero as a float) takes the short form.
      const bool short_form = !std::isnan(constant) && static_cast<float>(constant) != 0;
      EXPECT_EQ(source.find("imum_of_number(") != std::string::npos, short_form) << label << "\n" << source;
    }
  }
}

// testing::special_value_ops: every float op on every pair of special
// values, the signs of zero results included.
TEST(DifferentialOps, SpecialValuesAndTheSignsOfZeros) {
  for (DType dtype : {DType::f32, DType::f64}) {
    auto [a, b] = testing::special_value_pairs(dtype);
    expect_named_agreement("special values " + std::string(to_string(dtype)), testing::special_value_names(),
                           testing::special_value_ops, a, b);
  }
}

// A reduction of one element (no axes, or an axis of size 1) is that
// element: a sum or mean of -0 alone is -0 (the reference gave 0 + -0 = +0;
// found by kiln-fuzz --executors cuda-emulated). Longer rows of -0 sum to +0
// everywhere (the sum starts from +0).
TEST(DifferentialOps, ReductionsOfOneElementKeepTheSignOfZero) {
  std::vector<float> values = {-0.0f, 0.0f, -0.0f, -0.0f, 0.0f, -0.0f};
  auto body = [](Tensor x) {
    return std::vector<Tensor>{1.0 / reduce_sum(x, {}), 1.0 / reduce_sum(x, {1}), 1.0 / reduce_mean(x, {1}),
                               1.0 / reduce_sum(x, {0})};
  };
  expect_agreement("one-element sums", body, from_vector(values, {6, 1}));
}

// Rows shorter than a vector, or one lane past whole vectors: every row ends in a partial vector, loaded and
// stored with masks where the target has them (AVX-512, AVX2), and reduced across its lanes by a tree.
TEST(DifferentialOps, RowsShorterThanAVectorOrJustPastOne) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (std::int64_t length : {1, 3, 7, 8, 9, 10, 15, 17, 31, 33}) {
      const Tensor x = random_tensor(dtype, {37, length}, 720 + length);
      auto body = [](Tensor x) {
        return std::vector<Tensor>{reduce_sum(x, {1}), reduce_max(x, {1}), reduce_min(x, {1}, true),
                                   x * 3 - reduce_max(x, {1}, true)};
      };
      expect_agreement("rows of " + std::to_string(length) + " " + std::string(to_string(dtype)), body, x);
      if (!is_floating(dtype)) continue;
      auto normalized = [](Tensor x) {
        return std::vector<Tensor>{nn::log_softmax(x), nn::softmax(x), reduce_prod(1.0 + x * 0.1, {1})};
      };
      expect_agreement("softmax of " + std::to_string(length) + " " + std::string(to_string(dtype)), normalized, x);
    }
  }
}

// Reductions over rows shorter than a vector put a row of the group in each lane (row_kernel.cpp,
// rows_across_lanes). 37 rows: two full groups of 16 (of 8 and 4 in the AVX2 and x86-64 builds) and a partial one.
// The inputs are read every way a group can read them: an element of each row (elements 10 apart: a gather), a
// value per column broadcast down the rows (one element for every lane), a value per row (read once per group), a
// transposed input (the group's rows side by side), and positions (iota) along both axes.
TEST(DifferentialOps, ShortRowsAcrossLanesReadEveryKindOfInput) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    const Tensor x = random_tensor(dtype, {37, 10}, 740), columns = random_tensor(dtype, {10}, 741);
    const Tensor per_row = random_tensor(dtype, {37, 1}, 742), transposed = random_tensor(dtype, {10, 37}, 743);
    auto body = [](Tensor x, Tensor columns, Tensor per_row, Tensor transposed) {
      const Tensor y = x * columns + per_row - transpose(transposed, {1, 0});
      const Tensor positions = cast(arange(10), x.dtype()) * 3 + cast(reshape(arange(37), {37, 1}), x.dtype());
      return std::vector<Tensor>{reduce_sum(y, {1}),
                                 reduce_max(y, {1}, true),
                                 y - reduce_min(y, {1}, true),
                                 reduce_sum(y * positions, {1}),
                                 reduce_sum(broadcast_to(per_row, Shape({37, 10})), {1}),  // one value per row
                                 reduce_max(broadcast_to(per_row * 2, Shape({37, 10})), {1}),
                                 cast(reduce_max(gt(y, per_row), {1}), x.dtype()),  // booleans
                                 where(lt(y, reduce_max(y, {1}, true)), y, per_row)};
    };
    expect_agreement("rows across lanes " + std::string(to_string(dtype)), body, x, columns, per_row, transposed);
    if (!is_floating(dtype)) continue;
    auto normalized = [](Tensor x, Tensor columns, Tensor per_row) {
      const Tensor y = x * columns + per_row;
      return std::vector<Tensor>{nn::softmax(y), nn::log_softmax(y), reduce_mean(y, {1}),
                                 reduce_prod(1.0 + y * 0.1, {1}), nn::layer_norm(y, columns, columns * 0.5)};
    };
    expect_agreement("softmax across lanes " + std::string(to_string(dtype)), normalized, x, columns, per_row);
  }
  // Rows of a 3-D input that collapse into one row axis (4 x 9 of them).
  expect_agreement("softmax of [4, 9, 7]", [](Tensor x) { return nn::softmax(x) * 2; },
                   random_tensor(DType::f32, {4, 9, 7}, 744));
}

// Reductions of transposes reduce the transposed operand in its own order (simplify): every reduction, over the
// axes of a transposed matrix, of a batch with its last axes swapped, and of a value also used transposed.
TEST(DifferentialOps, ReductionsOfTransposes) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32}) {
    const Tensor x = random_tensor(dtype, {67, 45}, 760), batch = random_tensor(dtype, {5, 33, 17}, 761);
    auto body = [](Tensor x, Tensor batch) {
      const Tensor t = transpose(x, {1, 0}), swapped = transpose(batch, {0, 2, 1});
      return std::vector<Tensor>{reduce_sum(t, {1}), reduce_max(t, {0}),   reduce_min(swapped, {1}),
                                 reduce_sum(swapped, {0, 2}), reduce_prod(transpose(x * 0 + 1, {1, 0}), {0}),
                                 reduce_max(swapped, {2}), t * 2};
    };
    expect_agreement("reductions of transposes " + std::string(to_string(dtype)), body, x, batch);
  }
  expect_agreement("means of transposes", [](Tensor x) { return reduce_mean(transpose(exp(x), {1, 0}), {1}); },
                   random_tensor(DType::f32, {300, 70}, 762));
}

// A group of rows divides by its rows' sums with one reciprocal each only if every sum in the group has a normal
// reciprocal: rows of zero, subnormal, infinite and NaN sums sit in groups with ordinary rows.
TEST(DifferentialOps, DivisionByRowSumsAcrossLanes) {
  constexpr std::int64_t columns = 9, rows = 40;
  std::vector<float> values;
  for (std::int64_t row = 0; row < rows; ++row)
    for (std::int64_t j = 0; j < columns; ++j) {
      const float ordinary = 1.0f + 0.1f * static_cast<float>(j + row);
      switch (row % 8) {
        case 3: values.push_back(j == columns - 1 ? 0.0f : (j % 2 ? 1.5f : -1.5f)); break;  // a sum of zero
        case 5: values.push_back(1e37f); break;  // its reciprocal is subnormal
        case 6: values.push_back(1e-42f * static_cast<float>(j + 1)); break;  // a subnormal sum
        case 7: values.push_back(j == 3 ? (row % 16 == 7 ? std::numeric_limits<float>::infinity()
                                                         : std::numeric_limits<float>::quiet_NaN())
                                        : ordinary);
                break;
        default: values.push_back(ordinary);
      }
    }
  Tensor x = from_vector(values, {rows, columns});
  expect_agreement("x / row sum across lanes", [](Tensor x) { return x / reduce_sum(x, {1}, true); }, x);
}

TEST(DifferentialOps, DivisionByRowSumsAtTheEdges) {
  constexpr std::int64_t columns = 19;
  std::vector<float> values;
  auto row = [&](auto element) {
    for (std::int64_t j = 0; j < columns; ++j) values.push_back(element(j));
  };
  row([](std::int64_t j) { return 1.0f + 0.1f * static_cast<float>(j); });                // an ordinary sum
  row([](std::int64_t j) { return j == columns - 1 ? 0.0f : (j % 2 ? 1.5f : -1.5f); });  // a sum of zero
  row([](std::int64_t) { return 1e37f; });                      // 1.9e38: its reciprocal is subnormal
  row([](std::int64_t j) { return 1e-42f * static_cast<float>(j + 1); });  // a subnormal sum
  row([](std::int64_t j) { return j == 3 ? std::numeric_limits<float>::infinity() : 1.0f; });
  row([](std::int64_t j) { return j == 5 ? std::numeric_limits<float>::quiet_NaN() : 1.0f; });
  row([](std::int64_t j) { return -0.5f - 0.01f * static_cast<float>(j); });  // a negative sum
  Tensor x = from_vector(values, {7, columns});
  expect_agreement("x / row sum", [](Tensor x) { return x / reduce_sum(x, {1}, true); }, x);
}

TEST(DifferentialOps, RankZeroAndZeroSizeInsideFusedKernels) {
  Tensor scalar = random_tensor(DType::f32, {}, 1100), empty = random_tensor(DType::f32, {0, 3}, 1101);
  Tensor row = random_tensor(DType::f32, {3}, 1102);
  auto body = [](Tensor s, Tensor e, Tensor r) {
    return std::vector<Tensor>{sin(s) * s + 1, exp(e) + r, reduce_sum(e, {0}), nn::softmax(e), reduce_sum(s)};
  };
  expect_agreement("rank 0 and empty", body, scalar, empty, row);
}

}  // namespace
}  // namespace kiln
