// Generated CUDA kernels run without a GPU (tools/kiln-fuzz/cuda_emulation.h:
// the module compiled by the host C++ compiler, CUDA's built-ins emulated,
// each block's threads on host threads): the generated index math
// (broadcasts, transposes, slices, rows and packs of the `_vector` variants),
// the row and grid reductions, the gemm epilogue (the product computed by the
// CPU kernel) and the op semantics of the NVRTC prelude, against the standard
// executor and the float64 reference, on chosen graphs. kiln-fuzz
// --cuda-emulation does the same on random ones; jit_gpu_test.cpp runs the
// kernels on a GPU.

#include "cuda/cuda_test_support.h"
#include "cuda_emulation.h"
#include "support/differential.h"
#include "support/special_values.h"

#include "api/tensor_impl.h"
#include "ir/parser.h"
#include "runtime/buffer.h"

#include <kiln/nn.h>

#include <array>
#include <cmath>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::random_tensor;

// Runs `body`'s CUDA module on the host -- the scalar kernels, or the
// `_vector` variants where there are -- and compares the results with the
// standard executor and the float64 reference. Grids that may be any size
// are cut to 3 blocks, so that grid-stride loops wrap.
template <class Body, class... Inputs>
void expect_emulated_agreement(const std::string& label, bool vector, Body body, const Inputs&... inputs) {
  std::string traced = function(body).get_compiler_ir(Stage::traced, inputs...);
  fuzz::EmulatedCudaModule module(ir::parse(traced));
  if (vector) {
    EXPECT_TRUE(module.has_vector_variants()) << label << ": no kernel has a vector variant";
  }
  std::vector<Tensor> arguments = {inputs...};
  std::vector<runtime::Array> values;
  for (const Tensor& argument : arguments) values.push_back(argument.impl().array);
  std::vector<Tensor> emulated;
  for (const runtime::Array& output : module.run(values, vector)) emulated.push_back(detail::make_tensor(output));
  testing::check_outputs(label, traced, arguments, testing::flatten_result(function(body)(inputs...)), emulated);
}

std::tuple<Tensor, Tensor, Tensor> adam_step(Tensor parameter, Tensor gradient, Tensor m, Tensor v) {
  Tensor new_m = 0.9 * m + 0.1 * gradient;
  Tensor new_v = 0.999 * v + 0.001 * (gradient * gradient);
  Tensor step = (new_m / 0.65) / (sqrt(new_v / 0.01) + 1e-8);
  return {parameter - 1e-3 * step, new_m, new_v};
}

TEST(CudaEmulatedKernels, EveryElementwiseOpOnEveryDtype) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    auto body = [dtype](Tensor a, Tensor b, Tensor p) {
      std::vector<Tensor> outputs = {neg(a),
                                     abs(a),
                                     sign(a),
                                     square(a),
                                     relu(a),
                                     floor(a),
                                     ceil(a),
                                     round(a),
                                     a + b,
                                     a - b,
                                     a * b,
                                     maximum(a, b),
                                     minimum(a, b),
                                     where(p, a, b),
                                     a<b, a <= b, a>
                                         b,
                                     a >= b,
                                     eq(a, b),
                                     ne(a, b),
                                     pow(abs(a), minimum(abs(b), cast(full({}, 3), b.dtype()))),
                                     floor_divide(a, b),
                                     a % b,
                                     fmod(a, b)};
      if (is_floating(dtype))
        for (Tensor y : {sin(a), cos(a), exp(a), log(abs(a) + 0.1), tanh(a), sqrt(abs(a)), rsqrt(abs(a) + 0.1),
                         sigmoid(a), erf(a), erfc(a), log1p(abs(a)), expm1(a), atan(a), a / b, copysign(a, b)})
          outputs.push_back(y);
      for (DType to : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64})
        outputs.push_back(cast(a * 1000, to));
      if (!is_floating(dtype))
        for (Tensor y : {a & b, a | b, a ^ b, ~a, (a * 1000) << b, (a * 1000) >> b}) outputs.push_back(y);
      for (Tensor y : {p & p, p | (a > b), p ^ (a < b), ~p}) outputs.push_back(y);
      outputs.push_back(logical_and(p, logical_not(p)));
      outputs.push_back(logical_or(p, a > b));
      return outputs;
    };
    for (bool vector : {false, true})
      expect_emulated_agreement("ops " + std::string(to_string(dtype)) + (vector ? " vector" : ""), vector, body,
                                random_tensor(dtype, {3, 16}, 50), random_tensor(dtype, {16}, 51),
                                random_tensor(DType::boolean, {3, 16}, 52));
  }
}

// relu(-0) is +0, which 1 / relu(x) shows (found by kiln-fuzz).
TEST(CudaEmulatedKernels, ReluOfSignedZeros) {
  std::vector<float> values = {-0.0f, 0.0f, -1.5f, 2.5f, NAN, -INFINITY, INFINITY, -0.0f};
  auto body = [](Tensor x) { return std::vector<Tensor>{relu(x), 1.0 / relu(x)}; };
  for (bool vector : {false, true})
    expect_emulated_agreement(std::string("relu of signed zeros") + (vector ? " vector" : ""), vector, body,
                              from_vector(values, {8}));
}

// A sum or mean of one element (an axis of size 1) is that element: -0 stays -0.
TEST(CudaEmulatedKernels, ReductionsOfOneElementKeepTheSignOfZero) {
  expect_emulated_agreement(
      "one-element sums", false,
      [](Tensor x) {
        return std::vector<Tensor>{1.0 / reduce_sum(x, {1}), 1.0 / reduce_mean(x, {1})};
      },
      from_vector(std::vector<float>{-0.0f, 0.0f, -0.0f, -0.0f}, {4, 1}));
  // Its outer reduction becomes a reshape to a scalar of the inner one's only row (found by kiln-fuzz: the
  // generator refused an output of another shape than the rows').
  expect_emulated_agreement(
      "a single row's result as a scalar", false,
      [](Tensor x) {
        return std::vector<Tensor>{reduce_max(reduce_max(x > 0, {1}), {0}), reduce_sum(reduce_sum(x, {1}), {0})};
      },
      random_tensor(DType::f32, {1, 7}, 103));
}

// The prelude's ops on every pair of special values, zero signs included.
TEST(CudaEmulatedKernels, SpecialValuesAndTheSignsOfZeros) {
  for (DType dtype : {DType::f32, DType::f64}) {
    auto [a, b] = testing::special_value_pairs(dtype);
    expect_emulated_agreement("special values " + std::string(to_string(dtype)), false, testing::special_value_ops, a,
                              b);
  }
}

TEST(CudaEmulatedKernels, BroadcastsTransposesSlicesAndOddShapes) {
  Tensor a = random_tensor(DType::f32, {6, 9}, 53), b = random_tensor(DType::f32, {9, 6}, 54);
  expect_emulated_agreement(
      "transpose", false, [](Tensor a, Tensor b) { return exp(transpose(a)) - b; }, a, b);
  expect_emulated_agreement(
      "slice", false,
      [](Tensor a) {
        return slice(a, {.start = {1, 0}, .stop = {5, 9}, .step = {2, 3}}) * 2;
      },
      a);
  expect_emulated_agreement(
      "broadcast", false, [](Tensor x, Tensor y) { return x * y + 1.0; }, random_tensor(DType::f32, {3, 1, 5}, 55),
      random_tensor(DType::f32, {4, 5}, 56));
  expect_emulated_agreement(
      "broadcast rows vector", true, [](Tensor x, Tensor y) { return x * y + 1.0; },
      random_tensor(DType::f32, {3, 1, 8}, 57), random_tensor(DType::f32, {4, 8}, 58));
  expect_emulated_agreement(
      "scalar", false, [](Tensor x) { return sin(x) * 2.0; }, random_tensor(DType::f32, {}, 59));
  expect_emulated_agreement(
      "empty", false, [](Tensor x) { return exp(x); }, random_tensor(DType::f32, {0, 4}, 60));
  expect_emulated_agreement(
      "odd length", false, [](Tensor x) { return nn::sigmoid(x); }, random_tensor(DType::f32, {1001}, 61));
  expect_emulated_agreement(
      "special constants", false,
      [](Tensor x) { return maximum(x, -INFINITY) + minimum(x, INFINITY) + where(x > 0, x, NAN); },
      random_tensor(DType::f32, {7}, 62));
}

TEST(CudaEmulatedKernels, GeluAndAdamVectorized) {
  for (bool vector : {false, true}) {
    expect_emulated_agreement(
        std::string("gelu") + (vector ? " vector" : ""), vector, [](Tensor x) { return nn::gelu(x); },
        random_tensor(DType::f32, {4096}, 63));
    Tensor p = random_tensor(DType::f32, {1000}, 64), g = random_tensor(DType::f32, {1000}, 65);
    Tensor m = random_tensor(DType::f32, {1000}, 66), v = abs(random_tensor(DType::f32, {1000}, 67));
    expect_emulated_agreement(std::string("adam") + (vector ? " vector" : ""), vector, adam_step, p, g, m, v);
  }
}

Tensor seed_function(Tensor x, Tensor y) {
  Tensor z = matmul(x, y);
  z = z + sin(z);
  z = nn::relu(z);
  return reduce_sum(z);
}

TEST(CudaEmulatedKernels, RowReductionsByWarpAndByBlock) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (const Shape& shape : {Shape({5, 7}), Shape({19, 1024}), Shape({3, 1025}), Shape({0, 5}), Shape({6, 0})}) {
      auto body = [](Tensor x) {
        return std::vector<Tensor>{reduce_sum(x, {-1}), reduce_max(x, {-1}), reduce_min(x, {-1}),
                                   reduce_sum(x * x, {-1}, true)};
      };
      expect_emulated_agreement("reductions " + std::string(to_string(dtype)) + shape.to_string(), false, body,
                                random_tensor(dtype, shape, 70));
    }
  expect_emulated_agreement(
      "mean and prod", false,
      [](Tensor x) {
        return std::vector<Tensor>{reduce_mean(x, {-1}), reduce_prod(x, {-1})};
      },
      testing::random_uniform(DType::f64, {9, 31}, 0.5, 1.5, 71));
  expect_emulated_agreement(
      "reduction of a transpose", false,
      [](Tensor x) {
        return reduce_max(transpose(x, {0, 2, 1}), {1, 2});
      },
      random_tensor(DType::f32, {5, 6, 7}, 72));
}

// Padding read in place (compiler/fusion.h: padding read in place): pools and a depthwise convolution with SAME
// padding, the padding on row axes and (one channel) along the inner loop, a padded last axis read strided and
// reversed, a padded axis merged with the axes after it, and a transposed padded value; no pack variant reads padding.
TEST(CudaEmulatedKernels, PaddingReadInPlace) {
  const nn::Pool2dOptions pool{
      .window = {3, 3}, .strides = std::array<std::int64_t, 2>{2, 2}, .padding = nn::Padding::same};
  for (const Shape& shape : {Shape({2, 9, 11, 5}), Shape({2, 7, 10, 1})}) {
    const Tensor images = random_tensor(DType::f32, shape, 74);
    const Tensor filters = random_tensor(DType::f32, {3, 3, 1, shape[3]}, 75);
    auto body = [pool](Tensor x, Tensor w) {
      return std::vector<Tensor>{nn::max_pool2d(x, pool), nn::avg_pool2d(x, pool),
                                 nn::conv2d(x, w, {.padding = nn::Padding::same})};
    };
    expect_emulated_agreement("pools and depthwise " + shape.to_string(), false, body, images, filters);
  }
  auto rows = [](Tensor x) {
    const Tensor padded = pad(x, {{2, 1}, {3, 4}}, 2.5f);
    const std::int64_t width = padded.shape()[1];
    return std::vector<Tensor>{exp(padded) * 0.5f, slice(padded, {{0, 1}, {padded.shape()[0], width}, {1, 2}}) + 1.0f,
                               slice(padded, {{0, width - 1}, {padded.shape()[0], -width - 1}, {1, -1}}) - padded};
  };
  expect_emulated_agreement("a padded last axis", false, rows, random_tensor(DType::f32, {5, 13}, 76));
  auto merged = [](Tensor x, Tensor y) { return pad(x, {{0, 0}, {2, 1}, {0, 0}}, -3.0f) * 2.0f + y; };
  expect_emulated_agreement("merged with the axes after it", false, merged, random_tensor(DType::f32, {3, 5, 8}, 77),
                            random_tensor(DType::f32, {3, 8, 8}, 78));
  auto transposed = [](Tensor x, Tensor y) { return transpose(pad(x, {{1, 2}, {0, 0}}, -1.0f)) * y; };
  expect_emulated_agreement("transposed", false, transposed, random_tensor(DType::f32, {6, 5}, 79),
                            random_tensor(DType::f32, {5, 9}, 80));
}

// A row value broadcast along its row and returned is stored at every element, by rows and over the whole array
// (not a grid reduction then: every element is an output).
TEST(CudaEmulatedKernels, ARowValueBroadcastAlongTheRow) {
  for (const Shape& shape : {Shape({3, 5}), Shape({4, 1500}), Shape({2})}) {
    auto body = [](Tensor x) {
      const std::int64_t axis = x.shape().rank() - 1;
      return std::vector<Tensor>{broadcast_to(reduce_max(x, {axis}, true), x.shape()), reduce_sum(x, {axis})};
    };
    expect_emulated_agreement("row values broadcast " + shape.to_string(), false, body,
                              random_tensor(DType::f32, shape, 73));
  }
}

// any and all (reduce_max and reduce_min of bools) by warp, by block, over
// the whole array (a grid reduction) and over columns; empty rows give
// false and true. The rows of x > 0.9 are mostly all false, of x > -0.9
// mostly all true, so both answers occur.
TEST(CudaEmulatedKernels, BooleanReductions) {
  auto body = [](Tensor x) {
    Tensor rare = x > 0.9, common = x > -0.9;
    return std::vector<Tensor>{reduce_max(rare, {-1}), reduce_min(common, {-1}),
                               reduce_max(rare),       reduce_min(common),
                               reduce_max(rare, {0}),  logical_and(rare, reduce_min(common, {-1}, true))};
  };
  for (const Shape& shape : {Shape({9, 7}), Shape({3, 2000}), Shape({0, 5}), Shape({4, 0})})
    expect_emulated_agreement("bool " + shape.to_string(), false, body, random_tensor(DType::f32, shape, 86));
  expect_emulated_agreement("bool vector", true, body, random_tensor(DType::f32, {3, 2000}, 87));
}

TEST(CudaEmulatedKernels, RowReductionsVectorized) {
  auto body = [](Tensor x) {
    return std::vector<Tensor>{reduce_sum(x, {-1}), reduce_max(x, {-1}), x - reduce_mean(x, {-1}, true)};
  };
  expect_emulated_agreement("vector f32[19,1024]", true, body, random_tensor(DType::f32, {19, 1024}, 81));
  expect_emulated_agreement("vector f64[3,1026]", true, body, random_tensor(DType::f64, {3, 1026}, 82));
  expect_emulated_agreement(
      "vector softmax f32[7,32]", true, [](Tensor x) { return nn::softmax(x); },
      random_tensor(DType::f32, {7, 32}, 83));
  Tensor x = random_tensor(DType::f32, {2, 3000}, 84), gamma = random_tensor(DType::f32, {3000}, 85);
  expect_emulated_agreement(
      "vector layer_norm f32[2,3000]", true, [](Tensor x, Tensor gamma) { return nn::layer_norm(x, gamma, gamma); }, x,
      gamma);
}

TEST(CudaEmulatedKernels, SoftmaxLayerNormAndComposites) {
  for (const Shape& shape : {Shape({7, 33}), Shape({4, 1}), Shape({2, 3, 16}), Shape({2, 3000}), Shape({65, 3})}) {
    Tensor x = random_tensor(DType::f32, shape, 73);
    Tensor gamma = random_tensor(DType::f32, {shape[shape.rank() - 1]}, 74);
    Tensor beta = random_tensor(DType::f32, {shape[shape.rank() - 1]}, 75);
    auto body = [](Tensor x, Tensor gamma, Tensor beta) {
      return std::vector<Tensor>{nn::softmax(x), nn::log_softmax(x), nn::layer_norm(x, gamma, beta), nn::softmax(x, 0)};
    };
    expect_emulated_agreement("nn " + shape.to_string(), false, body, x, gamma, beta);
  }
}

// Short rows keep this thread's elements of x in registers across the passes
// (unrolled loops over a constant number of steps): rows that split evenly
// over the threads and rows whose last step is partial, by block (512
// threads) and by warp, scalar and `_vector`, rank 3, no rows, more inputs
// than the register budget holds, middle loops, and a long row that keeps
// the strided loop.
TEST(CudaEmulatedKernels, ShortRowsInRegisters) {
  auto nn_body = [](Tensor x, Tensor gamma, Tensor beta) {
    return std::vector<Tensor>{nn::softmax(x), nn::layer_norm(x, gamma, beta)};
  };
  struct Case {
    Shape shape;
    bool vector;
  };
  for (const Case& row :
       {Case{{3, 8192}, true}, Case{{3, 8192}, false}, Case{{5, 3000}, false}, Case{{5, 3000}, true},
        Case{{4, 1025}, false}, Case{{9, 1024}, true}, Case{{9, 1024}, false}, Case{{9, 33}, false},
        Case{{2, 3, 1000}, true}, Case{{2, 3, 1000}, false}, Case{{0, 8192}, false}, Case{{0, 33}, false}}) {
    std::int64_t columns = row.shape[row.shape.rank() - 1];
    Tensor x = random_tensor(DType::f32, row.shape, 90);
    Tensor gamma = random_tensor(DType::f32, {columns}, 91), beta = random_tensor(DType::f32, {columns}, 92);
    expect_emulated_agreement("registers " + row.shape.to_string() + (row.vector ? " vector" : ""), row.vector, nn_body,
                              x, gamma, beta);
  }
  auto log_softmax_and_sum = [](Tensor x) { return std::vector<Tensor>{nn::log_softmax(x), reduce_sum(x, {-1})}; };
  expect_emulated_agreement("registers f64[3,2000]", false, log_softmax_and_sum,
                            random_tensor(DType::f64, {3, 2000}, 93));
  // Three inputs that each pass reads: two fit the 128 bytes per thread, the third is read per pass.
  for (bool vector : {false, true})
    expect_emulated_agreement(
        std::string("registers over budget") + (vector ? " vector" : ""), vector,
        [](Tensor x, Tensor y, Tensor z) { return nn::softmax(x * y + z); }, random_tensor(DType::f32, {2, 8192}, 94),
        random_tensor(DType::f32, {2, 8192}, 95), random_tensor(DType::f32, {2, 8192}, 96));
  // Rows over two axes, the inner one not contiguous: middle loops.
  expect_emulated_agreement(
      "registers with middle loops", false,
      [](Tensor x) {
        Tensor t = transpose(x, {0, 2, 1});
        Tensor e = exp(t - reduce_max(t, {1, 2}, true));
        return e / reduce_sum(e, {1, 2}, true);
      },
      random_tensor(DType::f32, {3, 40, 30}, 97));
  auto softmax = [](Tensor x) { return nn::softmax(x); };
  expect_emulated_agreement("long rows stay strided", true, softmax, random_tensor(DType::f32, {2, 20000}, 98));
  // cos(erf(x)), read by both passes: the cos is kept, the erf is not.
  for (bool vector : {false, true})
    expect_emulated_agreement(
        std::string("kept chain") + (vector ? " vector" : ""), vector,
        [](Tensor x) {
          Tensor c = cos(erf(x));
          return std::vector<Tensor>{reduce_min(c, {-1}, true), c};
        },
        random_tensor(DType::f32, {5, 40}, 106));
}

TEST(CudaEmulatedKernels, GridReductionsAndTheSeedEpilogue) {
  for (bool vector : {false, true}) {
    std::string variant = vector ? " vector" : "";
    expect_emulated_agreement(
        "full sum" + variant, vector,
        [](Tensor x) {
          return std::vector<Tensor>{reduce_sum(x * x), reduce_max(x)};
        },
        random_tensor(DType::f32, {300, 40}, 76));
    expect_emulated_agreement("seed" + variant, vector, seed_function, random_tensor(DType::f32, {64, 32}, 77),
                              random_tensor(DType::f32, {32, 48}, 78));
    expect_emulated_agreement(
        "product and mean" + variant, vector,
        [](Tensor x) {
          Tensor z = matmul(x, x);
          return std::vector<Tensor>{z, reduce_mean(nn::relu(z))};
        },
        random_tensor(DType::f32, {40, 40}, 79));
  }
  expect_emulated_agreement(
      "full i64 sum", false, [](Tensor x) { return reduce_sum(x); }, random_tensor(DType::i64, {1000}, 80));
}

// A whole-array reduction whose kernel returns a shape op of it (a reshape,
// a slice of its one element) stores into that output: the generator named
// the reduction's buffer instead, which does not exist (found by kiln-fuzz).
TEST(CudaEmulatedKernels, GridReductionsReturnedThroughShapeOps) {
  for (bool vector : {false, true}) {
    std::string variant = vector ? " vector" : "";
    expect_emulated_agreement(
        "reshaped sum" + variant, vector,
        [](Tensor x) {
          return reshape(reduce_sum(x), {1, 1});
        },
        random_tensor(DType::f32, {300, 40}, 99));
    expect_emulated_agreement(
        "sliced min" + variant, vector,
        [](Tensor x) {
          return slice(reduce_min(x, {0, 1}, true), {.start = {0, 0}, .step = {-3, 1}});
        },
        random_tensor(DType::f32, {30, 40}, 100));
    expect_emulated_agreement(
        "seed reshaped" + variant, vector, [](Tensor x, Tensor y) { return expand_dims(seed_function(x, y), 0); },
        random_tensor(DType::f32, {64, 32}, 101), random_tensor(DType::f32, {32, 48}, 102));
  }
}

// A transpose of a square product, or a slice reversing its rows, has the
// product's shape; in the epilogue it read the product element being
// computed instead of the moved one (found by kiln-fuzz, seed 62).
TEST(CudaEmulatedKernels, TransposedOrReversedSquareProductIsNotAnEpilogue) {
  auto body = [](Tensor x, Tensor w, Tensor c) {
    Tensor product = matmul(x, w);
    return std::vector<Tensor>{transpose(product) + c, slice(product, {.start = {47, 0}, .step = {-1, 1}}) * c};
  };
  expect_emulated_agreement("moved product", false, body, random_tensor(DType::f32, {48, 20}, 103),
                            random_tensor(DType::f32, {20, 48}, 104), random_tensor(DType::f32, {48, 48}, 105));
}

// A slice reversing a size-1 axis moves nothing and may be the epilogue; as
// an output it is the product's tile, not the product cuBLAS writes: the
// kernel must store it (it was left unwritten; kiln-fuzz, seed 2).
// A product compared with its own maximum: the comparison cannot be the
// epilogue of the product, whose maximum is known only after every block.
TEST(CudaEmulatedKernels, OneHotOfTheProductsMaximum) {
  auto body = [](Tensor x, Tensor w) {
    Tensor product = matmul(x, w);
    return cast(eq(product, reduce_max(product, {0, 1}, true)), DType::f32);
  };
  expect_emulated_agreement("one-hot of the maximum", false, body, random_tensor(DType::f32, {40, 9}, 109),
                            random_tensor(DType::f32, {9, 30}, 110));
}

TEST(CudaEmulatedKernels, ProductReturnedThroughASliceThatMovesNothing) {
  auto body = [](Tensor x, Tensor w) { return slice(matmul(x, w), {.start = {0, 0}, .step = {1, -1}}); };
  expect_emulated_agreement("unit reversal", false, body, random_tensor(DType::f32, {40, 9}, 107),
                            random_tensor(DType::f32, {9, 1}, 108));
}

// Attention as one kernel (codegen/cuda/attention_kernel.cpp): the scores in shared memory, the row kernel's code
// between the products, by warp (rows of up to 1024 keys) and by block; odd sizes, batch axes whole or absent,
// transposed operands, a mask, zero sizes. Grids cut to 3 blocks, so a block walks several strips of rows.
Tensor scaled_dot_product(Tensor q, Tensor k, Tensor v) {
  return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.2), v);
}

// expect_emulated_agreement, for a function whose CUDA module must be one attention kernel.
template <class Body, class... Inputs>
void expect_attention_agreement(const std::string& label, Body body, const Inputs&... inputs) {
  const std::string source =
      fuzz::generated_cuda_source(ir::parse(function(body).get_compiler_ir(Stage::traced, inputs...)));
  EXPECT_NE(source.find("// ==== kernel 0: attention over"), std::string::npos) << label << "\n" << source;
  EXPECT_EQ(source.find("// ==== kernel 1"), std::string::npos) << label << "\n" << source;
  expect_emulated_agreement(label, false, body, inputs...);
}

TEST(CudaEmulatedKernels, AttentionIsOneKernel) {
  Tensor q = random_tensor(DType::f32, {2, 3, 37, 24}, 120), k = random_tensor(DType::f32, {2, 3, 53, 24}, 121);
  Tensor v = random_tensor(DType::f32, {2, 3, 53, 20}, 122), mask = random_tensor(DType::f32, {37, 53}, 123);
  expect_attention_agreement("attention", scaled_dot_product, q, k, v);
  expect_attention_agreement(
      "masked attention",
      [](Tensor q, Tensor k, Tensor v, Tensor mask) {
        return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.2 + mask * 3), v);
      },
      q, k, v, mask);
  expect_attention_agreement(
      "layer norm between",
      [](Tensor q, Tensor k, Tensor v) { return matmul(nn::layer_norm(matmul(q, k, {.transpose_b = true})), v); }, q, k,
      v);
  // Stored as Q^T, K^T and V^T; and keys and values shared by every batch item.
  expect_attention_agreement(
      "transposed operands",
      [](Tensor q_t, Tensor k_t, Tensor v_t) {
        return matmul(nn::softmax(matmul(q_t, k_t, {.transpose_a = true}) * 0.2), v_t, {.transpose_b = true});
      },
      random_tensor(DType::f32, {3, 24, 37}, 124), random_tensor(DType::f32, {3, 24, 53}, 125),
      random_tensor(DType::f32, {3, 20, 53}, 126));
  expect_attention_agreement("shared keys and values", scaled_dot_product, random_tensor(DType::f32, {4, 37, 24}, 127),
                             random_tensor(DType::f32, {53, 24}, 128), random_tensor(DType::f32, {53, 20}, 129));
  expect_attention_agreement("one query", scaled_dot_product, random_tensor(DType::f32, {3, 1, 24}, 130),
                             random_tensor(DType::f32, {3, 53, 24}, 131), random_tensor(DType::f32, {3, 53, 20}, 132));
  // 1500 keys: a block of 512 threads per row, three keys per thread.
  expect_attention_agreement("long rows", scaled_dot_product, random_tensor(DType::f32, {2, 5, 16}, 133),
                             random_tensor(DType::f32, {2, 1500, 16}, 134),
                             random_tensor(DType::f32, {2, 1500, 40}, 135));
}

TEST(CudaEmulatedKernels, AttentionOfZeroSizes) {
  struct Sizes {
    std::int64_t m, n, k, d;
  };
  for (const Sizes& sizes : {Sizes{0, 9, 8, 6}, Sizes{5, 0, 8, 6}, Sizes{5, 9, 0, 6}, Sizes{5, 9, 8, 0}})
    expect_attention_agreement("m n k d = " + std::to_string(sizes.m) + " " + std::to_string(sizes.n) + " " +
                                   std::to_string(sizes.k) + " " + std::to_string(sizes.d),
                               scaled_dot_product, random_tensor(DType::f32, {2, sizes.m, sizes.k}, 136),
                               random_tensor(DType::f32, {2, sizes.n, sizes.k}, 137),
                               random_tensor(DType::f32, {2, sizes.n, sizes.d}, 138));
}

// Whether `body`'s CUDA module has a kernel with a variant on the tensor cores.
template <class Body, class... Inputs>
bool has_tensor_core_variant(Body body, const Inputs&... inputs) {
  return fuzz::EmulatedCudaModule(ir::parse(function(body).get_compiler_ir(Stage::traced, inputs...)))
      .has_tensor_core_variants();
}

// The module's output (run as the executable runs it with TF32 allowed) against the standard executor's: NaN
// exactly where it has NaN, elsewhere within `bound` times the output's largest finite magnitude.
template <class Body, class... Inputs>
void expect_near_standard(const std::string& label, double bound, Body body, const Inputs&... inputs) {
  const std::string traced = function(body).get_compiler_ir(Stage::traced, inputs...);
  fuzz::EmulatedCudaModule module(ir::parse(traced));
  std::vector<runtime::Array> values;
  for (const Tensor& argument : std::vector<Tensor>{inputs...}) values.push_back(argument.impl().array);
  const std::vector<float> result = detail::make_tensor(module.run(values, false, 3, true).front()).to_vector<float>();
  const Tensor standard = function(body)(inputs...);
  const std::vector<float> expected = standard.to_vector<float>();
  ASSERT_EQ(result.size(), expected.size()) << label;
  double largest = 0, error = 0;
  for (float value : expected)
    if (std::isfinite(value)) largest = std::max(largest, std::abs(double(value)));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(std::isnan(result[i]), std::isnan(expected[i]))
        << label << ": element " << i << " is " << result[i] << ", the standard executor's " << expected[i];
    if (!std::isnan(expected[i])) error = std::max(error, std::abs(double(result[i]) - double(expected[i])));
  }
  EXPECT_LE(error, bound * largest) << label << ": largest |output| " << largest;
  EXPECT_GT(largest, 0) << label;
}

// The flash-style TF32 variant of an attention kernel (codegen/cuda/flash_attention_kernel.cpp), run emulated as
// the executable runs it while config::allow_tf32 holds: the tensor cores' products (mma.sync, emulated lane by
// lane with the PTX layouts) of TF32-rounded operands, tiles of 64 or 32 keys with the softmax online. Against the
// standard executor in f32: TF32 keeps 11 of 24 bits, so within 1% of the output's largest magnitude (a wrong
// fragment layout or rescaling is off by the output's own size), with NaN exactly where the standard's is.
template <class Body, class... Inputs>
void expect_flash_attention(const std::string& label, Body body, const Inputs&... inputs) {
  ASSERT_TRUE(has_tensor_core_variant(body, inputs...))
      << label << "\n"
      << fuzz::generated_cuda_source(ir::parse(function(body).get_compiler_ir(Stage::traced, inputs...)));
  expect_near_standard(label, 1e-2, body, inputs...);
}

TEST(CudaEmulatedKernels, FlashAttentionOnTheTensorCores) {
  // 37 queries (a block's strip of 128 only partly full), 200 keys (4 tiles, the last partial), depth 24.
  Tensor q = random_tensor(DType::f32, {2, 3, 37, 24}, 140), k = random_tensor(DType::f32, {2, 3, 200, 24}, 141);
  Tensor v = random_tensor(DType::f32, {2, 3, 200, 16}, 142);
  expect_flash_attention("attention", scaled_dot_product, q, k, v);
  // A mask read per element, with one row masked whole (-inf: the standard's NaN row) and one mostly.
  std::vector<float> mask_values(37 * 200);
  for (std::size_t i = 0; i < mask_values.size(); ++i) mask_values[i] = float(std::sin(double(i))) * 2;
  for (int key = 0; key < 200; ++key) mask_values[5 * 200 + key] = -INFINITY;
  for (int key = 0; key < 190; ++key) mask_values[6 * 200 + key] = -INFINITY;
  expect_flash_attention(
      "masked attention",
      [](Tensor q, Tensor k, Tensor v, Tensor mask) {
        return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.2 + mask), v);
      },
      q, k, v, from_vector(mask_values, {37, 200}));
  // Causal, from iotas compared per element: the rows' first keys alone, then more.
  expect_flash_attention(
      "causal attention",
      [](Tensor q, Tensor k, Tensor v) {
        const std::int64_t queries = q.dim(-2), keys = k.dim(-2);
        Tensor rows = reshape(arange(queries), {queries, 1}), columns = reshape(arange(keys), {1, keys});
        return matmul(nn::softmax(where(columns <= rows, matmul(q, k, {.transpose_b = true}) * 0.2, -INFINITY)), v);
      },
      q, k, v);
  // Keys and values shared by every batch item; one query; the 32-key tiles of wide operands (depth + width >
  // 128); 130 queries (two strips of 128).
  expect_flash_attention("shared keys and values", scaled_dot_product, random_tensor(DType::f32, {4, 37, 8}, 143),
                         random_tensor(DType::f32, {70, 8}, 144), random_tensor(DType::f32, {70, 24}, 145));
  expect_flash_attention("one query", scaled_dot_product, random_tensor(DType::f32, {3, 1, 16}, 146),
                         random_tensor(DType::f32, {3, 9, 16}, 147), random_tensor(DType::f32, {3, 9, 8}, 148));
  expect_flash_attention("wide operands", scaled_dot_product, random_tensor(DType::f32, {1, 20, 64}, 149),
                         random_tensor(DType::f32, {1, 75, 64}, 150), random_tensor(DType::f32, {1, 75, 72}, 151));
  expect_flash_attention("two strips", scaled_dot_product, random_tensor(DType::f32, {1, 130, 8}, 152),
                         random_tensor(DType::f32, {1, 33, 8}, 153), random_tensor(DType::f32, {1, 33, 8}, 154));
  // A NaN score makes its row NaN, as the standard softmax does.
  std::vector<float> with_nan = random_tensor(DType::f32, {1, 9, 8}, 155).to_vector<float>();
  with_nan[3 * 8 + 2] = NAN;
  expect_flash_attention("a NaN query", scaled_dot_product, from_vector(with_nan, {1, 9, 8}),
                         random_tensor(DType::f32, {1, 40, 8}, 156), random_tensor(DType::f32, {1, 40, 8}, 157));
}

// Where the row code is no softmax, or an operand is stored transposed, or a depth is no multiple of 8, the module
// has the exact kernel alone.
TEST(CudaEmulatedKernels, FlashAttentionOnlyWhereItApplies) {
  Tensor q = random_tensor(DType::f32, {2, 37, 24}, 160), k = random_tensor(DType::f32, {2, 53, 24}, 161);
  Tensor v = random_tensor(DType::f32, {2, 53, 16}, 162);
  EXPECT_TRUE(has_tensor_core_variant(scaled_dot_product, q, k, v));
  EXPECT_FALSE(has_tensor_core_variant(
      [](Tensor q, Tensor k, Tensor v) { return matmul(nn::layer_norm(matmul(q, k, {.transpose_b = true})), v); }, q, k,
      v));
  EXPECT_FALSE(has_tensor_core_variant(
      [](Tensor q, Tensor k, Tensor v) {
        return matmul(nn::softmax(matmul(q, k, {.transpose_b = true})), v, {.transpose_b = true});
      },
      q, k, random_tensor(DType::f32, {2, 16, 53}, 163)));
  EXPECT_FALSE(has_tensor_core_variant(scaled_dot_product, random_tensor(DType::f32, {2, 37, 20}, 164),
                                       random_tensor(DType::f32, {2, 53, 20}, 165), v));
}

// Attention of bf16 tensors: one kernel too, its products' operands read widened and their f32 sums rounded to bf16
// once, as the standard executor's bf16 matmul rounds them. Where the row code is a softmax and the depth a
// multiple of 16, the flash-style variant multiplies bf16 on the tensor cores (mma.sync m16n8k16, emulated lane by
// lane) and the executable always runs it; elsewhere the exact kernel runs. Both against the standard executor and
// the float64 reference (rounding where the executors round), and the flash variant within 1% of the output's
// largest magnitude as for TF32 above.
Tensor bf16(const Shape& shape, std::uint64_t seed) { return random_tensor(DType::bf16, shape, seed); }

TEST(CudaEmulatedKernels, Bf16AttentionOnTheTensorCores) {
  // 37 queries, 200 keys (4 tiles of 64, the last partial), depth 32 (two mma steps), 24 output columns.
  Tensor q = bf16({2, 3, 37, 32}, 170), k = bf16({2, 3, 200, 32}, 171), v = bf16({2, 3, 200, 24}, 172);
  expect_flash_attention("bf16 attention", scaled_dot_product, q, k, v);
  expect_attention_agreement("bf16 attention", scaled_dot_product, q, k, v);
  // A bf16 mask with a row masked whole (NaN, as the standard softmax gives) and one mostly; a causal one.
  std::vector<float> mask_values(37 * 200);
  for (std::size_t i = 0; i < mask_values.size(); ++i) mask_values[i] = float(std::sin(double(i))) * 2;
  for (int key = 0; key < 200; ++key) mask_values[5 * 200 + key] = -INFINITY;
  for (int key = 0; key < 190; ++key) mask_values[6 * 200 + key] = -INFINITY;
  const Tensor mask = cast(from_vector(mask_values, {37, 200}), DType::bf16);
  auto masked = [](Tensor q, Tensor k, Tensor v, Tensor mask) {
    return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.2 + mask), v);
  };
  expect_flash_attention("masked bf16 attention", masked, q, k, v, mask);
  expect_attention_agreement("masked bf16 attention", masked, q, k, v, mask);
  auto causal = [](Tensor q, Tensor k, Tensor v) {
    const std::int64_t queries = q.dim(-2), keys = k.dim(-2);
    Tensor rows = reshape(arange(queries), {queries, 1}), columns = reshape(arange(keys), {1, keys});
    return matmul(nn::softmax(where(columns <= rows, matmul(q, k, {.transpose_b = true}) * 0.2, -INFINITY)), v);
  };
  expect_flash_attention("causal bf16 attention", causal, q, k, v);
  expect_attention_agreement("causal bf16 attention", causal, q, k, v);
  // Keys and values shared by the batch; one query; the widest operands (depth and width 128); 130 queries (two
  // strips of 128); depth 16 (one mma step).
  for (const auto& [label, queries, keys, values] :
       {std::tuple{"shared keys and values", bf16({4, 37, 16}, 173), bf16({70, 16}, 174), bf16({70, 24}, 175)},
        std::tuple{"one query", bf16({3, 1, 16}, 176), bf16({3, 9, 16}, 177), bf16({3, 9, 8}, 178)},
        std::tuple{"widest operands", bf16({1, 20, 128}, 179), bf16({1, 75, 128}, 180), bf16({1, 75, 128}, 181)},
        std::tuple{"two strips", bf16({1, 130, 16}, 182), bf16({1, 33, 16}, 183), bf16({1, 33, 8}, 184)}}) {
    expect_flash_attention(label, scaled_dot_product, queries, keys, values);
    expect_attention_agreement(label, scaled_dot_product, queries, keys, values);
  }
  // A NaN among the queries: its row NaN, as the standard executor's.
  std::vector<float> with_nan = bf16({1, 9, 16}, 185).to_vector<float>();
  with_nan[3 * 16 + 2] = NAN;
  const Tensor nan_queries = cast(from_vector(with_nan, {1, 9, 16}), DType::bf16);
  expect_flash_attention("a NaN query", scaled_dot_product, nan_queries, bf16({1, 40, 16}, 186), bf16({1, 40, 8}, 187));
}

TEST(CudaEmulatedKernels, Bf16AttentionWithoutTheTensorCores) {
  // The exact kernel alone: a depth of no multiple of 16, a layer norm between the products, V stored transposed;
  // and zero sizes.
  Tensor q = bf16({2, 37, 20}, 190), k = bf16({2, 53, 20}, 191), v = bf16({2, 53, 24}, 192);
  auto layer_norm_between = [](Tensor q, Tensor k, Tensor v) {
    return matmul(nn::layer_norm(matmul(q, k, {.transpose_b = true})), v);
  };
  auto transposed_values = [](Tensor q, Tensor k, Tensor v_t) {
    return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.2), v_t, {.transpose_b = true});
  };
  const Tensor q16 = bf16({2, 37, 16}, 193), k16 = bf16({2, 53, 16}, 194), v_t = bf16({2, 24, 53}, 195);
  EXPECT_FALSE(has_tensor_core_variant(scaled_dot_product, q, k, v));
  EXPECT_FALSE(has_tensor_core_variant(layer_norm_between, q16, k16, v));
  EXPECT_FALSE(has_tensor_core_variant(transposed_values, q16, k16, v_t));
  expect_attention_agreement("bf16 depth 20", scaled_dot_product, q, k, v);
  expect_attention_agreement("bf16 layer norm between", layer_norm_between, q16, k16, v);
  expect_attention_agreement("bf16 transposed values", transposed_values, q16, k16, v_t);
  // The standard executor's roundings in another order of summation: a bf16 rounding or two of the largest output
  // (the float64 reference's bf16 chain tolerance above is 2^-6 of each element's terms).
  expect_near_standard("bf16 depth 20", 0x1p-7, scaled_dot_product, q, k, v);
  expect_near_standard("bf16 layer norm between", 0x1p-7, layer_norm_between, q16, k16, v);
  expect_near_standard("bf16 transposed values", 0x1p-7, transposed_values, q16, k16, v_t);
  for (const auto& [m, n, depth, width] :
       {std::array<std::int64_t, 4>{0, 9, 16, 8}, {5, 0, 16, 8}, {5, 9, 0, 8}, {5, 9, 16, 0}})
    expect_attention_agreement("bf16 zero sizes", scaled_dot_product, bf16({2, m, depth}, 196),
                               bf16({2, n, depth}, 197), bf16({2, n, width}, 198));
}

// A compiled training step on the CUDA backend: value_and_grad of a relu MLP's softmax cross-entropy and the Adam
// update of its 4 parameters, one graph. Its backward kernels -- the products' epilogues with relu's mask and the
// updates, the loss's row kernel recomputing the exponentials, the column sums of the bias gradients -- are the
// forward's kinds, and run emulated here as the GPU would run them.
TEST(CudaEmulatedKernels, ATrainingStepOfAnMlp) {
  auto step = [](Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor labels, Tensor m, Tensor v) {
    auto loss = [](Tensor w1, Tensor b1, Tensor w2, Tensor b2, Tensor x, Tensor labels) {
      Tensor hidden = nn::relu(matmul(x, w1) + b1);
      return reduce_mean(nn::sparse_softmax_cross_entropy(matmul(hidden, w2) + b2, labels));
    };
    auto [value, gradients] = value_and_grad(loss, {.argnums = {0, 1, 2, 3}})(w1, b1, w2, b2, x, labels);
    std::vector<Tensor> results = {value};
    const std::vector<Tensor> parameters = {w1, b1, w2, b2};
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      // One pair of moments, broadcast to each parameter's shape, keeps the argument list short.
      auto [updated, new_m, new_v] = adam_step(parameters[i], gradients[i], broadcast_to(m, parameters[i].shape()),
                                               broadcast_to(v, parameters[i].shape()));
      results.insert(results.end(), {updated, new_m, new_v});
    }
    return results;
  };
  const Tensor labels = cast(floor(random::uniform({9}, {.seed = 145, .high = 5.0})), DType::i32);
  expect_emulated_agreement("MLP training step", false, step, random_tensor(DType::f32, {12, 16}, 140),
                            random_tensor(DType::f32, {16}, 141), random_tensor(DType::f32, {16, 5}, 142),
                            random_tensor(DType::f32, {5}, 143), random_tensor(DType::f32, {9, 12}, 144), labels,
                            random_tensor(DType::f32, {}, 146) * 0.01, abs(random_tensor(DType::f32, {}, 147)) * 0.01);
}

}  // namespace
}  // namespace kiln
