// Random numbers on the GPU equal the CPU's for the same seed
// (Philox-4x32-10, kernels/cuda/random.cu): uniform bit for bit; normal
// through CUDA's double log/sin/cos, equal in f32 but for rare one-ULP
// differences, and in f64 within a few ULP of the terms (mean, stddev * z).

#include "cuda/cuda_test_support.h"

namespace {

using namespace kiln;
using kiln::testing::expect_close_scaled;
using kiln::testing::expect_same;
using kiln::testing::gpu;
using kiln::testing::ulp_distance;

TEST(CudaRandom, UniformEqualsTheCpu) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f64})
    for (const Shape& shape : {Shape{}, Shape{1}, Shape{3}, Shape{1000003}, Shape{17, 19}, Shape{0}}) {
      random::UniformOptions options{.seed = 1234, .low = -2.5, .high = 7.0, .dtype = dtype};
      Tensor cpu = random::uniform(shape, options);
      options.device = gpu;
      Tensor cuda = random::uniform(shape, options);
      EXPECT_EQ(cuda.device(), gpu);
      expect_same(cpu, cuda, 0, "uniform " + std::string(to_string(dtype)) + shape.to_string());
    }
  // A seed above 2^32 uses both key words.
  Tensor cpu = random::uniform({4096}, {.seed = 0x123456789abcdefULL});
  expect_same(cpu, random::uniform({4096}, {.seed = 0x123456789abcdefULL, .device = gpu}), 0, "uniform, 64-bit seed");
}

TEST(CudaRandom, NormalEqualsTheCpu) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::f64}) {
    random::NormalOptions options{.seed = 99, .mean = 0.5, .stddev = 2.0, .dtype = dtype};
    Tensor cpu = random::normal({1000003}, options);
    options.device = gpu;
    Tensor cuda = random::normal({1000003}, options);
    // CUDA's double log, sin and cos are within 1 ULP, glibc's within about
    // half: mean + stddev * z agrees within a few ULP of its larger term. It
    // cancels where the value is near 0, so f64 values are compared against
    // |stddev * z| + |mean|, not ULP by ULP. Rounding to f32 hides the
    // difference except where it straddles a rounding boundary.
    if (dtype == DType::f64) {
      Tensor term_size = abs(cpu - options.mean) + std::abs(options.mean);
      expect_close_scaled(cpu, cuda, term_size, 1e-14, "normal f64");
    } else {
      expect_same(cpu, cuda, 1, "normal f32");
      std::vector<float> want = cpu.to_vector<float>(), got = cuda.to_vector<float>();
      std::int64_t differ = 0;
      for (std::size_t i = 0; i < want.size(); ++i) differ += ulp_distance(want[i], got[i]) != 0;
      EXPECT_LE(differ, 20) << "f32 normals that are not bit-identical, of " << want.size();
    }
  }
  expect_same(random::normal({5, 7}), random::normal({5, 7}, gpu), 1, "normal, default options");
}

// Draws from keys are ops of the graph (random_bits, kernels/scalar_ops.h): on the GPU, eagerly and compiled,
// the bits and the dropout mask are the CPU's exactly.
TEST(CudaRandom, KeyedDrawsEqualTheCpu) {
  KILN_REQUIRE_GPU();
  auto draws = [](Tensor key, Tensor x) {
    const std::vector<Tensor> keys = random::split(key, 2);
    return std::vector<Tensor>{random::bits(keys[0], {3, 1001}), nn::dropout(x, 0.3, keys[1]),
                               random::uniform(random::fold_in(key, 4), {77}, {.low = -2, .high = 2})};
  };
  const Tensor x = random::normal({129, 67}, {.seed = 3});
  const std::vector<Tensor> cpu = draws(random::key(31), x);
  const std::vector<Tensor> eager = draws(random::key(31, gpu), x.to(gpu));
  auto compiled = function(draws, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::vector<Tensor> jit = compiled(random::key(31, gpu), x.to(gpu));
  for (const std::vector<Tensor>* on_gpu : {&eager, &jit}) {
    ASSERT_EQ(on_gpu->size(), cpu.size());
    EXPECT_EQ((*on_gpu)[0].device(), gpu);
    EXPECT_EQ((*on_gpu)[0].to(Device::cpu()).to_vector<std::int64_t>(), cpu[0].to_vector<std::int64_t>());
    expect_same(cpu[1], (*on_gpu)[1], 0, "dropout");
    expect_same(cpu[2], (*on_gpu)[2], 0, "uniform from a folded key");
  }
}

}  // namespace
