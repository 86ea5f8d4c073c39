// CUDA matmul against the CPU's: f32 with TF32 (kiln::config::allow_tf32,
// the default) within TF32 tolerance and without it within f32 tolerance,
// f64, and integers exactly; transposes, batches, broadcast batch axes; and
// products large enough for cuBLASLt's timed choice of algorithm (blas_lt.h).

#include "cuda/cuda_test_support.h"

#include <kiln/config.h>

namespace {

using namespace kiln;
using kiln::testing::expect_close_scaled;
using kiln::testing::expect_same;
using kiln::testing::gpu;
using kiln::testing::random_tensor;

struct Case {
  Shape a, b;
  bool transpose_a = false, transpose_b = false;
};

const std::vector<Case> cases = {
    {Shape{64, 128}, Shape{128, 96}},
    {Shape{1, 1}, Shape{1, 1}},
    {Shape{33, 17}, Shape{17, 29}},
    {Shape{17, 33}, Shape{17, 29}, true, false},
    {Shape{33, 17}, Shape{29, 17}, false, true},
    {Shape{17, 33}, Shape{29, 17}, true, true},
    {Shape{4, 33, 17}, Shape{4, 17, 29}},                 // one strided batch
    {Shape{5, 8, 16}, Shape{16, 4}},                      // b broadcast: stride 0
    {Shape{8, 16}, Shape{3, 16, 4}},                      // a broadcast
    {Shape{2, 1, 8, 16}, Shape{1, 3, 16, 8}},             // two runs
    {Shape{2, 1, 16, 8}, Shape{1, 3, 8, 16}, true, true},
    {Shape{300, 500}, Shape{500, 200}},
    {Shape{7}, Shape{7, 5}},                              // vector @ matrix
    {Shape{6, 7}, Shape{7}},                              // matrix @ vector
    {Shape{3, 0}, Shape{0, 4}},                           // k = 0: zeros
    {Shape{0, 5}, Shape{5, 4}},
};

std::string describe(const Case& c, DType dtype) {
  return std::string(to_string(dtype)) + " " + c.a.to_string() + (c.transpose_a ? "^T" : "") + " @ " +
         c.b.to_string() + (c.transpose_b ? "^T" : "");
}

// Runs every case in `dtype` and checks |GPU - CPU| <= tolerance * (|A| @ |B|).
void check_float(DType dtype, double tolerance) {
  for (const Case& c : cases) {
    Tensor a = random_tensor(dtype, c.a, 81), b = random_tensor(dtype, c.b, 82);
    MatmulOptions options{.transpose_a = c.transpose_a, .transpose_b = c.transpose_b};
    Tensor cpu = matmul(a, b, options);
    Tensor cuda = matmul(a.to(gpu), b.to(gpu), options);
    ASSERT_EQ(cuda.device(), gpu);
    Tensor scale = matmul(abs(a), abs(b), options);
    expect_close_scaled(cpu, cuda, scale, tolerance, describe(c, dtype));
  }
}

class CudaMatmul : public ::testing::Test {
 protected:
  void TearDown() override { config::allow_tf32 = previous_; }
  bool previous_ = config::allow_tf32;
};

TEST_F(CudaMatmul, Float32WithTf32) {
  KILN_REQUIRE_GPU();
  config::allow_tf32 = true;
  // TF32 keeps a 10-bit mantissa of each input: a relative error up to 2^-10
  // per factor if it truncates (2^-11 if it rounds), 2^-9 per product, summed in f32.
  check_float(DType::f32, 4e-3);
}

TEST_F(CudaMatmul, Float32WithoutTf32) {
  KILN_REQUIRE_GPU();
  config::allow_tf32 = false;
  check_float(DType::f32, 5e-5);  // k <= 500: far below k * 2^-24 in practice
}

TEST_F(CudaMatmul, Float64) {
  KILN_REQUIRE_GPU();
  check_float(DType::f64, 1e-13);
}

TEST_F(CudaMatmul, IntegersExactly) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::i32, DType::i64})
    for (const Case& c : cases) {
      Tensor a = random_tensor(dtype, c.a, 83), b = random_tensor(dtype, c.b, 84);
      MatmulOptions options{.transpose_a = c.transpose_a, .transpose_b = c.transpose_b};
      expect_same(matmul(a, b, options), matmul(a.to(gpu), b.to(gpu), options), 0, describe(c, dtype));
    }
  // Products that wrap.
  Tensor big = random_tensor(DType::i32, {40, 40}, 85) * 100000;
  expect_same(matmul(big, big), matmul(big.to(gpu), big.to(gpu)), 0, "i32 wraparound");
}

TEST_F(CudaMatmul, Tf32SwitchChangesPrecisionOnly) {
  KILN_REQUIRE_GPU();
  Tensor a = random::normal({512, 512}, {.seed = 86, .dtype = DType::f64});
  Tensor exact = matmul(a, a);  // f64 reference on the CPU
  Tensor a32 = cast(a, DType::f32).to(gpu);
  Tensor scale = matmul(abs(a), abs(a));
  config::allow_tf32 = false;
  expect_close_scaled(exact, cast(matmul(a32, a32), DType::f64), scale, 3e-5, "f32 without TF32 vs f64");
  config::allow_tf32 = true;
  expect_close_scaled(exact, cast(matmul(a32, a32), DType::f64), scale, 4e-3, "TF32 vs f64");
}

// Products of 2^30 flops and more: cuBLASLt times its candidate algorithms
// on the first call and keeps the fastest; the result must not depend on
// which one won, and later calls (the kept plan) repeat it bit for bit.
// Batch items at odd offsets check that only algorithms working at the
// operands' real alignment are chosen (the small odd batches of `cases`
// check it below the tuning threshold).
TEST_F(CudaMatmul, TunedProductsAgreeWithTheCpuAndRepeat) {
  KILN_REQUIRE_GPU();
  config::allow_tf32 = false;
  const std::vector<Case> large = {
      {Shape{1024, 1024}, Shape{1024, 512}},
      {Shape{1024, 1024}, Shape{512, 1024}, false, true},
      {Shape{1024, 1024}, Shape{1024, 512}, true, false},
      {Shape{4, 512, 512}, Shape{4, 512, 512}},  // strided batch
      {Shape{1000, 1030}, Shape{1030, 520}},     // odd sizes
      {Shape{3, 999, 1031}, Shape{3, 1031, 517}},  // batch items 4-byte aligned only
  };
  for (const Case& c : large) {
    Tensor a = random_tensor(DType::f32, c.a, 87), b = random_tensor(DType::f32, c.b, 88);
    MatmulOptions options{.transpose_a = c.transpose_a, .transpose_b = c.transpose_b};
    Tensor first = matmul(a.to(gpu), b.to(gpu), options);
    Tensor again = matmul(a.to(gpu), b.to(gpu), options);
    expect_close_scaled(matmul(a, b, options), first, matmul(abs(a), abs(b), options), 1e-4,
                        describe(c, DType::f32));
    expect_same(first, again, 0, describe(c, DType::f32) + " repeated");
  }
  config::allow_tf32 = true;
  Tensor a = random_tensor(DType::f32, {1024, 1024}, 89), b = random_tensor(DType::f32, {1024, 1024}, 90);
  expect_close_scaled(matmul(a, b), matmul(a.to(gpu), b.to(gpu)), matmul(abs(a), abs(b)), 4e-3, "TF32 1024^3");
}

}  // namespace
