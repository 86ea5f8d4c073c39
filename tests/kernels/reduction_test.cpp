// Tests of the CPU reduction kernels (reduce_sum/mean/max/min/prod, argmax, argmin)
// against plain reference loops written here: double for floats, 64-bit
// integers with wraparound for integers. Inputs are random (fixed seeds,
// never zero); shapes cover rank 0, zero-size axes, size-1 axes, every
// subset of axes of a rank-3 and a rank-4 tensor, and inputs large enough
// to be split across threads. Results must not depend on the thread count.

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::ir::Op;
using kiln::runtime::Array;
namespace cpu = kiln::kernels::cpu;
using std::int64_t;

const Op reduce_ops[] = {Op::reduce_sum, Op::reduce_mean, Op::reduce_max, Op::reduce_min, Op::reduce_prod};
const DType all_dtypes[] = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};

// The dtypes each op's kernel accepts (the api layer casts the others).
bool accepts(Op op, DType dtype) {
  if (op == Op::reduce_mean) return kiln::is_floating(dtype);
  if (op == Op::reduce_sum || op == Op::reduce_prod) return dtype != DType::boolean;
  return true;
}

Array make(DType dtype, const Shape& shape) { return kiln::runtime::allocate_array(dtype, shape); }

// Random values, never zero: floats uniform in [0.1, 2] with a random sign
// (for prod: magnitudes exp(U(-0.01, 0.01)) so that products of a million
// values stay in range), integers in
// [1, 9] with a random sign, bools of both values (`true_fraction` of ones).
void fill_random(const Array& array, std::uint64_t seed, Op op = Op::reduce_sum, double true_fraction = 0.5) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<double> uniform(op == Op::reduce_prod ? -0.01 : 0.1,
                                                 op == Op::reduce_prod ? 0.01 : 2.0);
  auto magnitude = [&](std::mt19937_64& g) { return op == Op::reduce_prod ? std::exp(uniform(g)) : uniform(g); };
  std::uniform_int_distribution<int> small(1, 9), sign(0, 1);
  std::bernoulli_distribution coin(true_fraction);
  kiln::visit_dtype(array.dtype, [&]<class T>() {
    T* data = array.mutable_data<T>();
    for (int64_t i = 0; i < array.shape.numel(); ++i) {
      double s = sign(generator) ? 1.0 : -1.0;
      if constexpr (std::is_same_v<T, std::uint8_t>)
        data[i] = coin(generator) ? 1 : 0;
      else if constexpr (std::is_floating_point_v<T>)
        data[i] = static_cast<T>(s * magnitude(generator));
      else
        data[i] = static_cast<T>(s * small(generator));
    }
  });
}

double get(const Array& array, int64_t i) {
  return kiln::visit_dtype(array.dtype, [&]<class T>() { return static_cast<double>(array.data<T>()[i]); });
}
int64_t get_int(const Array& array, int64_t i) {
  return kiln::visit_dtype(array.dtype, [&]<class T>() { return static_cast<int64_t>(array.data<T>()[i]); });
}

// The output shape of reducing `axes` of `shape`.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdims) {
  std::vector<int64_t> dims;
  for (int axis = 0; axis < shape.rank(); ++axis) {
    bool reduced = std::find(axes.begin(), axes.end(), axis) != axes.end();
    if (!reduced)
      dims.push_back(shape[axis]);
    else if (keepdims)
      dims.push_back(1);
  }
  return Shape(dims);
}

// For each input element, the flat index of the output element it reduces into.
std::vector<int64_t> output_index_of(const Shape& shape, const std::vector<int64_t>& axes) {
  const int rank = shape.rank();
  std::vector<int64_t> out_stride(static_cast<std::size_t>(rank), 0);
  int64_t stride = 1;
  for (int axis = rank - 1; axis >= 0; --axis)
    if (std::find(axes.begin(), axes.end(), axis) == axes.end()) {
      out_stride[static_cast<std::size_t>(axis)] = stride;
      stride *= shape[axis];
    }
  std::vector<int64_t> result(static_cast<std::size_t>(shape.numel()));
  std::vector<int64_t> index(static_cast<std::size_t>(rank), 0);
  int64_t out = 0;
  for (int64_t flat = 0; flat < shape.numel(); ++flat) {
    result[static_cast<std::size_t>(flat)] = out;
    for (int axis = rank - 1; axis >= 0; --axis) {
      auto a = static_cast<std::size_t>(axis);
      out += out_stride[a];
      if (++index[a] < shape[axis]) break;
      out -= out_stride[a] * index[a];
      index[a] = 0;
    }
  }
  return result;
}

template <class R>
std::vector<R> values_of(const Array& array) {
  return kiln::visit_dtype(array.dtype, [&]<class T>() {
    const T* data = array.data<T>();
    return std::vector<R>(data, data + array.shape.numel());
  });
}

// Checks the kernel's output against reference loops over the input.
void check_reduction(Op op, const Array& input, const std::vector<int64_t>& axes, const Array& output) {
  const int64_t outputs = output.shape.numel();
  std::vector<int64_t> target = output_index_of(input.shape, axes);
  int64_t count = 1;
  for (int64_t axis : axes) count *= input.shape[static_cast<int>(axis)];
  std::string where = std::string(kiln::ir::name(op)) + " of " + std::string(kiln::to_string(input.dtype)) +
                      input.shape.to_string() + " over axes {";
  for (int64_t axis : axes) where += std::to_string(axis) + ",";
  where += "}";

  if (kiln::is_floating(input.dtype)) {
    const double eps = input.dtype == DType::f32 ? 0x1p-23 : 0x1p-52;
    std::vector<double> value(static_cast<std::size_t>(outputs)), magnitude(static_cast<std::size_t>(outputs), 0);
    double init = op == Op::reduce_prod  ? 1.0
                  : op == Op::reduce_max ? -INFINITY
                  : op == Op::reduce_min ? INFINITY
                                         : 0.0;
    std::fill(value.begin(), value.end(), init);
    std::vector<double> inputs = values_of<double>(input);
    for (int64_t i = 0; i < input.shape.numel(); ++i) {
      double x = inputs[static_cast<std::size_t>(i)];
      auto o = static_cast<std::size_t>(target[static_cast<std::size_t>(i)]);
      magnitude[o] += std::fabs(x);
      if (op == Op::reduce_sum || op == Op::reduce_mean)
        value[o] += x;
      else if (op == Op::reduce_prod)
        value[o] *= x;
      else if (std::isnan(x) || std::isnan(value[o]))
        value[o] = NAN;
      else if (op == Op::reduce_max)
        value[o] = std::max(value[o], x);
      else
        value[o] = std::min(value[o], x);
    }
    for (int64_t o = 0; o < outputs; ++o) {
      auto u = static_cast<std::size_t>(o);
      double expected = op == Op::reduce_mean ? value[u] / static_cast<double>(count) : value[u];
      double actual = get(output, o);
      if (std::isnan(expected)) {
        ASSERT_TRUE(std::isnan(actual)) << where << " at output " << o;
        continue;
      }
      if (std::isinf(expected)) {
        ASSERT_EQ(actual, expected) << where << " at output " << o;
        continue;
      }
      double tolerance = 0;
      if (op == Op::reduce_sum) tolerance = 8 * (std::log2(static_cast<double>(count) + 1) + 4) * eps * magnitude[u];
      if (op == Op::reduce_mean)
        tolerance =
            8 * (std::log2(static_cast<double>(count) + 1) + 4) * eps * magnitude[u] / static_cast<double>(count);
      if (op == Op::reduce_prod) tolerance = 2 * (static_cast<double>(count) + 2) * eps * std::fabs(expected);
      if (op == Op::reduce_max || op == Op::reduce_min)
        ASSERT_EQ(actual, expected) << where << " at output " << o;
      else
        ASSERT_NEAR(actual, expected, tolerance) << where << " at output " << o;
    }
    return;
  }
  // Integers and bool: exact, with two's-complement wraparound for sum/prod.
  const int bits = static_cast<int>(kiln::size_of(input.dtype)) * 8;
  auto wrap = [&](std::uint64_t v) -> int64_t {
    if (bits == 64) return static_cast<int64_t>(v);
    if (bits == 32) return static_cast<int64_t>(static_cast<std::int32_t>(static_cast<std::uint32_t>(v)));
    return static_cast<int64_t>(v & 0xff);
  };
  int64_t lowest = bits == 64   ? std::numeric_limits<int64_t>::lowest()
                   : bits == 32 ? std::numeric_limits<std::int32_t>::lowest()
                                : 0;
  int64_t highest = bits == 64   ? std::numeric_limits<int64_t>::max()
                    : bits == 32 ? std::numeric_limits<std::int32_t>::max()
                                 : 1;
  std::vector<std::uint64_t> acc(static_cast<std::size_t>(outputs), op == Op::reduce_prod ? 1 : 0);
  std::vector<int64_t> extreme(static_cast<std::size_t>(outputs), op == Op::reduce_max ? lowest : highest);
  std::vector<int64_t> inputs = values_of<int64_t>(input);
  for (int64_t i = 0; i < input.shape.numel(); ++i) {
    int64_t x = inputs[static_cast<std::size_t>(i)];
    auto o = static_cast<std::size_t>(target[static_cast<std::size_t>(i)]);
    if (op == Op::reduce_sum) acc[o] += static_cast<std::uint64_t>(x);
    if (op == Op::reduce_prod) acc[o] *= static_cast<std::uint64_t>(x);
    if (op == Op::reduce_max) extreme[o] = std::max(extreme[o], x);
    if (op == Op::reduce_min) extreme[o] = std::min(extreme[o], x);
  }
  for (int64_t o = 0; o < outputs; ++o) {
    auto u = static_cast<std::size_t>(o);
    int64_t expected = (op == Op::reduce_sum || op == Op::reduce_prod) ? wrap(acc[u]) : extreme[u];
    ASSERT_EQ(get_int(output, o), expected) << where << " at output " << o;
  }
}

Array run_reduce(Op op, const Array& input, const std::vector<int64_t>& axes, bool keepdims = false) {
  Array output = make(input.dtype, reduced_shape(input.shape, axes, keepdims));
  cpu::reduce(op, axes, input, output);
  return output;
}

// Every subset of the axes of `shape`, as sorted lists.
std::vector<std::vector<int64_t>> all_subsets(int rank) {
  std::vector<std::vector<int64_t>> subsets;
  for (int mask = 0; mask < (1 << rank); ++mask) {
    std::vector<int64_t> axes;
    for (int axis = 0; axis < rank; ++axis)
      if (mask & (1 << axis)) axes.push_back(axis);
    subsets.push_back(axes);
  }
  return subsets;
}

void check_all_subsets(const Shape& shape, std::uint64_t seed) {
  for (Op op : reduce_ops)
    for (DType dtype : all_dtypes) {
      if (!accepts(op, dtype)) continue;
      Array input = make(dtype, shape);
      fill_random(input, seed++, op);
      for (const auto& axes : all_subsets(shape.rank())) {
        Array output = run_reduce(op, input, axes, /*keepdims=*/axes.size() % 2 == 1);
        check_reduction(op, input, axes, output);
      }
    }
}

TEST(ReductionKernels, EverySubsetOfAxesRank3) { check_all_subsets(Shape{5, 7, 3}, 100); }
TEST(ReductionKernels, EverySubsetOfAxesRank4) { check_all_subsets(Shape{3, 5, 7, 2}, 200); }
TEST(ReductionKernels, EverySubsetOfAxesWithSizeOneAxes) { check_all_subsets(Shape{1, 9, 1, 4}, 300); }
TEST(ReductionKernels, EverySubsetOfAxesLongRowsAndColumns) { check_all_subsets(Shape{3, 33, 1500}, 400); }

TEST(ReductionKernels, RankZero) {
  for (Op op : reduce_ops)
    for (DType dtype : all_dtypes) {
      if (!accepts(op, dtype)) continue;
      Array input = make(dtype, Shape{});
      fill_random(input, 7, op);
      Array output = run_reduce(op, input, {});
      check_reduction(op, input, {}, output);
    }
}

TEST(ReductionKernels, NoAxesIsACopy) {
  for (Op op : reduce_ops) {
    Array input = make(DType::f32, Shape{4, 5});
    fill_random(input, 8, op);
    Array output = run_reduce(op, input, {});
    EXPECT_EQ(std::memcmp(input.raw(), output.raw(), input.bytes()), 0) << kiln::ir::name(op);
  }
}

// Empty reductions give the identity: sum 0, prod 1, max -inf / lowest,
// min +inf / highest, mean NaN. An empty kept axis gives an empty output.
TEST(ReductionKernels, ZeroSizeAxes) {
  for (const Shape& shape : {Shape{0}, Shape{0, 5}, Shape{3, 0, 4}, Shape{2, 3, 0}})
    for (Op op : reduce_ops)
      for (DType dtype : all_dtypes) {
        if (!accepts(op, dtype)) continue;
        Array input = make(dtype, shape);
        for (const auto& axes : all_subsets(shape.rank())) {
          Array output = run_reduce(op, input, axes);
          check_reduction(op, input, axes, output);
        }
      }
  Array input = make(DType::f32, Shape{0, 3});
  Array mean = run_reduce(Op::reduce_mean, input, {0});
  EXPECT_TRUE(std::isnan(mean.data<float>()[0]));
  EXPECT_EQ(run_reduce(Op::reduce_max, input, {0}).data<float>()[1], -INFINITY);
  EXPECT_EQ(run_reduce(Op::reduce_min, input, {0}).data<float>()[2], INFINITY);
  EXPECT_EQ(run_reduce(Op::reduce_prod, input, {0}).data<float>()[0], 1.0f);
  Array integers = make(DType::i32, Shape{3, 0});
  EXPECT_EQ(run_reduce(Op::reduce_max, integers, {1}).data<std::int32_t>()[0],
            std::numeric_limits<std::int32_t>::lowest());
  EXPECT_EQ(run_reduce(Op::reduce_min, integers, {1}).data<std::int32_t>()[0],
            std::numeric_limits<std::int32_t>::max());
  Array bools = make(DType::boolean, Shape{0});
  EXPECT_EQ(run_reduce(Op::reduce_max, bools, {0}).data<std::uint8_t>()[0], 0);  // any() of nothing
  EXPECT_EQ(run_reduce(Op::reduce_min, bools, {0}).data<std::uint8_t>()[0], 1);  // all() of nothing
}

// Shapes that exercise every kernel path, large enough to be split across
// threads: long rows (leaf trees split among threads), many short rows,
// columns with several row groups, a middle axis, tiny rows and columns.
const std::vector<std::pair<Shape, std::vector<int64_t>>> large_cases = {
    {Shape{1000003}, {0}},        {Shape{3, 200001}, {1}},     {Shape{4099, 257}, {1}},
    {Shape{20000, 3}, {1}},       {Shape{1001, 33}, {1}},      {Shape{1500, 1031}, {0}},
    {Shape{100003, 3}, {0}},      {Shape{7, 600, 33}, {1}},    {Shape{37, 1000, 3}, {0, 2}},
    {Shape{513, 2, 515}, {0, 2}}, {Shape{3, 4097, 5}, {0, 1}}, {Shape{2, 3, 70000}, {0, 1, 2}},
};

TEST(ReductionKernels, LargeInputsEveryOpAndDtype) {
  std::uint64_t seed = 500;
  for (const auto& [shape, axes] : large_cases)
    for (Op op : reduce_ops)
      for (DType dtype : all_dtypes) {
        if (!accepts(op, dtype)) continue;
        Array input = make(dtype, shape);
        fill_random(input, seed++, op, dtype == DType::boolean && op == Op::reduce_min ? 0.9999 : 0.0001);
        check_reduction(op, input, axes, run_reduce(op, input, axes));
      }
}

// Bitwise-identical results for 1, 2, 3 and 5 threads.
TEST(ReductionKernels, ResultsDoNotDependOnTheThreadCount) {
  int original = kiln::runtime::thread_count();
  struct Case {
    Op op;
    std::vector<int64_t> axes;
    Array input, reference;
  };
  std::vector<Case> cases;
  std::uint64_t seed = 900;
  kiln::runtime::set_thread_count(1);
  for (const auto& [shape, axes] : large_cases)
    for (Op op : {Op::reduce_sum, Op::reduce_mean, Op::reduce_prod, Op::reduce_max})
      for (DType dtype : {DType::f32, DType::f64}) {
        Array input = make(dtype, shape);
        fill_random(input, seed++, op);
        cases.push_back({op, axes, input, run_reduce(op, input, axes)});
      }
  for (int threads : {2, 3, 5}) {
    kiln::runtime::set_thread_count(threads);
    for (const Case& c : cases) {
      Array output = run_reduce(c.op, c.input, c.axes);
      ASSERT_EQ(std::memcmp(c.reference.raw(), output.raw(), c.reference.bytes()), 0)
          << kiln::ir::name(c.op) << " " << kiln::to_string(c.input.dtype) << c.input.shape.to_string() << " with "
          << threads << " threads";
    }
  }
  kiln::runtime::set_thread_count(original);
}

// A naive float loop loses everything past 2^24; blocked summation keeps the
// relative error near eps.
TEST(ReductionKernels, FloatSumsAreAccurate) {
  const int64_t n = int64_t{1} << 25;
  Array input = make(DType::f32, Shape{n});
  std::mt19937_64 generator(11);
  std::uniform_real_distribution<float> values(0.5f, 1.5f);
  double exact = 0;
  float* data = input.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) {
    data[i] = values(generator);
    exact += data[i];
  }
  float sum = run_reduce(Op::reduce_sum, input, {0}).data<float>()[0];
  EXPECT_LT(std::fabs(sum - exact) / exact, 1e-6);
  Array columns = make(DType::f32, Shape{n / 64, 64});
  std::memcpy(columns.mutable_raw(), input.raw(), input.bytes());
  Array column_sums = run_reduce(Op::reduce_sum, columns, {0});
  for (int c = 0; c < 64; ++c) {
    double exact_column = 0;
    for (int64_t r = 0; r < n / 64; ++r) exact_column += data[r * 64 + c];
    ASSERT_LT(std::fabs(column_sums.data<float>()[c] - exact_column) / exact_column, 1e-6) << "column " << c;
  }
}

TEST(ReductionKernels, IntegerSumAndProdWrapAround) {
  Array input = make(DType::i32, Shape{3, 5});
  std::int32_t* data = input.mutable_data<std::int32_t>();
  for (int i = 0; i < 15; ++i) data[i] = std::numeric_limits<std::int32_t>::max() - i * 1000;
  for (Op op : {Op::reduce_sum, Op::reduce_prod})
    for (const auto& axes : all_subsets(2)) check_reduction(op, input, axes, run_reduce(op, input, axes));
  Array input64 = make(DType::i64, Shape{4099});
  for (int i = 0; i < 4099; ++i) input64.mutable_data<int64_t>()[i] = std::numeric_limits<int64_t>::max() / 3 + i;
  for (Op op : {Op::reduce_sum, Op::reduce_prod}) check_reduction(op, input64, {0}, run_reduce(op, input64, {0}));
}

// NaN anywhere makes max and min NaN, in every kernel path; infinities are
// ordinary values.
TEST(ReductionKernels, MaxAndMinPropagateNaN) {
  std::uint64_t seed = 1300;
  for (const auto& [shape, axes] : large_cases)
    for (DType dtype : {DType::f32, DType::f64})
      for (Op op : {Op::reduce_max, Op::reduce_min, Op::reduce_sum}) {
        Array input = make(dtype, shape);
        fill_random(input, seed, op);
        std::mt19937_64 generator(seed++);
        std::uniform_int_distribution<int64_t> position(0, shape.numel() - 1);
        kiln::visit_dtype(dtype, [&]<class T>() {
          if constexpr (std::is_floating_point_v<T>) {
            T* data = input.mutable_data<T>();
            for (int i = 0; i < 5; ++i) data[position(generator)] = std::numeric_limits<T>::quiet_NaN();
            for (int i = 0; i < 5; ++i) data[position(generator)] = std::numeric_limits<T>::infinity();
            for (int i = 0; i < 5; ++i) data[position(generator)] = -std::numeric_limits<T>::infinity();
          }
        });
        check_reduction(op, input, axes, run_reduce(op, input, axes));
      }
}

TEST(ReductionKernels, BoolMaxIsAnyMinIsAll) {
  Array input = make(DType::boolean, Shape{4, 70});
  std::uint8_t* data = input.mutable_data<std::uint8_t>();
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 70; ++c) data[r * 70 + c] = r == 0 ? 0 : r == 1 ? 1 : r == 2 ? (c == 69) : (c != 33);
  Array any = run_reduce(Op::reduce_max, input, {1});
  Array all = run_reduce(Op::reduce_min, input, {1});
  const std::uint8_t expected_any[] = {0, 1, 1, 1}, expected_all[] = {0, 1, 0, 0};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(any.data<std::uint8_t>()[r], expected_any[r]) << "row " << r;
    EXPECT_EQ(all.data<std::uint8_t>()[r], expected_all[r]) << "row " << r;
  }
}

TEST(ReductionKernels, RejectsDtypesTheApiLayerCasts) {
  Array bools = make(DType::boolean, Shape{3});
  Array integers = make(DType::i32, Shape{3});
  EXPECT_THROW(run_reduce(Op::reduce_sum, bools, {0}), kiln::DTypeError);
  EXPECT_THROW(run_reduce(Op::reduce_prod, bools, {0}), kiln::DTypeError);
  EXPECT_THROW(run_reduce(Op::reduce_mean, integers, {0}), kiln::DTypeError);
}

// ---- argmax and argmin ------------------------------------------------------------

// First index of the maximum (argmin: minimum) along `axis`; NaN counts as either.
void check_arg_reduction(Op op, const Array& input, int64_t axis, const Array& output) {
  const Shape& shape = input.shape;
  int64_t outer = 1, inner = 1, length = shape[static_cast<int>(axis)];
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  for (int i = static_cast<int>(axis) + 1; i < shape.rank(); ++i) inner *= shape[i];
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t b = 0; b < inner; ++b) {
      int64_t best = 0;
      double best_value = get(input, a * length * inner + b);
      for (int64_t r = 1; r < length && !std::isnan(best_value); ++r) {
        double x = get(input, (a * length + r) * inner + b);
        if (std::isnan(x) || (op == Op::argmin ? x < best_value : x > best_value)) {
          best = r;
          best_value = x;
        }
      }
      ASSERT_EQ(output.data<int64_t>()[a * inner + b], best)
          << kiln::ir::name(op) << " of " << kiln::to_string(input.dtype) << shape.to_string() << " axis " << axis
          << " at (" << a << ", " << b << ")";
    }
}

Array run_arg_reduction(Op op, const Array& input, int64_t axis) {
  Array output = make(DType::i64, reduced_shape(input.shape, {axis}, false));
  cpu::arg_reduce(op, axis, input, output);
  return output;
}

// Small value ranges make ties common, so "first index" is tested too.
void fill_with_ties(const Array& array, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::uniform_int_distribution<int> value(1, 6);
  kiln::visit_dtype(array.dtype, [&]<class T>() {
    T* data = array.mutable_data<T>();
    for (int64_t i = 0; i < array.shape.numel(); ++i) {
      int v = value(generator);
      if constexpr (std::is_same_v<T, std::uint8_t>)
        data[i] = v > 3;
      else
        data[i] = static_cast<T>(v - 7);  // negative, never zero
    }
  });
}

constexpr Op arg_reductions[] = {Op::argmax, Op::argmin};

// `op` of random values, with many ties for odd seeds, against check_arg_reduction.
void check_random_arg_reduction(Op op, DType dtype, const Shape& shape, int64_t axis, std::uint64_t seed) {
  Array input = make(dtype, shape);
  if (seed % 2)
    fill_with_ties(input, seed);
  else
    fill_random(input, seed);
  check_arg_reduction(op, input, axis, run_arg_reduction(op, input, axis));
}

TEST(ArgReductionKernels, EveryAxisAndDtype) {
  std::uint64_t seed = 2000;
  for (Op op : arg_reductions)
    for (const Shape& shape : {Shape{7}, Shape{5, 7, 3}, Shape{3, 5, 7, 2}, Shape{1, 9, 1}, Shape{2, 0, 3}})
      for (DType dtype : all_dtypes)
        for (int axis = 0; axis < shape.rank(); ++axis)
          if (shape[axis] != 0) check_random_arg_reduction(op, dtype, shape, axis, seed++);
}

TEST(ArgReductionKernels, LargeInputs) {
  std::uint64_t seed = 2100;
  for (Op op : arg_reductions)
    for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
             {Shape{1000003}, 0}, {Shape{300, 4099}, 1}, {Shape{4099, 300}, 0}, {Shape{3, 5000, 7}, 1}})
      for (DType dtype : all_dtypes) check_random_arg_reduction(op, dtype, shape, axis, seed++);
}

TEST(ArgReductionKernels, FirstNaNWinsAndExtremesInLaterBlocks) {
  for (Op op : arg_reductions)
    for (DType dtype : {DType::f32, DType::f64})
      for (int64_t length : {int64_t{5}, int64_t{4096}, int64_t{4097}, int64_t{100000}}) {
        Array input = make(dtype, Shape{3, length});
        fill_random(input, 77);
        const double sign = op == Op::argmin ? -1 : 1;
        kiln::visit_dtype(dtype, [&]<class T>() {
          if constexpr (std::is_floating_point_v<T>) {
            T* data = input.mutable_data<T>();
            // Row 0: two NaNs after an extreme value; row 1: an infinity late and a tie;
            // row 2: only the last element is the extreme.
            data[1] = static_cast<T>(sign * 100);
            data[length - 2] = NAN;
            data[length - 1] = NAN;
            data[length + length / 2] = static_cast<T>(sign * INFINITY);
            data[length + length - 1] = static_cast<T>(sign * INFINITY);
            data[2 * length + length - 1] = static_cast<T>(sign * 1000);
          }
        });
        Array output = run_arg_reduction(op, input, 1);
        check_arg_reduction(op, input, 1, output);
        EXPECT_EQ(output.data<int64_t>()[0], length - 2);
        EXPECT_EQ(output.data<int64_t>()[1], length / 2);
        EXPECT_EQ(output.data<int64_t>()[2], length - 1);
      }
}

// Every pair of positions p < q of rows up to 140 long holding the row's extreme twice (then NaN twice, for floats):
// the index is p's. Covers where the vector pass puts p and q -- the same lane, another lane or another of its
// interleaved sets of lanes (4 of up to 16 lanes: 64 elements), the last whole vectors after them and the scalar
// tail -- for each dtype's vector width.
TEST(ArgReductionKernels, FirstOfTwoExtremesWhereverTheyFall) {
  for (Op op : arg_reductions)
    for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64})
      for (int64_t length = 1; length <= 140; ++length)
        for (bool nan : {false, true}) {
          if (nan && !is_floating(dtype)) continue;
          const int64_t rows = length * (length + 1) / 2;  // (p, q) with p <= q; p == q: one extreme
          Array input = make(dtype, Shape{rows, length});
          std::vector<int64_t> expected;
          kiln::visit_dtype(dtype, [&]<class T>() {
            if constexpr (std::is_same_v<T, std::uint8_t>) return;
            T* data = input.mutable_data<T>();
            std::mt19937_64 generator(static_cast<std::uint64_t>(length));
            std::uniform_int_distribution<int> value(-50, 50);
            const T extreme = static_cast<T>(op == Op::argmin ? -1000 : 1000);
            int64_t row = 0;
            for (int64_t p = 0; p < length; ++p)
              for (int64_t q = p; q < length; ++q, ++row) {
                T* values = data + row * length;
                for (int64_t i = 0; i < length; ++i) values[i] = static_cast<T>(value(generator));
                if constexpr (std::is_floating_point_v<T>) {
                  if (nan) {
                    values[(q + 1) % length] = extreme;  // a number's extreme elsewhere does not win over a NaN
                    values[p] = values[q] = NAN;
                    expected.push_back(p);
                    continue;
                  }
                }
                values[p] = values[q] = extreme;
                expected.push_back(p);
              }
          });
          Array output = run_arg_reduction(op, input, 1);
          for (int64_t row = 0; row < rows; ++row)
            ASSERT_EQ(output.data<int64_t>()[row], expected[static_cast<std::size_t>(row)])
                << kiln::ir::name(op) << " of " << kiln::to_string(dtype) << " rows of " << length << ", row " << row
                << (nan ? " (NaNs)" : "");
        }
}

}  // namespace
