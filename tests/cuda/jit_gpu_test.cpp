// The CUDA JIT on a GPU: for every op category and the nn composites, the
// JIT's generated kernels against the standard CUDA kernels and the float64
// reference evaluator (tests/support/differential.h, with the GPU results
// copied back), and the kernel counts the fusion plan promises. Skips without
// a GPU; jit_codegen_test.cpp checks the generated code compiles without one.

#include "cuda/cuda_test_support.h"
#include "support/differential.h"
#include "support/special_values.h"
#include "support/workloads.h"

#include <kiln/config.h>
#include <kiln/nn.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace kiln {
namespace {

using testing::gpu;
using testing::random_tensor;
using testing::random_uniform;

std::vector<Tensor> to_cpu(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> result;
  for (const Tensor& tensor : tensors) result.push_back(tensor.to(Device::cpu()));
  return result;
}

// Runs `body` on the GPU with the standard executor and with the JIT (strict:
// a fallback fails the test), and compares both with the float64 reference on
// the CPU inputs. Returns the JIT function's statistics.
template <class Body, class... Inputs>
FunctionStatistics expect_gpu_agreement(const std::string& label, Body body, const Inputs&... inputs) {
  auto standard = function(body, {.name = "standard"});
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "jit"});
  try {
    auto standard_outputs = to_cpu(testing::flatten_result(standard(inputs.to(gpu)...)));
    auto jit_outputs = to_cpu(testing::flatten_result(jit(inputs.to(gpu)...)));
    for (const Tensor& output : testing::flatten_result(jit(inputs.to(gpu)...)))
      EXPECT_EQ(output.device(), gpu) << label;
    testing::check_outputs(label, function(body).get_compiler_ir(Stage::traced, inputs...), {inputs...},
                           standard_outputs, jit_outputs);
  } catch (const std::exception& error) {
    ADD_FAILURE() << label << ": " << error.what();
  }
  return jit.statistics();
}

// Sets config::allow_tf32 for one test and puts the previous setting back when the test ends, however it ends.
class Tf32Setting {
 public:
  explicit Tf32Setting(bool allow) : previous_(config::allow_tf32.exchange(allow)) {}
  ~Tf32Setting() { config::allow_tf32 = previous_; }
  Tf32Setting(const Tf32Setting&) = delete;
  Tf32Setting& operator=(const Tf32Setting&) = delete;

 private:
  bool previous_;
};

using testing::adam_step;
using testing::seed_function;

TEST(CudaJit, UnaryOpsOnEveryDtypeAndShape) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (const Shape& shape :
         {Shape(), Shape({7}), Shape({3, 5}), Shape({0, 4}), Shape({2, 3, 129}), Shape({100003})}) {
      auto body = [dtype](Tensor x) {
        std::vector<Tensor> outputs = {neg(x), abs(x), sign(x), square(x), relu(x), floor(x), ceil(x), round(x)};
        if (is_floating(dtype))
          for (Tensor y : {sin(x), cos(x), exp(x), tanh(x), sigmoid(x), erf(x), erfc(x), log(abs(x) + 0.1),
                           sqrt(abs(x)), rsqrt(abs(x) + 0.1), log1p(abs(x)), expm1(x)})
            outputs.push_back(y);
        return outputs;
      };
      expect_gpu_agreement("unary " + std::string(to_string(dtype)) + shape.to_string(), body,
                           random_tensor(dtype, shape, 1));
    }
}

TEST(CudaJit, BinaryOpsWithBroadcastingOnEveryDtype) {
  KILN_REQUIRE_GPU();
  const std::vector<std::pair<Shape, Shape>> pairs = {{Shape({5}), Shape({5})},
                                                      {Shape({3, 4}), Shape({4})},
                                                      {Shape({3, 1, 5}), Shape({4, 5})},
                                                      {Shape({}), Shape({6})},
                                                      {Shape({1024}), Shape({1024})}};
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (const auto& [left, right] : pairs) {
      auto body = [](Tensor a, Tensor b) {
        return std::vector<Tensor>{a + b,         a - b,
                                   a * b,         maximum(a, b),
                                   minimum(a, b), pow(abs(a), minimum(abs(b), cast(full({}, 3), b.dtype())))};
      };
      expect_gpu_agreement("binary " + std::string(to_string(dtype)) + left.to_string() + " x " + right.to_string(),
                           body, random_tensor(dtype, left, 2), random_tensor(dtype, right, 3));
    }
  expect_gpu_agreement(
      "division", [](Tensor a, Tensor b) { return a / b; }, random_tensor(DType::f32, {33, 8}, 4),
      random_tensor(DType::f32, {8}, 5));
}

// A constant made inside a traced function (on the CPU by default) is part
// of the graph, on the function's device, as in tf.function and jax.jit;
// one asked for on another GPU is refused, naming the user's line.
TEST(CudaJit, ConstantsInsideAGpuFunctionLiveOnItsDevice) {
  KILN_REQUIRE_GPU();
  auto body = [](Tensor x) { return std::vector<Tensor>{x * full({}, 3), x + zeros({4}), full({2, 4}, 1.5) * x}; };
  expect_gpu_agreement("constants", body, random_tensor(DType::f32, {2, 4}, 41));
  for (bool jit : {false, true}) {
    auto other_gpu =
        function([](Tensor x) { return x + full({}, 1, DType::f32, Device::cuda(7)); }, {.jit_compile = jit});
    try {
      (void)other_gpu(random_tensor(DType::f32, {3}, 42).to(gpu));
      ADD_FAILURE() << "expected kiln::DeviceError";
    } catch (const DeviceError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("cannot create a constant on cuda:7 inside a function traced for cuda:0"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("jit_gpu_test.cpp"), std::string::npos) << message;
    }
  }
}

TEST(CudaJit, LogicalOpsComparisonsWhereAndCasts) {
  KILN_REQUIRE_GPU();
  Tensor p = random_tensor(DType::boolean, {3, 1, 5}, 6), q = random_tensor(DType::boolean, {4, 5}, 7);
  Tensor a = random_tensor(DType::f32, {3, 1, 5}, 8), b = random_tensor(DType::f32, {4, 5}, 9);
  auto body = [](Tensor p, Tensor q, Tensor a, Tensor b) {
    return std::vector<Tensor>{logical_and(p, q), logical_or(p, q), logical_not(p),     eq(p, q), ne(p, q),
                               where(p, a, b),    where(q, a, 2.5), where(a > b, a, b), a <= b,   a >= b};
  };
  expect_gpu_agreement("logical", body, p, q, a, b);
  const std::vector<DType> dtypes = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};
  for (DType from : dtypes) {
    auto casts = [&](Tensor x) {
      std::vector<Tensor> outputs;
      for (DType to : dtypes) outputs.push_back(cast(x * 1000, to));
      return outputs;
    };
    if (from != DType::boolean)
      expect_gpu_agreement("casts from " + std::string(to_string(from)), casts, random_tensor(from, {257}, 10));
  }
}

TEST(CudaJit, ReluOfSignedZeros) {
  KILN_REQUIRE_GPU();
  std::vector<float> values = {-0.0f, 0.0f, -1.5f, 2.5f, NAN, -INFINITY, INFINITY, -0.0f};
  expect_gpu_agreement(
      "relu of signed zeros",
      [](Tensor x) {
        return std::vector<Tensor>{relu(x), 1.0 / relu(x)};
      },
      from_vector(values, {8}));
}

TEST(CudaJit, SpecialValuesAndTheSignsOfZeros) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f64}) {
    auto [a, b] = testing::special_value_pairs(dtype);
    expect_gpu_agreement("special values " + std::string(to_string(dtype)), testing::special_value_ops, a, b);
  }
}

TEST(CudaJit, TransposedSlicedAndBroadcastInputs) {
  KILN_REQUIRE_GPU();
  Tensor a = random_tensor(DType::f32, {6, 9}, 11), b = random_tensor(DType::f32, {9, 6}, 12);
  auto body = [](Tensor a, Tensor b) {
    return std::vector<Tensor>{exp(transpose(a)) - b, slice(a, {.start = {1, 0}, .stop = {5, 9}, .step = {2, 3}}) * 2,
                               broadcast_to(reshape(a, {6, 1, 9}), {6, 4, 9}) + 1};
  };
  expect_gpu_agreement("index maps", body, a, b);
}

TEST(CudaJit, ReductionsOverTrailingAxesOfEveryDtypeAndLength) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (const Shape& shape :
         {Shape({5, 7}), Shape({3, 1024}), Shape({4, 1025}), Shape({2, 70000}), Shape({0, 5}), Shape({6, 0})}) {
      auto body = [](Tensor x) {
        return std::vector<Tensor>{reduce_sum(x, {-1}), reduce_max(x, {-1}), reduce_min(x, {-1}),
                                   reduce_sum(x * x, {-1}, true)};
      };
      expect_gpu_agreement("reductions " + std::string(to_string(dtype)) + shape.to_string(), body,
                           random_tensor(dtype, shape, 13));
    }
  expect_gpu_agreement(
      "mean and prod",
      [](Tensor x) {
        return std::vector<Tensor>{reduce_mean(x, {-1}), reduce_prod(x, {-1})};
      },
      random_uniform(DType::f64, {9, 31}, 0.5, 1.5, 14));
  expect_gpu_agreement(
      "reduction of a transpose",
      [](Tensor x) {
        return reduce_max(transpose(x, {0, 2, 1}), {1, 2});
      },
      random_tensor(DType::f32, {5, 6, 7}, 15));
  auto any_all = [](Tensor x) {
    Tensor rare = x > 0.9, common = x > -0.9;
    return std::vector<Tensor>{reduce_max(rare, {-1}), reduce_min(common, {-1}), reduce_max(rare), reduce_min(common)};
  };
  for (const Shape& shape : {Shape({9, 7}), Shape({3, 2000}), Shape({2, 70000}), Shape({4, 0})})
    expect_gpu_agreement("any and all " + shape.to_string(), any_all, random_tensor(DType::f32, shape, 16));
  expect_gpu_agreement(
      "whole-array sum returned reshaped",
      [](Tensor x) {
        return reshape(reduce_sum(x), {1, 1});
      },
      random_tensor(DType::f32, {300, 40}, 17));
}

TEST(CudaJit, NeuralNetworkCompositesAndKernelCounts) {
  KILN_REQUIRE_GPU();
  for (const Shape& shape : {Shape({7, 33}), Shape({4, 1}), Shape({2, 3, 16}), Shape({1, 5000}), Shape({65, 3})}) {
    Tensor x = random_tensor(DType::f32, shape, 16);
    Tensor gamma = random_tensor(DType::f32, {shape[shape.rank() - 1]}, 17);
    Tensor beta = random_tensor(DType::f32, {shape[shape.rank() - 1]}, 18);
    auto body = [](Tensor x, Tensor gamma, Tensor beta) {
      return std::vector<Tensor>{
          nn::gelu(x),        nn::gelu(x, nn::GeluApproximation::erf), nn::softmax(x),
          nn::log_softmax(x), nn::layer_norm(x, gamma, beta),          nn::sigmoid(x) * nn::relu(x)};
    };
    expect_gpu_agreement("nn " + shape.to_string(), body, x, gamma, beta);
  }
  EXPECT_EQ(expect_gpu_agreement(
                "gelu", [](Tensor x) { return nn::gelu(x); }, random_tensor(DType::f32, {4099}, 19))
                .kernels_per_call,
            1);
  EXPECT_EQ(expect_gpu_agreement(
                "softmax", [](Tensor x) { return nn::softmax(x); }, random_tensor(DType::f32, {37, 301}, 20))
                .kernels_per_call,
            1);
  EXPECT_EQ(expect_gpu_agreement(
                "layer_norm", [](Tensor x) { return nn::layer_norm(x); }, random_tensor(DType::f32, {64, 768}, 21))
                .kernels_per_call,
            1);
  Tensor p = random_tensor(DType::f32, {1000}, 22), g = random_tensor(DType::f32, {1000}, 23);
  Tensor m = random_tensor(DType::f32, {1000}, 24), v = abs(random_tensor(DType::f32, {1000}, 25));
  EXPECT_EQ(expect_gpu_agreement("adam", adam_step, p, g, m, v).kernels_per_call, 1);
}

// Convolutions, pooling and batch normalization are compositions of slices, pads, matmul and reductions: on the
// GPU the JIT fuses them as on the CPU, and the products go through cuBLAS (f32 with TF32 off, so the fp32
// tolerance holds).
TEST(CudaJit, ConvolutionsPoolingAndBatchNorm) {
  KILN_REQUIRE_GPU();
  const Tf32Setting full_f32(false);  // within the reference's matmul tolerance
  const Tensor image = random_tensor(DType::f32, {2, 9, 11, 6}, 60);
  const Tensor filters = random_tensor(DType::f32, {3, 3, 6, 5}, 61);
  const Tensor grouped = random_tensor(DType::f32, {3, 2, 3, 4}, 62);
  const Tensor depthwise = random_tensor(DType::f32, {3, 3, 1, 12}, 63);
  auto body = [](Tensor x, Tensor w, Tensor grouped_w, Tensor depthwise_w) {
    auto [mean, variance] = nn::moments(x, {0, 1, 2});
    return std::vector<Tensor>{
        nn::relu(nn::conv2d(x, w, {.padding = nn::Padding::same})),
        nn::conv2d(x, w, {.strides = {2, 1}, .dilations = {1, 2}}),
        nn::conv2d(x, grouped_w, {.explicit_padding = std::array<nn::PaddingPair, 2>{{{1, 0}, {0, 2}}}}),
        nn::conv2d(x, depthwise_w, {.padding = nn::Padding::same}),
        nn::max_pool2d(x,
                       {.window = {3, 3}, .strides = std::array<std::int64_t, 2>{2, 2}, .padding = nn::Padding::same}),
        nn::avg_pool2d(x, {.window = {2, 3}, .padding = nn::Padding::same}),
        nn::batch_norm(x, mean, variance)};
  };
  expect_gpu_agreement("convolutions", body, image, filters, grouped, depthwise);
  expect_gpu_agreement(
      "conv1d", [](Tensor x, Tensor w) { return nn::conv1d(x, w, {.stride = 2, .padding = nn::Padding::same}); },
      random_tensor(DType::f32, {3, 17, 4}, 64), random_tensor(DType::f32, {5, 4, 7}, 65));
}

// einsum and the element-moving composites are primitives' compositions too: transposes folded into batched and
// transposed cuBLAS products, a diagonal as a strided slice, reversed slices, a causal triangle from two iotas.
TEST(CudaJit, EinsumFlipRollAndTriangles) {
  KILN_REQUIRE_GPU();
  const Tf32Setting full_f32(false);
  auto body = [](Tensor q, Tensor k, Tensor square) {
    return std::vector<Tensor>{einsum("bhqd,bhkd->bhqk", {q, k}),
                               einsum("bhqd,bhkd->bqhk", {q, k}),
                               einsum("...qd,...kd", {q, k}),
                               einsum("bhqd->bd", {q}),
                               einsum("ii->i", {square}),
                               einsum("ij,jk,kl->il", {square, square, square}),
                               flip(q, {1, -1}),
                               roll(q, -3, 2),
                               nn::softmax(tril(square, -1) - square)};
  };
  expect_gpu_agreement("einsum and friends", body, random_tensor(DType::f32, {2, 3, 7, 5}, 68),
                       random_tensor(DType::f32, {2, 3, 6, 5}, 69), random_tensor(DType::f32, {9, 9}, 70));
}

TEST(CudaJit, InverseTrigonometricAndHyperbolicFunctions) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f64}) {
    auto body = [](Tensor x, Tensor y) {
      Tensor inside = x * 0.999;  // x is uniform in [-1, 1]
      return std::vector<Tensor>{atan(x * 40.0), atan2(y, x),      tan(x),
                                 asin(inside),   acos(inside),     sinh(x * 5.0),
                                 cosh(x * 5.0),  asinh(x * 100.0), acosh(abs(x) * 10.0 + 1.5),
                                 atanh(inside)};
    };
    expect_gpu_agreement("inverse functions " + std::string(to_string(dtype)), body,
                         random_uniform(dtype, {3, 129}, -1, 1, 66), random_uniform(dtype, {129}, -1, 1, 67));
  }
}

// The row composites, and per-row values written with keepdims=false (stored once per row by the row kernel),
// are one row kernel each on the GPU too.
TEST(CudaJit, RowCompositesAndPerRowValuesWithoutKeepdimsAreOneKernel) {
  KILN_REQUIRE_GPU();
  const Tensor x = random_tensor(DType::f32, {37, 301}, 26), gamma = random_tensor(DType::f32, {301}, 27);
  const Tensor per_row = random_tensor(DType::f32, {37}, 28);
  const std::vector<std::pair<std::string, std::function<Tensor(Tensor, Tensor, Tensor)>>> bodies = {
      {"reduce_logsumexp", [](Tensor x, Tensor, Tensor) { return reduce_logsumexp(x, {-1}); }},
      {"rms_norm", [](Tensor x, Tensor gamma, Tensor) { return nn::rms_norm(x, gamma); }},
      {"reduce_std", [](Tensor x, Tensor, Tensor) { return reduce_std(x, {-1}); }},
      {"l2 norm", [](Tensor x, Tensor, Tensor) { return sqrt(reduce_sum(x * x, {-1})); }},
      {"logsumexp by hand",
       [](Tensor x, Tensor, Tensor) {
         Tensor maximum = reduce_max(x, {-1});
         return maximum + log(reduce_sum(exp(x - expand_dims(maximum, -1)), {-1}));
       }},
      {"a composite's squeezed rows, then more",
       [](Tensor x, Tensor, Tensor rows) { return reduce_std(x, {-1}) + reduce_logsumexp(x, {-1}) * rows; }},
      {"a row sum with a value per row",
       [](Tensor x, Tensor, Tensor rows) { return reduce_sum(x, {-1}) * rows - 1.0f; }},
  };
  for (const auto& [name, body] : bodies)
    EXPECT_EQ(expect_gpu_agreement(name, body, x, gamma, per_row).kernels_per_call, 1) << name;
}

TEST(CudaJit, EmbeddingLookupAndOneHotLossAndAnIndexOutOfRange) {
  KILN_REQUIRE_GPU();
  // gather runs its standard kernel inside the module; one_hot fuses into the loss.
  auto body = [](Tensor table, Tensor tokens, Tensor labels) {
    Tensor x = nn::layer_norm(gather(table, tokens) * 4.0);
    Tensor logits = matmul(x, table, {.transpose_b = true});
    return -reduce_mean(reduce_sum(nn::one_hot(labels, table.dim(0)) * nn::log_softmax(logits), {-1}));
  };
  std::vector<std::int32_t> tokens, labels;
  for (std::int32_t i = 0; i < 40; ++i) tokens.push_back((i * 13) % 57 - 28);
  for (std::int32_t i = 0; i < 40; ++i) labels.push_back((i * 29) % 57);
  Tensor table = random_tensor(DType::f32, {57, 24}, 26);
  expect_gpu_agreement("embedding", body, table, from_vector(tokens, {40}), from_vector(labels, {40}));
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  Tensor bad = from_vector(std::vector<std::int32_t>{3, 57}).to(gpu),
         good = from_vector(std::vector<std::int32_t>{3, 56}).to(gpu);
  Tensor two_labels = from_vector(std::vector<std::int32_t>{1, 2}).to(gpu);
  EXPECT_THROW(jit(table.to(gpu), bad, two_labels), ValueError);
  // Still usable after the error (within TF32's rounding of the product, on by default).
  const float loss = jit(table.to(gpu), good, two_labels).item<float>();
  const float on_cpu = function(body)(table, good.to(Device::cpu()), two_labels.to(Device::cpu())).item<float>();
  EXPECT_NEAR(loss, on_cpu, 1e-3 * std::fabs(on_cpu));
}

TEST(CudaJit, SeedIsCublasAndOneKernelWithTf32OnAndOff) {
  KILN_REQUIRE_GPU();
  Tensor x = random_tensor(DType::f32, {256, 128}, 26), y = random_tensor(DType::f32, {128, 192}, 27);
  const Tf32Setting full_f32(false);  // within the reference's matmul tolerance
  FunctionStatistics statistics = expect_gpu_agreement("seed", seed_function, x, y);
  EXPECT_EQ(statistics.kernels_per_call, 1);
  EXPECT_EQ(statistics.fallbacks, 0);
  // Deterministic: the same inputs give the same bits, call after call.
  auto jit = function(seed_function, {.jit_compile = true, .on_compile_failure = Fallback::none});
  Tensor gx = x.to(gpu), gy = y.to(gpu);
  double first = jit(gx, gy).item<double>();
  for (int call = 0; call < 5; ++call) EXPECT_EQ(jit(gx, gy).item<double>(), first);
  Tensor big = random_tensor(DType::f32, {1024, 1024}, 28);
  expect_gpu_agreement(
      "seed with the product as an output too",
      [](Tensor x) {
        Tensor z = matmul(x, x);
        return std::vector<Tensor>{z, reduce_mean(nn::relu(z))};
      },
      big);
  config::allow_tf32 = true;  // TF32: 10-bit mantissas, so only close
  double with_tf32 = jit(gx, gy).item<double>();
  EXPECT_NEAR(with_tf32, first, 1e-2 * std::abs(first) + 1);
}

// Dense layers run as one cuBLASLt call with its bias/relu epilogue
// (jit_codegen_test.cpp checks which fit); their results must match the
// standard executor's matmul + add + relu and the float64 reference.
TEST(CudaJit, DenseLayersThroughCublasLtEpilogues) {
  KILN_REQUIRE_GPU();
  const Tf32Setting full_f32(false);
  for (const auto& [m, k, n] : {std::tuple{64, 32, 48}, std::tuple{257, 129, 67}, std::tuple{1024, 512, 1000}}) {
    std::string size = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    Tensor x = random_tensor(DType::f32, {m, k}, 32), w = random_tensor(DType::f32, {k, n}, 33);
    Tensor b = random_tensor(DType::f32, {n}, 34);
    EXPECT_EQ(
        expect_gpu_agreement(
            "relu(x @ w + b) " + size, [](Tensor x, Tensor w, Tensor b) { return nn::relu(matmul(x, w) + b); }, x, w, b)
            .kernels_per_call,
        1);
    expect_gpu_agreement(
        "b + x @ w " + size, [](Tensor x, Tensor w, Tensor b) { return b + matmul(x, w); }, x, w, b);
    expect_gpu_agreement(
        "relu(x^T @ w) " + size, [](Tensor x, Tensor w) { return nn::relu(matmul(x, w, {.transpose_a = true})); },
        transpose(x), w);
    // A bias sliced from a longer vector (an offset of one element when it
    // stays a view): whichever way the plan takes it, the results agree.
    Tensor wide = random_tensor(DType::f32, {n + 1}, 35);
    expect_gpu_agreement(
        "dense with an unaligned bias " + size,
        [n](Tensor x, Tensor w, Tensor wide) {
          return nn::relu(matmul(x, w) + slice(wide, {.start = {1}, .stop = {n + 1}}));
        },
        x, w, wide);
  }
}

// A dense layer on a batch of sequences ([batch, tokens, width] x [width, hidden]): one gemm kernel, through
// cuBLASLt's epilogue when it fits (rows of all leading axes) and a generated epilogue kernel when it does not.
TEST(CudaJit, DenseLayersOnBatchesOfSequences) {
  KILN_REQUIRE_GPU();
  const Tf32Setting full_f32(false);
  Tensor x = random_tensor(DType::f32, {3, 37, 24}, 36), w = random_tensor(DType::f32, {24, 40}, 37);
  Tensor b = random_tensor(DType::f32, {40}, 38), positions = random_tensor(DType::f32, {37, 40}, 39);
  EXPECT_EQ(
      expect_gpu_agreement(
          "relu(x @ w + b) [3,37,24]", [](Tensor x, Tensor w, Tensor b) { return nn::relu(matmul(x, w) + b); }, x, w, b)
          .kernels_per_call,
      1);
  EXPECT_EQ(expect_gpu_agreement(
                "gelu(x @ w^T + positions) [3,37,24]",
                [](Tensor x, Tensor w, Tensor positions) {
                  return nn::gelu(matmul(x, w, {.transpose_b = true}) + positions);
                },
                x, transpose(w), positions)
                .kernels_per_call,
            1);
  expect_gpu_agreement(
      "empty rows", [](Tensor x, Tensor w, Tensor b) { return nn::relu(matmul(x, w) + b); },
      random_tensor(DType::f32, {2, 0, 24}, 40), w, b);
}

// A NaN product through cuBLASLt's relu epilogues stays NaN, as kiln's relu
// keeps it (kernels/cuda/cuda_kernels.h). cuBLASLt does not document this: the
// first version here expected 0 (fmaxf's answer, CUTLASS's ReLu) and an H200
// with cuBLAS 13.0 gave NaN. So every way the JIT reaches those epilogues is
// checked: relu and bias + relu, a small product and one large enough for the
// tuner's race (2^31 flops, kernels/cuda/blas_lt.cpp), with TF32 off (against
// the float64 reference) and on (against the standard executor).
TEST(CudaJit, ReluEpiloguesKeepANanProductAsKilnsReluDoes) {
  KILN_REQUIRE_GPU();
  const Tf32Setting restored_at_the_end(config::allow_tf32.load());
  auto relu_product = [](Tensor x, Tensor w) { return nn::relu(matmul(x, w)); };
  auto dense = [](Tensor x, Tensor w, Tensor b) { return nn::relu(matmul(x, w) + b); };
  constexpr std::int64_t nan_row = 5;
  for (const auto& [m, k, n] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{64, 32, 48}, {1024, 1024, 1024}}) {
    std::string size = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    std::vector<float> values = random_tensor(DType::f32, {m, k}, 41).to_vector<float>();
    for (std::int64_t column = 0; column < k; ++column) values[nan_row * k + column] = std::nanf("");
    Tensor x = from_vector(values, {m, k}), w = random_tensor(DType::f32, {k, n}, 42);
    Tensor b = random_tensor(DType::f32, {n}, 43);

    config::allow_tf32 = false;
    EXPECT_EQ(expect_gpu_agreement("relu(x @ w), a NaN row, " + size, relu_product, x, w).kernels_per_call, 1);
    EXPECT_EQ(expect_gpu_agreement("relu(x @ w + b), a NaN row, " + size, dense, x, w, b).kernels_per_call, 1);

    // TF32: the standard executor and the JIT round the same inputs to 10-bit
    // mantissas but may sum in different orders; 2e-3 k bounds the difference
    // on normal(0, 1) operands (sum |x w| is about 0.64 k).
    config::allow_tf32 = true;
    auto jit = function(dense, {.jit_compile = true, .on_compile_failure = Fallback::none});
    const std::vector<float> standard = function(dense)(x.to(gpu), w.to(gpu), b.to(gpu)).to_vector<float>();
    const std::vector<float> fused = jit(x.to(gpu), w.to(gpu), b.to(gpu)).to_vector<float>();
    EXPECT_EQ(jit.statistics().kernels_per_call, 1) << size;
    std::size_t mismatches = 0;
    for (std::int64_t row = 0; row < m; ++row)
      for (std::int64_t column = 0; column < n; ++column) {
        const auto index = static_cast<std::size_t>(row * n + column);
        const bool agree = row == nan_row ? std::isnan(fused[index]) && std::isnan(standard[index])
                                          : std::fabs(fused[index] - standard[index]) <= 2e-3 * static_cast<double>(k);
        if (!agree && ++mismatches <= 5)
          ADD_FAILURE() << "TF32 relu(x @ w + b) " << size << " at [" << row << ", " << column << "]: JIT "
                        << fused[index] << ", standard " << standard[index];
      }
    EXPECT_EQ(mismatches, 0u) << size;
  }
}

// A consumer that moves the product's elements (a transpose of a square
// product, a slice reversing its rows) is not part of the epilogue.
TEST(CudaJit, TransposedOrReversedSquareProduct) {
  KILN_REQUIRE_GPU();
  const Tf32Setting full_f32(false);  // the reference's tolerance is fp32's
  auto body = [](Tensor x, Tensor w, Tensor c) {
    Tensor product = matmul(x, w);
    return std::vector<Tensor>{transpose(product) + c, slice(product, {.start = {255, 0}, .step = {-1, 1}}) * c};
  };
  expect_gpu_agreement("moved product", body, random_tensor(DType::f32, {256, 64}, 36),
                       random_tensor(DType::f32, {64, 256}, 37), random_tensor(DType::f32, {256, 256}, 38));
}

TEST(CudaJit, RankZeroAndZeroSizeInsideFusedKernels) {
  KILN_REQUIRE_GPU();
  Tensor scalar = random_tensor(DType::f32, {}, 29), empty = random_tensor(DType::f32, {0, 3}, 30);
  Tensor row = random_tensor(DType::f32, {3}, 31);
  auto body = [](Tensor s, Tensor e, Tensor r) {
    return std::vector<Tensor>{sin(s) * s + 1, exp(e) + r, nn::softmax(e), reduce_sum(s)};
  };
  expect_gpu_agreement("rank 0 and empty", body, scalar, empty, row);
}

// Attention is one generated kernel on the GPU (codegen/cuda/attention_kernel.cpp), masked or not, with batch axes
// and odd sizes; its values agree with the standard executor's cuBLAS, row kernel, cuBLAS (TF32 off, within the
// reference's fp32 tolerance) and the float64 reference; the `fused` stage says why.
Tensor scaled_dot_product(Tensor q, Tensor k, Tensor v) {
  return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.2), v);
}

// The `fused` stage of `body` compiled for the GPU.
template <class Body, class... Inputs> std::string fused_on_gpu(Body body, const Inputs&... inputs) {
  return function(body, {.jit_compile = true, .on_compile_failure = Fallback::none})
      .get_compiler_ir(Stage::fused, inputs.to(gpu)...);
}

TEST(CudaJit, AttentionIsOneKernel) {
  KILN_REQUIRE_GPU();
  const Tf32Setting full_f32(false);
  Tensor q = random_tensor(DType::f32, {2, 3, 37, 24}, 40), k = random_tensor(DType::f32, {2, 3, 53, 24}, 41);
  Tensor v = random_tensor(DType::f32, {2, 3, 53, 20}, 42), mask = random_tensor(DType::f32, {37, 53}, 43);
  auto masked = [](Tensor q, Tensor k, Tensor v, Tensor mask) {
    return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.2 + mask * 3), v);
  };
  EXPECT_EQ(expect_gpu_agreement("attention", scaled_dot_product, q, k, v).kernels_per_call, 1);
  EXPECT_EQ(expect_gpu_agreement("masked attention", masked, q, k, v, mask).kernels_per_call, 1);
  const std::string fused = fused_on_gpu(masked, q, k, v, mask);
  EXPECT_NE(fused.find("(attention over [2,3,37,53],"), std::string::npos) << fused;
  EXPECT_NE(fused.find("never written to memory"), std::string::npos) << fused;
  EXPECT_NE(fused.find("on CUDA: each attention kernel computes both products itself"), std::string::npos) << fused;
  EXPECT_EQ(fused.find("on CUDA: cuBLAS"), std::string::npos) << fused;  // no gemm kernel is left
  // Keys and values shared by every batch item; rows of 1500 keys, a block's each.
  EXPECT_EQ(expect_gpu_agreement("shared keys and values", scaled_dot_product,
                                 random_tensor(DType::f32, {4, 37, 24}, 44), random_tensor(DType::f32, {53, 24}, 45),
                                 random_tensor(DType::f32, {53, 20}, 46))
                .kernels_per_call,
            1);
  EXPECT_EQ(expect_gpu_agreement("long rows", scaled_dot_product, random_tensor(DType::f32, {2, 5, 16}, 47),
                                 random_tensor(DType::f32, {2, 1500, 16}, 48), random_tensor(DType::f32, {2, 1500, 40}, 49))
                .kernels_per_call,
            1);
}

// While TF32 is allowed (the default), a softmax attention runs as its flash-style variant on the tensor cores
// (codegen/cuda/flash_attention_kernel.cpp): within TF32's error of the CPU's f32 result, and not equal to it (the
// products are TF32's); the same compiled function runs the exact kernel once TF32 is off.
TEST(CudaJit, AttentionOnTheTensorCoresWhileTf32IsAllowed) {
  KILN_REQUIRE_GPU();
  auto relative_difference = [](const Tensor& result, const Tensor& expected) {
    const std::vector<float> got = result.to_vector<float>(), want = expected.to_vector<float>();
    double largest = 0, difference = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      largest = std::max(largest, std::abs(double(want[i])));
      difference = std::max(difference, std::abs(double(got[i]) - double(want[i])));
    }
    return difference / largest;
  };
  auto causal = [](Tensor q, Tensor k, Tensor v) {
    const std::int64_t queries = q.dim(-2), keys = k.dim(-2);
    Tensor rows = reshape(arange(queries), {queries, 1}), columns = reshape(arange(keys), {1, keys});
    return matmul(nn::softmax(where(columns <= rows, matmul(q, k, {.transpose_b = true}) * 0.125, -1e9)), v);
  };
  Tensor q = random_tensor(DType::f32, {2, 3, 150, 64}, 53), k = random_tensor(DType::f32, {2, 3, 300, 64}, 54);
  Tensor v = random_tensor(DType::f32, {2, 3, 300, 64}, 55);
  auto check = [&](const std::string& label, auto body) {
    auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "jit"});
    const Tensor expected = body(q, k, v);  // the CPU's standard executor, in f32
    {
      const Tf32Setting tf32(true);
      const double difference = relative_difference(jit(q.to(gpu), k.to(gpu), v.to(gpu)).to(Device::cpu()), expected);
      EXPECT_LE(difference, 1e-2) << label;
      EXPECT_GT(difference, 1e-6) << label << ": TF32 products should differ from f32's";
      EXPECT_EQ(jit.statistics().kernels_per_call, 1) << label;
    }
    const Tf32Setting full_f32(false);
    EXPECT_LE(relative_difference(jit(q.to(gpu), k.to(gpu), v.to(gpu)).to(Device::cpu()), expected), 1e-5) << label;
  };
  check("attention", scaled_dot_product);
  check("causal attention", causal);
}

// bf16 attention is one kernel too: its flash-style variant multiplies bf16 on the tensor cores whatever
// config::allow_tf32 says (bf16 products are exact in their f32 sums), and agrees with the standard executor on the
// GPU (cuBLASLt's bf16 GEMMs around the row kernel) and with the float64 reference within bf16's roundings; a depth of
// no multiple of 16 runs the exact kernel, which agrees as well.
TEST(CudaJit, Bf16AttentionIsOneKernelOnTheTensorCores) {
  KILN_REQUIRE_GPU();
  auto causal = [](Tensor q, Tensor k, Tensor v) {
    const std::int64_t queries = q.dim(-2), keys = k.dim(-2);
    Tensor rows = reshape(arange(queries), {queries, 1}), columns = reshape(arange(keys), {1, keys});
    return matmul(nn::softmax(where(columns <= rows, matmul(q, k, {.transpose_b = true}) * 0.125, -INFINITY)), v);
  };
  Tensor q = random_tensor(DType::bf16, {2, 3, 150, 64}, 56), k = random_tensor(DType::bf16, {2, 3, 300, 64}, 57);
  Tensor v = random_tensor(DType::bf16, {2, 3, 300, 40}, 58);
  for (bool tf32 : {false, true}) {
    const Tf32Setting setting(tf32);
    EXPECT_EQ(expect_gpu_agreement("bf16 attention", scaled_dot_product, q, k, v).kernels_per_call, 1);
    EXPECT_EQ(expect_gpu_agreement("causal bf16 attention", causal, q, k, v).kernels_per_call, 1);
  }
  EXPECT_EQ(expect_gpu_agreement(
                "bf16 attention of depth 24", scaled_dot_product, random_tensor(DType::bf16, {2, 37, 24}, 59),
                random_tensor(DType::bf16, {2, 53, 24}, 60), random_tensor(DType::bf16, {2, 53, 20}, 61))
                .kernels_per_call,
            1);
  const std::string fused = fused_on_gpu(scaled_dot_product, q, k, v);
  EXPECT_NE(fused.find("(attention over [2,3,150,300],"), std::string::npos) << fused;
  EXPECT_NE(fused.find("of bf16 ones always"), std::string::npos) << fused;
}

// Scores that would take more than 32 KiB of shared memory per block (8200 keys, one block's row) stay three
// kernels -- cuBLAS, the row kernel, cuBLAS -- and the `fused` stage says why.
TEST(CudaJit, AttentionBeyondSharedMemoryStaysThreeKernels) {
  KILN_REQUIRE_GPU();
  const Tf32Setting full_f32(false);
  Tensor q = random_tensor(DType::f32, {2, 4, 16}, 50), k = random_tensor(DType::f32, {2, 8200, 16}, 51);
  Tensor v = random_tensor(DType::f32, {2, 8200, 8}, 52);
  EXPECT_EQ(expect_gpu_agreement("8200 keys", scaled_dot_product, q, k, v).kernels_per_call, 3);
  const std::string fused = fused_on_gpu(scaled_dot_product, q, k, v);
  EXPECT_NE(fused.find("not fused into an attention kernel"), std::string::npos) << fused;
  EXPECT_NE(fused.find("its shared memory per block would exceed 32 KiB (32800 bytes for 8200 keys)"),
            std::string::npos)
      << fused;
  EXPECT_EQ(fused.find("(attention over"), std::string::npos) << fused;
}

TEST(CudaJit, SourceStageShowsTheCudaModule) {
  KILN_REQUIRE_GPU();
  auto jit =
      function([](Tensor x) { return nn::softmax(x); }, {.jit_compile = true, .on_compile_failure = Fallback::none});
  Tensor x = random_tensor(DType::f32, {8, 100}, 32).to(gpu);
  std::string source = jit.get_compiler_ir(Stage::source, x);
  EXPECT_NE(source.find("extern \"C\" __global__ void"), std::string::npos) << source;
  EXPECT_NE(source.find("warp_reduce"), std::string::npos);
}

}  // namespace
}  // namespace kiln
