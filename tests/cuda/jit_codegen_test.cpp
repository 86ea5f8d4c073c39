// The CUDA code generator without a GPU: generated modules for the nn
// composites, the seed function and odd shapes compile with NVRTC for sm_90
// (NVRTC needs no GPU), with the kernels the fusion plan promises; broken
// CUDA gives a CompileError carrying NVRTC's log. These run everywhere kiln
// is built with CUDA; the GPU tests (jit_gpu_test.cpp) run the kernels.

#include "cuda/cuda_test_support.h"
#include "support/workloads.h"

#include "compiler/codegen/cuda/cuda_codegen.h"
#include "compiler/codegen/cuda/nvrtc_build.h"
#include "compiler/fusion.h"
#include "compiler/jit.h"
#include "compiler/pipeline.h"
#include "ir/parser.h"

#include <kiln/nn.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace kiln {
namespace {

using testing::random_tensor;

struct Generated {
  compiler::cuda::ModuleSource module;
  std::string fused;
};

// Traces `body` on CPU inputs, optimizes and fuses the graph as compile()
// does, and generates its CUDA module.
template <class Body, class... Inputs> Generated generate(Body body, const Inputs&... inputs) {
  std::string traced = function(body).get_compiler_ir(Stage::traced, inputs...);
  ir::Graph graph = ir::parse(traced);
  compiler::optimize(graph);
  compiler::FusionPlan plan = compiler::fuse(graph, compiler::capabilities(testing::gpu));
  return {compiler::cuda::generate_source(graph, plan), compiler::print_plan(graph, plan)};
}

// The generated kernels, without the prelude.
std::string kernels_of(const compiler::cuda::ModuleSource& module) {
  std::size_t first = module.text.find("// ==== kernel");
  return first == std::string::npos ? std::string() : module.text.substr(first);
}

// Generates and compiles for sm_90; returns the module. The module must
// compile without a warning: a user reads it (KILN_DUMP_TO), and a warning is
// noise there or a bug. KILN_TEST_DUMP_CUDA=dir writes each module to
// dir/<name>.cu to read.
template <class Body, class... Inputs>
compiler::cuda::ModuleSource compiles(const std::string& name, Body body, const Inputs&... inputs) {
  Generated generated = generate(body, inputs...);
  if (const char* directory = std::getenv("KILN_TEST_DUMP_CUDA")) {
    std::ofstream(std::string(directory) + "/" + name + ".cu") << generated.module.text;
  }
  try {
    std::string warnings = compiler::cuda::nvrtc_warnings(generated.module.text, "sm_90", name);
    EXPECT_EQ(warnings, "") << name << ": NVRTC warns about the generated CUDA\n" << kernels_of(generated.module);
  } catch (const CompileError& error) {
    ADD_FAILURE() << name << ": " << error.what() << "\n" << generated.module.text;
  }
  return generated.module;
}

std::size_t count(const std::string& text, const std::string& fragment) {
  std::size_t found = 0;
  for (std::size_t at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) ++found;
  return found;
}

using testing::adam_step;
using testing::seed_function;

TEST(CudaCodegen, GoldenLoopKernel) {
  auto module = compiles("golden", [](Tensor x, Tensor y) { return x * y + 1.0; }, random_tensor(DType::f32, {2, 3}, 40),
                         random_tensor(DType::f32, {3}, 41));
  EXPECT_EQ(kernels_of(module), R"cuda(// ==== kernel 0: loop over [2,3] ====
// %2 = f32[2,3] mul(%0, %1)
// %3 = f32[] constant(1.0)
// %4 = f32[2,3] add(%2, %3)
extern "C" __global__ void __launch_bounds__(256) kiln_kernel_0(const float* __restrict__ input0, const float* __restrict__ input1, float* __restrict__ output4) {
  for (int64_t element = blockIdx.x * int64_t{256} + threadIdx.x; element < 6; element += gridDim.x * int64_t{256}) {
    const int64_t row = element / 3;
    const int64_t j = element - row * 3;
    const int64_t c0 = row;
    const float x0 = input0[3 * c0 + j];
    const float x1 = input1[j];
    // %2 = f32[2,3] mul(%0, %1)
    const float v2 = mul(x0, x1);
    const float v3 = splat<float>(1.0);
    // %4 = f32[2,3] add(%2, %3)
    const float v4 = add(v2, v3);
    output4[3 * c0 + j] = v4;
  }
}

}  // namespace kiln::jit
)cuda");
}

TEST(CudaCodegen, GeluIsOneVectorizedLoopKernel) {
  auto module = compiles("gelu", [](Tensor x) { return nn::gelu(x); }, random_tensor(DType::f32, {4096}, 1));
  ASSERT_EQ(module.launches.size(), 1u);
  EXPECT_EQ(module.launches[0].vector_function, "kiln_kernel_0_vector");
  EXPECT_NE(module.text.find("load_pack<4>"), std::string::npos);
  // gelu's tanh form, computed as x sigmoid(2u) (nn.cpp); in the kernel's code, not only in the prelude.
  EXPECT_NE(kernels_of(module).find("sigmoid("), std::string::npos);
  // One input: rounds of two packs per thread, both loaded before either is computed.
  std::string vector = module.text.substr(module.text.find("kiln_kernel_0_vector"));
  EXPECT_EQ(count(vector, "Pack<float, 4> loaded_x0[2];"), 1u) << vector;
  EXPECT_LT(vector.find("loaded_x0[in_round] = load_pack<4>"), vector.find("store_pack<4>")) << vector;
  EXPECT_EQ(module.launches[0].vector_blocks, 2);  // 1024 packs, 512 per block
}

TEST(CudaCodegen, SoftmaxIsOneKernelOneWarpPerShortRow) {
  auto module = compiles("softmax", [](Tensor x) { return nn::softmax(x); }, random_tensor(DType::f32, {37, 301}, 2));
  ASSERT_EQ(module.launches.size(), 1u);
  EXPECT_NE(module.text.find("One warp per row of 301 elements"), std::string::npos);
  EXPECT_EQ(count(kernels_of(module), "warp_reduce("), 2u);  // max, then the sum of exponentials
  EXPECT_TRUE(module.launches[0].vector_function.empty());   // rows of 301 floats do not split into packs
}

TEST(CudaCodegen, SoftmaxOfLongRowsIsOneBlockPerRow) {
  auto module = compiles("softmax_long", [](Tensor x) { return nn::softmax(x); }, random_tensor(DType::f32, {3, 5000}, 3));
  ASSERT_EQ(module.launches.size(), 1u);
  EXPECT_EQ(module.launches[0].threads, 512);
  EXPECT_NE(module.text.find("block_reduce<512>"), std::string::npos);
}

// The text of kernel variant `function` ("kiln_kernel_0" or "kiln_kernel_0_vector").
std::string kernel_text(const compiler::cuda::ModuleSource& module, const std::string& function) {
  std::size_t start = module.text.find(" " + function + "(");
  std::size_t end = module.text.find("\n}\n", start);
  return start == std::string::npos ? "" : module.text.substr(start, end - start);
}

TEST(CudaCodegen, ShortRowsAreReadFromMemoryOnce) {
  // 8192 floats per row: 16 per thread of the block, or 4 packs of 4, kept in
  // registers for the max pass, the sum of exponentials and the output pass.
  auto module = compiles(
      "softmax_8192", [](Tensor x) { return nn::softmax(x); }, random_tensor(DType::f32, {4, 8192}, 42));
  ASSERT_EQ(module.launches.size(), 1u);
  EXPECT_EQ(module.launches[0].threads, 512);
  std::string scalar = kernel_text(module, "kiln_kernel_0"), vector = kernel_text(module, "kiln_kernel_0_vector");
  EXPECT_EQ(count(scalar, "input0["), 1u) << scalar;
  EXPECT_EQ(count(scalar, "float row_x0[16];"), 1u) << scalar;
  // Stored once, read by the max and the sum passes; the output pass reads
  // exp(x - max), kept from the sum pass: one exp per element.
  EXPECT_EQ(count(scalar, "row_x0[step]"), 3u) << scalar;
  EXPECT_EQ(count(scalar, "float row_v3[16];"), 1u) << scalar;
  EXPECT_EQ(count(scalar, " = exp("), 1u) << scalar;
  EXPECT_EQ(count(vector, " = exp("), 1u) << vector;
  EXPECT_EQ(count(vector, "row_v3[step * 4 + element]"), 2u) << vector;
  EXPECT_EQ(count(scalar, "for (int step = 0; step < 16; ++step)"), 4u) << scalar;
  EXPECT_EQ(count(scalar, "continue;"), 0u) << scalar;  // 8192 = 16 * 512: no partial last step
  EXPECT_EQ(count(vector, "input0 + "), 1u) << vector;
  EXPECT_EQ(count(vector, "Pack<float, 4> row_x0[4];"), 1u) << vector;
  EXPECT_EQ(count(vector, "#pragma unroll\n    for (int step = 0; step < 4; ++step)"), 4u) << vector;

  // softmax of 16384: x alone fills the registers' budget; exp is computed again by the output pass.
  std::string wide =
      kernel_text(compiles("softmax_16384", [](Tensor x) { return nn::softmax(x); },
                           random_tensor(DType::f32, {2, 16384}, 48)),
                  "kiln_kernel_0");
  EXPECT_EQ(count(wide, "float row_x0[32];"), 1u) << wide;
  EXPECT_EQ(count(wide, " = exp("), 2u) << wide;

  // layer_norm: x in registers; gamma and beta, read by the output pass only, from memory there.
  auto norm = compiles(
      "layer_norm_8192", [](Tensor x, Tensor gamma, Tensor beta) { return nn::layer_norm(x, gamma, beta); },
      random_tensor(DType::f32, {4, 8192}, 43), random_tensor(DType::f32, {8192}, 44),
      random_tensor(DType::f32, {8192}, 45));
  ASSERT_EQ(norm.launches.size(), 1u);
  std::string norm_vector = kernel_text(norm, "kiln_kernel_0_vector");
  EXPECT_EQ(count(norm_vector, "input0 + "), 1u) << norm_vector;
  EXPECT_EQ(count(norm_vector, "input1 + "), 1u) << norm_vector;
  EXPECT_EQ(count(norm_vector, "input2 + "), 1u) << norm_vector;
  EXPECT_EQ(count(norm_vector, "> row_"), 1u) << norm_vector;  // one array: x's

  // A partial last step (3000 = 5 * 512 + 440) is bounds-checked; a row of
  // 20000 (40 per thread) keeps the strided loop, a pass per read.
  auto softmax = [](Tensor x) { return nn::softmax(x); };
  std::string partial =
      kernel_text(compiles("softmax_3000", softmax, random_tensor(DType::f32, {2, 3000}, 46)), "kiln_kernel_0");
  EXPECT_EQ(count(partial, "float row_x0[6];"), 1u) << partial;
  EXPECT_EQ(count(partial, "if (position >= 3000) continue;"), 4u) << partial;
  std::string long_rows =
      kernel_text(compiles("softmax_20000", softmax, random_tensor(DType::f32, {2, 20000}, 47)), "kiln_kernel_0");
  EXPECT_EQ(count(long_rows, "row_x0"), 0u) << long_rows;
  EXPECT_EQ(count(long_rows, "input0["), 3u) << long_rows;
}

TEST(CudaCodegen, LayerNormIsOneKernel) {
  auto module = compiles("layer_norm", [](Tensor x, Tensor gamma, Tensor beta) { return nn::layer_norm(x, gamma, beta); },
                         random_tensor(DType::f32, {64, 768}, 4), random_tensor(DType::f32, {768}, 5),
                         random_tensor(DType::f32, {768}, 6));
  ASSERT_EQ(module.launches.size(), 1u);
  EXPECT_EQ(module.launches[0].vector_function, "kiln_kernel_0_vector");  // rows of 768 floats: 16-byte packs
}

TEST(CudaCodegen, AdamIsOneKernelWithThreeOutputs) {
  Tensor p = random_tensor(DType::f32, {1000}, 7), g = random_tensor(DType::f32, {1000}, 8);
  Tensor m = random_tensor(DType::f32, {1000}, 9), v = abs(random_tensor(DType::f32, {1000}, 10));
  auto module = compiles("adam", adam_step, p, g, m, v);
  ASSERT_EQ(module.launches.size(), 1u);
  EXPECT_EQ(module.launches[0].parameter_count, 7);  // 4 inputs, 3 outputs
  EXPECT_EQ(count(kernels_of(module), "store_pack<4>"), 3u);
  // Four packs per element are in flight already: one pack per thread per iteration.
  EXPECT_EQ(kernels_of(module).find("loaded_"), std::string::npos);
}

TEST(CudaCodegen, SeedIsCublasAndOneEpilogueKernelWithAGridReduction) {
  Tensor x = random_tensor(DType::f32, {256, 128}, 11), y = random_tensor(DType::f32, {128, 192}, 12);
  auto module = compiles("seed", seed_function, x, y);
  ASSERT_EQ(module.launches.size(), 1u);
  EXPECT_TRUE(module.launches[0].fixed_grid);
  EXPECT_NE(module.text.find("product["), std::string::npos);
  EXPECT_NE(module.text.find("kernel_0_partials0"), std::string::npos);
  EXPECT_NE(module.text.find("atomicAdd(&kernel_0_blocks_done"), std::string::npos);
}

// Dense layers: cuBLASLt applies a row bias and relu itself, so no kernel is
// generated; anything more in the epilogue keeps the generated kernel.
TEST(CudaCodegen, DenseLayersAreOneCublasLtCallWithItsEpilogue) {
  using kernels::cuda::GemmEpilogue;
  Tensor x = random_tensor(DType::f32, {64, 32}, 13), w = random_tensor(DType::f32, {32, 48}, 14);
  Tensor b = random_tensor(DType::f32, {48}, 15), row = random_tensor(DType::f32, {1, 48}, 16);
  Tensor full = random_tensor(DType::f32, {64, 48}, 17);
  struct Expected {
    std::string name;
    GemmEpilogue epilogue;
    int bias_input;
  };
  auto check = [&](const Expected& expected, const compiler::cuda::ModuleSource& module) {
    ASSERT_EQ(module.launches.size(), 1u) << expected.name;
    EXPECT_EQ(module.launches[0].epilogue, expected.epilogue) << expected.name;
    EXPECT_EQ(module.launches[0].bias_input, expected.bias_input) << expected.name;
    EXPECT_EQ(module.launches[0].function.empty(), expected.epilogue != GemmEpilogue::none) << expected.name;
  };
  check({"relu(x @ w + b)", GemmEpilogue::bias_relu, 2},
        compiles("dense_relu", [](Tensor x, Tensor w, Tensor b) { return nn::relu(matmul(x, w) + b); }, x, w, b));
  check({"b + x @ w^T", GemmEpilogue::bias, 2},
        compiles("dense_transposed", [](Tensor x, Tensor w, Tensor b) { return b + matmul(x, w, {.transpose_b = true}); },
                 x, transpose(w), b));
  check({"relu(x @ w)", GemmEpilogue::relu, -1},
        compiles("matmul_relu", [](Tensor x, Tensor w) { return nn::relu(matmul(x, w)); }, x, w));
  check({"x @ w + b[1, n]", GemmEpilogue::bias, 2},
        compiles("dense_row", [](Tensor x, Tensor w, Tensor b) { return matmul(x, w) + b; }, x, w, row));
  // Not cuBLASLt's: a full matrix added, gelu, a bias after relu, two outputs.
  check({"x @ w + c", GemmEpilogue::none, -1},
        compiles("matmul_add", [](Tensor x, Tensor w, Tensor c) { return matmul(x, w) + c; }, x, w, full));
  check({"gelu(x @ w + b)", GemmEpilogue::none, -1},
        compiles("dense_gelu", [](Tensor x, Tensor w, Tensor b) { return nn::gelu(matmul(x, w) + b); }, x, w, b));
  check({"relu(x @ w) + b", GemmEpilogue::none, -1},
        compiles("relu_then_bias", [](Tensor x, Tensor w, Tensor b) { return nn::relu(matmul(x, w)) + b; }, x, w, b));
  auto two = compiles("two_outputs", [](Tensor x, Tensor w, Tensor b) {
    Tensor y = matmul(x, w) + b;
    return std::vector<Tensor>{y, nn::relu(y)};
  }, x, w, b);
  for (const auto& launch : two.launches) EXPECT_EQ(launch.epilogue, GemmEpilogue::none);
}

TEST(CudaCodegen, OddShapesBroadcastsTransposesAndSlices) {
  compiles("broadcast", [](Tensor a, Tensor b) { return a * b + 1.0; }, random_tensor(DType::f32, {3, 1, 5}, 13),
           random_tensor(DType::f32, {4, 5}, 14));
  compiles("transpose", [](Tensor a, Tensor b) { return exp(transpose(a)) - b; }, random_tensor(DType::f32, {7, 3}, 15),
           random_tensor(DType::f32, {3, 7}, 16));
  compiles("slice", [](Tensor a) { return sqrt(abs(slice(a, {.start = {1, 0}, .stop = {9, 11}, .step = {2, 3}}))); },
           random_tensor(DType::f32, {10, 11}, 17));
  compiles("row_of_a_transpose", [](Tensor a) { return reduce_max(transpose(a, {0, 2, 1}), {1, 2}); },
           random_tensor(DType::f32, {5, 6, 7}, 18));
  compiles("mean_keepdims", [](Tensor a) { return a - reduce_mean(a, {-1}, true); }, random_tensor(DType::f64, {9, 13}, 19));
  compiles("integers", [](Tensor a, Tensor b) { return where(a > b, a * b, -b) + cast(a, DType::i64); },
           random_tensor(DType::i32, {33}, 20), random_tensor(DType::i32, {33}, 21));
  compiles("special_constants", [](Tensor a) { return maximum(a, -INFINITY) + minimum(a, INFINITY) + a * 0.5; },
           random_tensor(DType::f32, {6}, 22));
  compiles("scalar", [](Tensor a) { return sin(a) * 2.0; }, random_tensor(DType::f32, {}, 23));
  compiles("odd_length", [](Tensor a) { return sigmoid(a); }, random_tensor(DType::f32, {1001}, 24));
  // Rows over three kept axes, and a reduction over non-adjacent axes (a
  // middle axis between the row and the inner axis).
  compiles(
      "rows_of_three_axes", [](Tensor a) { return nn::softmax(a); }, random_tensor(DType::f32, {2, 3, 4, 9}, 25));
  compiles(
      "middle_axes",
      [](Tensor a) {
        return a - reduce_max(a, {1, 3}, true);
      },
      random_tensor(DType::f32, {3, 4, 5, 6}, 26));
  compiles(
      "broadcast_rows", [](Tensor a, Tensor b) { return a + b; }, random_tensor(DType::f32, {2, 3, 8}, 27),
      random_tensor(DType::f32, {3, 1}, 28));
  // Two transcendental values that two passes read, one of the other: only
  // the outer one is kept in registers (kiln-fuzz, seed 63: the inner one's
  // array was written and never read).
  compiles(
      "kept_chain",
      [](Tensor a) {
        Tensor c = cos(erf(a));
        return std::vector<Tensor>{reduce_min(c, {-1}, true), c};
      },
      random_tensor(DType::f32, {4, 40}, 29));
}

TEST(CudaCodegen, EveryElementwiseOpOnEveryDtypeCompiles) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    auto body = [dtype](Tensor a, Tensor b, Tensor p) {
      std::vector<Tensor> outputs = {neg(a),        abs(a),        sign(a),        square(a),
                                     relu(a),       floor(a),      ceil(a),        round(a),
                                     a + b,         a - b,         a * b,          pow(a, b),
                                     maximum(a, b), minimum(a, b), where(p, a, b), a<b, a <= b, a> b,
                                     a >= b,        eq(a, b),      ne(a, b),       floor_divide(a, b),
                                     a % b,         fmod(a, b)};
      if (is_floating(dtype))
        for (Tensor y : {sin(a), cos(a), exp(a), log(a), tanh(a), sqrt(a), rsqrt(a), sigmoid(a), erf(a), erfc(a),
                         log1p(a), expm1(a), atan(a), a / b, copysign(a, b)})
          outputs.push_back(y);
      for (DType to : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64}) outputs.push_back(cast(a, to));
      if (!is_floating(dtype))
        for (Tensor y : {a & b, a | b, a ^ b, ~a, a << b, a >> b}) outputs.push_back(y);
      for (Tensor y : {p & p, p | (a > b), p ^ (a < b), ~p}) outputs.push_back(y);
      outputs.push_back(logical_and(p, logical_not(p)));
      outputs.push_back(logical_or(p, a > b));
      return outputs;
    };
    compiles("every_op_" + std::string(to_string(dtype)), body, random_tensor(dtype, {3, 17}, 30),
             random_tensor(dtype, {17}, 31), random_tensor(DType::boolean, {3, 17}, 32));
  }
}

TEST(CudaCodegen, ReductionsOfEveryDtypeAndZeroSizes) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    auto body = [](Tensor x) {
      return std::vector<Tensor>{reduce_sum(x, {-1}), reduce_max(x, {-1}), reduce_min(x, {-1}), reduce_prod(x, {-1})};
    };
    compiles("reductions_" + std::string(to_string(dtype)), body, random_tensor(dtype, {5, 2000}, 33));
  }
  // any and all: by warp, by block and over the whole array.
  auto any_all = [](Tensor x) {
    Tensor positive = x > 0;
    return std::vector<Tensor>{reduce_max(positive, {-1}), reduce_min(positive, {-1}), reduce_max(positive)};
  };
  compiles("booleans_by_warp", any_all, random_tensor(DType::f32, {5, 7}, 38));
  compiles("booleans_by_block", any_all, random_tensor(DType::f32, {5, 2000}, 39));
  compiles("empty_rows", [](Tensor x) { return nn::softmax(x); }, random_tensor(DType::f32, {0, 3}, 34));
  compiles("empty_reduction", [](Tensor x) { return reduce_sum(x, {-1}); }, random_tensor(DType::f32, {4, 0}, 35));
  // A zero-size axis among others: the kernels' loops never run, and their
  // index arithmetic would divide by the zero size.
  compiles(
      "zero_size_middle_axis",
      [](Tensor x) {
        return std::vector<Tensor>{exp(x), reduce_mean(x, {-1}), reduce_max(x, {1}, true) + x, reduce_sum(x),
                                   nn::softmax(x)};
      },
      random_tensor(DType::f32, {2, 0, 3}, 37));
}

TEST(CudaCodegen, AWholeArrayReductionIsAGridReduction) {
  auto module = compiles("full_sum", [](Tensor x) { return std::vector<Tensor>{reduce_sum(x * x), reduce_max(x)}; },
                         random_tensor(DType::f32, {1000, 1000}, 36));
  ASSERT_FALSE(module.launches.empty());
  for (const auto& launch : module.launches) {
    EXPECT_TRUE(launch.fixed_grid) << launch.function;
    EXPECT_EQ(launch.blocks, 1024) << launch.function;
  }
  EXPECT_NE(module.text.find("kernel_0_partials0[1024]"), std::string::npos);
  // A reduction feeding another (x - mean) stays a row kernel.
  auto variance = compiles("variance", [](Tensor x) { return reduce_mean(square(x - reduce_mean(x))); },
                           random_tensor(DType::f32, {5000}, 37));
  EXPECT_FALSE(variance.launches[0].fixed_grid);
}

TEST(CudaCodegen, ModulesGoThroughTheDiskCache) {
  std::string directory = ::testing::TempDir() + "kiln_cuda_cache_" + std::to_string(::getpid());
  const char* previous = std::getenv("KILN_CACHE_DIR");
  std::string saved = previous ? previous : "";
  ::setenv("KILN_CACHE_DIR", directory.c_str(), 1);
  Generated generated = generate([](Tensor x) { return nn::gelu(x); }, random_tensor(DType::f32, {64}, 38));
  auto first = compiler::cuda::compile_module(generated.module.text, "sm_90", "cached_gelu");
  auto second = compiler::cuda::compile_module(generated.module.text, "sm_90", "cached_gelu");
  EXPECT_FALSE(first.from_disk_cache);
  EXPECT_TRUE(second.from_disk_cache);
  EXPECT_EQ(first.bytes, second.bytes);
  auto other_target = compiler::cuda::compile_module(generated.module.text, "sm_80", "cached_gelu");
  EXPECT_FALSE(other_target.from_disk_cache);  // the target is part of the key
  if (previous) ::setenv("KILN_CACHE_DIR", saved.c_str(), 1);
  else ::unsetenv("KILN_CACHE_DIR");
  std::filesystem::remove_all(directory);
}

TEST(CudaCodegen, BrokenSourceIsACompileErrorWithTheLog) {
  std::string source = std::string(compiler::cuda::prelude()) +
                       "\nextern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }\n";
  try {
    compiler::cuda::nvrtc_compile(source, "sm_90", "broken_function");
    ADD_FAILURE() << "expected kiln::CompileError";
  } catch (const CompileError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("broken_function"), std::string::npos) << message;
    EXPECT_NE(message.find("NVRTC could not compile"), std::string::npos) << message;
    EXPECT_NE(message.find("undefined_name"), std::string::npos) << message;
  }
}

TEST(CudaCodegen, TargetsTheGpuArchitectureOrPtxOfAnOlderOne) {
  EXPECT_EQ(compiler::cuda::nvrtc_target(9, 0), "sm_90");
  std::string future = compiler::cuda::nvrtc_target(99, 0);
  EXPECT_TRUE(future.starts_with("compute_")) << future;
  std::string ptx = compiler::cuda::nvrtc_compile(
      std::string(compiler::cuda::prelude()) + "\nextern \"C\" __global__ void k(float* x) { x[0] = kiln::jit::sin(x[0]); }\n",
      future, "ptx");
#if defined(KILN_CUDA_SIMULATOR)
  // The CUDA simulator's NVRTC returns the (checked) source as the image.
  EXPECT_NE(ptx.find("extern \"C\" __global__ void k("), std::string::npos);
#else
  EXPECT_NE(ptx.find(".entry k"), std::string::npos);
#endif
}

// Attention: the two products and the row kernel between them are one generated kernel (attention_kernel.cpp),
// the scores in shared memory; the golden check reads it whole for a small case.
Tensor scaled_dot_product(Tensor q, Tensor k, Tensor v) {
  return matmul(nn::softmax(matmul(q, k, {.transpose_b = true}) * 0.5), v);
}

TEST(CudaCodegen, GoldenAttentionKernel) {
  auto module = compiles("attention_golden", scaled_dot_product, random_tensor(DType::f32, {2, 3, 4}, 60),
                         random_tensor(DType::f32, {2, 5, 4}, 61), random_tensor(DType::f32, {2, 5, 3}, 62));
  ASSERT_EQ(module.launches.size(), 1u);
  EXPECT_EQ(kernels_of(module), R"cuda(// ==== kernel 0: attention over [2,3,5] ====
// %3 = f32[2,3,5] matmul(%0, %1)
// %4 = f32[] constant(0.5)
// %5 = f32[2,3,5] mul(%3, %4)
// %6 = f32[2,3,1] reduce_max(%5)
// %7 = f32[2,3,5] sub(%5, %6)
// %8 = f32[2,3,5] exp(%7)
// %9 = f32[2,3,1] reduce_sum(%8)
// %10 = f32[2,3,5] div(%8, %9)
// %11 = f32[2,3,3] matmul(%10, %2)
extern "C" __global__ void __launch_bounds__(256) kiln_kernel_0(const float* __restrict__ input0, const float* __restrict__ input1, const float* __restrict__ input2, float* __restrict__ output11) {
  // One warp per row of 5 elements.
  // The scores of each warp's row, key by key: the first product, then the row code's result in its place.
  __shared__ float scores[8][5];
  const int lane = threadIdx.x % 32;
  for (int64_t row = blockIdx.x * int64_t{8} + threadIdx.x / 32; row < 6; row += gridDim.x * int64_t{8}) {
    const int warp = threadIdx.x / 32;
    const int64_t item = row / 3;
    const int64_t query = row % 3;
    // %3 = f32[2,3,5] matmul(%0, %1): this thread's keys
    for (int64_t key = lane; key < 5; key += 32) {
      float score = 0.0f;
      for (int64_t depth = 0; depth < 4; ++depth)
        score = fmaf(input0[12 * item + 4 * query + depth], input1[20 * item + 4 * key + depth], score);
      scores[warp][key] = score;
    }
    __syncwarp();  // the row's scores, before the row code reads them
    // Transcendental values a later pass needs again, computed once and kept here.
    float row_v8[1];
    const float v4 = splat<float>(0.5);
    // %6 = f32[2,3,1] reduce_max(%5)
    float accumulator0 = lowest<float>();
#pragma unroll
    for (int step = 0; step < 1; ++step) {
      const int64_t position = lane + int64_t{32} * step;
      if (position >= 5) continue;  // this thread's last step is past the row's end
      const int64_t j = position;
      // %3 = f32[2,3,5] matmul(%0, %1), the scores computed above
      const float v3 = scores[warp][j];
      // %5 = f32[2,3,5] mul(%3, %4)
      const float v5 = mul(v3, v4);
      accumulator0 = scalar::maximum{}(accumulator0, v5);
    }
    const float v6 = warp_reduce(accumulator0, scalar::maximum{});
    // %9 = f32[2,3,1] reduce_sum(%8)
    float accumulator1 = splat<float>(0);
#pragma unroll
    for (int step = 0; step < 1; ++step) {
      const int64_t position = lane + int64_t{32} * step;
      if (position >= 5) continue;  // this thread's last step is past the row's end
      const int64_t j = position;
      // %3 = f32[2,3,5] matmul(%0, %1), the scores computed above
      const float v3 = scores[warp][j];
      // %5 = f32[2,3,5] mul(%3, %4)
      const float v5 = mul(v3, v4);
      // %7 = f32[2,3,5] sub(%5, %6)
      const float v7 = sub(v5, v6);
      // %8 = f32[2,3,5] exp(%7)
      const float v8 = exp(v7);
      row_v8[step] = v8;
      accumulator1 = scalar::add{}(accumulator1, v8);
    }
    const float v9 = warp_reduce(accumulator1, scalar::add{});
    // The element outputs.
#pragma unroll
    for (int step = 0; step < 1; ++step) {
      const int64_t position = lane + int64_t{32} * step;
      if (position >= 5) continue;  // this thread's last step is past the row's end
      const int64_t j = position;
      const float v8 = row_v8[step];
      // %10 = f32[2,3,5] div(%8, %9)
      const float v10 = div(v8, v9);
      scores[warp][j] = v10;
    }
    __syncwarp();  // every thread's probabilities, before the second product reads them
    // %11 = f32[2,3,3] matmul(%10, %2): this thread's columns of the output row
    for (int64_t column = lane; column < 3; column += 32) {
      float sum = 0.0f;
      for (int64_t key = 0; key < 5; ++key)
        sum = fmaf(scores[warp][key], input2[15 * item + 3 * key + column], sum);
      output11[3 * row + column] = sum;
    }
    __syncwarp();  // the row's scores read by every thread before the next row's
  }
}

}  // namespace kiln::jit
)cuda");
}

// What kiln-dump --device cuda --build reports: lower() names every entry
// point with the block size it is launched with (its __launch_bounds__), and
// ptxas's report covers each of them.
TEST(CudaCodegen, LowerNamesEachKernelWithItsBlockSizeForTheResourceReport) {
  ir::Graph graph = ir::parse(function([](Tensor x) {
                                return nn::softmax(x);
                              }).get_compiler_ir(Stage::traced, random_tensor(DType::f32, {6, 2000}, 39)));
  compiler::LoweredFunction lowered = compiler::lower(graph, Device::cuda());
  ASSERT_EQ(lowered.stages.size(), 3u);
  const std::string& source = lowered.stages[2].second;
  ASSERT_EQ(lowered.cuda_kernels.size(), 2u);  // the kernel and its _vector variant
  std::string report = compiler::cuda::nvrtc_resource_report(source, "sm_90", graph.name);
  for (const auto& kernel : lowered.cuda_kernels) {
    EXPECT_EQ(kernel.threads, 512) << kernel.function;  // rows of 2000: one block per row
    EXPECT_NE(source.find("__launch_bounds__(" + std::to_string(kernel.threads) + ") " + kernel.function + "("),
              std::string::npos)
        << kernel.function;
    EXPECT_NE(report.find("Compiling entry function '" + kernel.function + "'"), std::string::npos) << report;
  }
  EXPECT_NE(report.find("registers"), std::string::npos) << report;
}

}  // namespace
}  // namespace kiln
