// CUDA reductions and argmax against the CPU's on random inputs: every
// pass shape (warp rows, block rows, multi-chunk rows, columns with and
// without partials, several axes), integer results exact, float sums within
// reassociation error, max/min/argmax exact, results deterministic.

#include "cuda/cuda_test_support.h"

#include <functional>
#include <limits>

namespace {

using namespace kiln;
using kiln::testing::expect_close_scaled;
using kiln::testing::expect_same;
using kiln::testing::gpu;
using kiln::testing::random_tensor;

struct Case {
  Shape shape;
  std::vector<std::int64_t> axes;
};

const std::vector<Case> cases = {
    {Shape{1000003}, {0}},          // rows, many chunks, then a second rows pass
    {Shape{300, 5000}, {1}},        // one block per row
    {Shape{64, 3}, {1}},            // one warp per row
    {Shape{3, 200000}, {1}},        // few long rows
    {Shape{5000, 300}, {0}},        // columns with partials
    {Shape{100, 70}, {0}},          // columns, one group
    {Shape{7, 9, 11, 13}, {0, 2}},  // two column passes
    {Shape{7, 9, 11, 13}, {1, 3}},  // rows then columns
    {Shape{7, 9, 11, 13}, {0, 1, 2, 3}},
    {Shape{1, 7, 1}, {0, 2}},       // only size-1 axes: a copy
    {Shape{}, {}},
    {Shape{0, 5}, {0}},             // empty: identities
    {Shape{5, 0}, {1}},
};

using Reduction = std::function<Tensor(const Tensor&, const std::vector<std::int64_t>&, bool)>;

std::string describe(const char* name, const Tensor& x, const std::vector<std::int64_t>& axes) {
  std::string text = std::string(name) + " " + std::string(to_string(x.dtype())) + x.shape().to_string() + " axes";
  for (std::int64_t axis : axes) text += " " + std::to_string(axis);
  return text;
}

TEST(CudaReduction, SumAndMean) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::i32, DType::i64, DType::f32, DType::f64})
    for (const Case& c : cases)
      for (bool keepdims : {false, true}) {
        Tensor x = random_tensor(dtype, c.shape, 71);
        Tensor cpu = reduce_sum(x, c.axes, keepdims), cuda = reduce_sum(x.to(gpu), c.axes, keepdims);
        if (!is_floating(dtype)) {
          expect_same(cpu, cuda, 0, describe("reduce_sum", x, c.axes));
          continue;
        }
        double tolerance = dtype == DType::f32 ? 1e-5 : 1e-13;
        Tensor scale = reduce_sum(abs(x), c.axes, keepdims);
        expect_close_scaled(cpu, cuda, scale, tolerance, describe("reduce_sum", x, c.axes));
        Tensor count = full({}, x.numel() == 0 ? 1 : static_cast<double>(x.numel()) / std::max<std::int64_t>(cpu.numel(), 1),
                            dtype);
        expect_close_scaled(reduce_mean(x, c.axes, keepdims), reduce_mean(x.to(gpu), c.axes, keepdims), scale / count,
                            tolerance, describe("reduce_mean", x, c.axes));
      }
}

TEST(CudaReduction, MaxMinExactWithNan) {
  KILN_REQUIRE_GPU();
  for (DType dtype : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64})
    for (const Case& c : cases) {
      Tensor x = random_tensor(dtype, c.shape, 72);
      expect_same(reduce_max(x, c.axes), reduce_max(x.to(gpu), c.axes), 0, describe("reduce_max", x, c.axes));
      expect_same(reduce_min(x, c.axes), reduce_min(x.to(gpu), c.axes), 0, describe("reduce_min", x, c.axes));
    }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::f32, DType::f64}) {
    std::vector<double> values(40000, 1.0);
    values[123] = nan;
    values[30001] = 5.0;
    Tensor x = cast(from_vector<double>(values, Shape{2, 20000}), dtype);
    for (const std::vector<std::int64_t>& axes : {std::vector<std::int64_t>{1}, {0}, {0, 1}}) {
      expect_same(reduce_max(x, axes), reduce_max(x.to(gpu), axes), 0, describe("reduce_max NaN", x, axes));
      expect_same(reduce_min(x, axes), reduce_min(x.to(gpu), axes), 0, describe("reduce_min NaN", x, axes));
    }
  }
}

TEST(CudaReduction, Prod) {
  KILN_REQUIRE_GPU();
  const std::vector<Case> small = {{Shape{1000, 6}, {1}}, {Shape{6, 1000}, {0}}, {Shape{3, 4, 5}, {0, 2}}, {Shape{0}, {0}}};
  for (DType dtype : {DType::i32, DType::i64})  // wraps: exact in any order
    for (const Case& c : small) {
      Tensor x = random_tensor(dtype, c.shape, 73);
      expect_same(reduce_prod(x, c.axes), reduce_prod(x.to(gpu), c.axes), 0, describe("reduce_prod", x, c.axes));
    }
  Tensor wraps = random_tensor(DType::i64, {100000}, 74);
  expect_same(reduce_prod(wraps, {0}), reduce_prod(wraps.to(gpu), {0}), 0, "reduce_prod i64 wraps");
  for (DType dtype : {DType::f32, DType::f64})
    for (const Case& c : small) {
      Tensor x = random_tensor(dtype, c.shape, 75);
      Tensor cpu = reduce_prod(x, c.axes);
      expect_close_scaled(cpu, reduce_prod(x.to(gpu), c.axes), abs(cpu), dtype == DType::f32 ? 1e-5 : 1e-13,
                          describe("reduce_prod", x, c.axes));
    }
}

TEST(CudaReduction, Deterministic) {
  KILN_REQUIRE_GPU();
  Tensor x = random_tensor(DType::f32, {3, 1000003}, 76).to(gpu);
  Tensor first = reduce_sum(x, {1}), second = reduce_sum(x, {1});
  expect_same(first.to(Device::cpu()), second, 0, "two runs");
  Tensor columns = random_tensor(DType::f32, {20000, 30}, 77).to(gpu);
  expect_same(reduce_sum(columns, {0}).to(Device::cpu()), reduce_sum(columns, {0}), 0, "two runs, columns");
}

TEST(CudaReduction, ArgmaxAndArgmin) {
  KILN_REQUIRE_GPU();
  const std::vector<std::pair<Shape, std::int64_t>> shapes = {
      {Shape{100, 37}, 1}, {Shape{37, 100}, 0}, {Shape{3, 100000}, 1}, {Shape{10000}, 0},
      {Shape{4, 5, 6}, 1}, {Shape{1}, 0},       {Shape{0, 4}, 1}};
  for (DType dtype : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64})
    for (const auto& [shape, axis] : shapes) {
      Tensor x = random_tensor(dtype, shape, 78);  // small integers and bools: many ties
      expect_same(argmax(x, axis), argmax(x.to(gpu), axis), 0,
                  "argmax " + std::string(to_string(dtype)) + shape.to_string() + " axis " + std::to_string(axis));
      expect_same(argmin(x, axis), argmin(x.to(gpu), axis), 0,
                  "argmin " + std::string(to_string(dtype)) + shape.to_string() + " axis " + std::to_string(axis));
    }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> values(3 * 50000, -1.0);
  values[70000] = nan;   // row 1: the first NaN wins
  values[90000] = nan;
  values[10] = 4.0;      // row 0: the first of two equal maxima
  values[40000] = 4.0;
  values[20] = -5.0;     // and of two equal minima
  values[30000] = -5.0;
  Tensor x = from_vector<double>(values, Shape{3, 50000});
  expect_same(argmax(x, 1), argmax(x.to(gpu), 1), 0, "argmax with NaN and ties");
  expect_same(argmax(x, 0), argmax(x.to(gpu), 0), 0, "argmax columns with NaN");
  expect_same(argmin(x, 1), argmin(x.to(gpu), 1), 0, "argmin with NaN and ties");
  expect_same(argmin(x, 0), argmin(x.to(gpu), 0), 0, "argmin columns with NaN");
}

// Scans combine each line in order on both devices, so the GPU's equal the CPU's bit for bit, floats included:
// columns (one thread per line), rows through the 32 x 32 tiles (lengths and row counts around 32), every flag,
// every dtype, NaN.
TEST(CudaScan, EqualTheCpusBitForBit) {
  KILN_REQUIRE_GPU();
  const std::vector<std::pair<Shape, std::int64_t>> scans = {
      {Shape{70, 31}, 1},   {Shape{33, 32}, 1},  {Shape{3, 1000}, 1}, {Shape{1, 1}, 0}, {Shape{100, 70}, 0},
      {Shape{7, 9, 11}, 1}, {Shape{65, 33}, -1}, {Shape{0, 5}, 1},    {Shape{5, 0}, 1}};
  using Scan = Tensor (*)(const Tensor&, std::int64_t, ScanOptions, Location);
  const std::vector<std::pair<const char*, Scan>> ops = {
      {"cumsum", &cumsum}, {"cumprod", &cumprod}, {"cummax", &cummax}, {"cummin", &cummin}};
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64})
    for (const auto& [shape, axis] : scans) {
      Tensor x = random_tensor(dtype, shape, 72);
      if (is_floating(dtype) && shape.numel() > 3) x = where(x > 1.5, std::numeric_limits<double>::quiet_NaN(), x);
      for (const auto& [name, op] : ops)
        for (bool exclusive : {false, true})
          for (bool reverse : {false, true}) {
            const ScanOptions options{.exclusive = exclusive, .reverse = reverse};
            const std::string what = std::string(name) + " " + std::string(to_string(dtype)) + shape.to_string() +
                                     " axis " + std::to_string(axis) + (exclusive ? " exclusive" : "") +
                                     (reverse ? " reverse" : "");
            expect_same(op(x, axis, options, Location::current()), op(x.to(gpu), axis, options, Location::current()), 0,
                        what);
          }
    }
  Tensor flags = random_tensor(DType::f32, {40, 37}, 73) > 0.0;
  expect_same(cummax(flags, 1), cummax(flags.to(gpu), 1), 0, "bool cummax");
  expect_same(cumsum(flags, 0, {.reverse = true}), cumsum(flags.to(gpu), 0, {.reverse = true}), 0, "bool cumsum");
}

}  // namespace
