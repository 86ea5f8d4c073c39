// Tests of the CPU shape kernels (transpose, broadcast_to, slice, concat,
// nonzero) against index-by-index reference loops written here. Every dtype
// (1-, 4- and 8-byte elements), every permutation of rank 3 and rank 4,
// rank 0, zero-size and size-1 axes, negative and >1 steps, and inputs large
// enough to be split across threads.

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::runtime::Array;
namespace cpu = kiln::kernels::cpu;
using std::int64_t;

const DType all_dtypes[] = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};

Array make(DType dtype, const Shape& shape) { return kiln::runtime::allocate_array(dtype, shape); }

// Distinct, never-zero values (the element's index + 1, wrapped for bool to
// both 1 and 0 only where a test asks for zeros), so that a misplaced
// element shows.
void fill_distinct(const Array& array) {
  kiln::visit_dtype(array.dtype, [&]<class T>() {
    T* data = array.mutable_data<T>();
    for (int64_t i = 0; i < array.shape.numel(); ++i) {
      if constexpr (std::is_same_v<T, std::uint8_t>)
        data[i] = static_cast<T>(i % 2);
      else
        data[i] = static_cast<T>(i + 1);
    }
  });
}

// Byte-exact comparison of element `i` of `a` and element `j` of `b`.
bool same_element(const Array& a, int64_t i, const Array& b, int64_t j) {
  std::size_t size = kiln::size_of(a.dtype);
  return std::memcmp(static_cast<const char*>(a.raw()) + i * static_cast<int64_t>(size),
                     static_cast<const char*>(b.raw()) + j * static_cast<int64_t>(size), size) == 0;
}

// Row-major multi-index of flat index `flat` in `shape`.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(static_cast<std::size_t>(shape.rank()));
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    index[static_cast<std::size_t>(axis)] = flat % shape[axis];
    flat /= shape[axis];
  }
  return index;
}
int64_t ravel(const std::vector<int64_t>& index, const Shape& shape) {
  int64_t flat = 0;
  for (int axis = 0; axis < shape.rank(); ++axis) flat = flat * shape[axis] + index[static_cast<std::size_t>(axis)];
  return flat;
}

// ---- transpose --------------------------------------------------------------------

void check_transpose(const Shape& shape, const std::vector<int64_t>& permutation, DType dtype) {
  std::vector<int64_t> dims;
  for (int64_t axis : permutation) dims.push_back(shape[static_cast<int>(axis)]);
  Array input = make(dtype, shape), output = make(dtype, Shape(dims));
  fill_distinct(input);
  cpu::transpose(permutation, input, output);
  for (int64_t flat = 0; flat < output.shape.numel(); ++flat) {
    std::vector<int64_t> out_index = unravel(flat, output.shape), in_index(static_cast<std::size_t>(shape.rank()));
    for (std::size_t i = 0; i < permutation.size(); ++i)
      in_index[static_cast<std::size_t>(permutation[i])] = out_index[i];
    ASSERT_TRUE(same_element(output, flat, input, ravel(in_index, shape)))
        << "transpose " << kiln::to_string(dtype) << shape.to_string() << " element " << flat;
  }
}

void check_all_permutations(const Shape& shape) {
  std::vector<int64_t> permutation(static_cast<std::size_t>(shape.rank()));
  std::iota(permutation.begin(), permutation.end(), 0);
  do {
    for (DType dtype : all_dtypes) check_transpose(shape, permutation, dtype);
  } while (std::next_permutation(permutation.begin(), permutation.end()));
}

TEST(TransposeKernel, EveryPermutationRank3) { check_all_permutations(Shape{5, 7, 3}); }
TEST(TransposeKernel, EveryPermutationRank4) { check_all_permutations(Shape{3, 5, 7, 2}); }
TEST(TransposeKernel, EveryPermutationWithSizeOneAxes) { check_all_permutations(Shape{1, 6, 1, 5}); }
TEST(TransposeKernel, RankZeroAndOne) {
  for (DType dtype : all_dtypes) {
    check_transpose(Shape{}, {}, dtype);
    check_transpose(Shape{9}, {0}, dtype);
  }
}
TEST(TransposeKernel, ZeroSizeAxes) {
  for (DType dtype : all_dtypes) {
    check_transpose(Shape{0, 3}, {1, 0}, dtype);
    check_transpose(Shape{4, 0, 3}, {2, 0, 1}, dtype);
  }
}
// Big enough for tiles and threads: a 2-D transpose, a batched swap of the
// last two axes, and a permutation that moves the innermost axis outward.
TEST(TransposeKernel, LargeInputs) {
  for (DType dtype : all_dtypes) {
    check_transpose(Shape{1031, 777}, {1, 0}, dtype);
    check_transpose(Shape{3, 301, 257}, {0, 2, 1}, dtype);
    check_transpose(Shape{65, 33, 129}, {2, 1, 0}, dtype);
    check_transpose(Shape{40, 3, 1000}, {1, 0, 2}, dtype);
  }
}

// ---- broadcast_to -------------------------------------------------------------------

void check_broadcast(const Shape& from, const Shape& to, DType dtype) {
  Array input = make(dtype, from), output = make(dtype, to);
  fill_distinct(input);
  cpu::broadcast_to(input, output);
  int offset = to.rank() - from.rank();
  for (int64_t flat = 0; flat < to.numel(); ++flat) {
    std::vector<int64_t> index = unravel(flat, to), source(static_cast<std::size_t>(from.rank()));
    for (int axis = 0; axis < from.rank(); ++axis)
      source[static_cast<std::size_t>(axis)] = from[axis] == 1 ? 0 : index[static_cast<std::size_t>(axis + offset)];
    ASSERT_TRUE(same_element(output, flat, input, ravel(source, from)))
        << "broadcast " << from.to_string() << " to " << to.to_string() << " element " << flat;
  }
}

TEST(BroadcastToKernel, Shapes) {
  const std::pair<Shape, Shape> cases[] = {
      {Shape{}, Shape{4, 5}},
      {Shape{1}, Shape{7}},
      {Shape{5}, Shape{3, 5}},
      {Shape{3, 1}, Shape{3, 4}},
      {Shape{3, 1, 5}, Shape{2, 3, 4, 5}},
      {Shape{1, 1}, Shape{2, 3}},
      {Shape{2, 3}, Shape{2, 3}},
      {Shape{1, 3}, Shape{0, 3}},
      {Shape{4, 1, 1}, Shape{4, 3, 2}},
      {Shape{1, 6, 1}, Shape{5, 6, 7}},
      {Shape{300, 1}, Shape{300, 1001}},
      {Shape{1, 1001}, Shape{300, 1001}},
  };
  for (const auto& [from, to] : cases)
    for (DType dtype : all_dtypes) check_broadcast(from, to, dtype);
}

// ---- slice ---------------------------------------------------------------------------

void check_slice(const Shape& shape, const std::vector<int64_t>& start, const std::vector<int64_t>& step,
                 const Shape& result, DType dtype) {
  Array input = make(dtype, shape), output = make(dtype, result);
  fill_distinct(input);
  cpu::slice(start, step, input, output);
  for (int64_t flat = 0; flat < result.numel(); ++flat) {
    std::vector<int64_t> index = unravel(flat, result);
    for (std::size_t axis = 0; axis < index.size(); ++axis) index[axis] = start[axis] + index[axis] * step[axis];
    ASSERT_TRUE(same_element(output, flat, input, ravel(index, shape)))
        << "slice of " << shape.to_string() << " element " << flat;
  }
}

TEST(SliceKernel, StepsStartsAndSizes) {
  struct Case {
    Shape shape;
    std::vector<int64_t> start, step;
    Shape result;
  };
  const Case cases[] = {
      {Shape{}, {}, {}, Shape{}},
      {Shape{10}, {0}, {1}, Shape{10}},
      {Shape{10}, {9}, {-1}, Shape{10}},  // reversed
      {Shape{10}, {1}, {3}, Shape{3}},    // 1, 4, 7
      {Shape{10}, {8}, {-3}, Shape{3}},   // 8, 5, 2
      {Shape{10}, {0}, {1}, Shape{0}},    // empty
      {Shape{5, 7, 3}, {1, 6, 0}, {2, -2, 1}, Shape{2, 4, 3}},
      {Shape{5, 7, 3}, {4, 0, 2}, {-1, 1, -1}, Shape{5, 7, 3}},
      {Shape{3, 5, 7, 2}, {0, 1, 2, 1}, {1, 1, 1, 1}, Shape{3, 4, 5, 1}},
      {Shape{3, 5, 7, 2}, {2, 4, 6, 0}, {-1, -4, -3, 1}, Shape{3, 2, 3, 2}},
      {Shape{3, 5, 7, 2}, {0, 0, 0, 0}, {1, 1, 1, 1}, Shape{3, 0, 7, 2}},
      {Shape{1000, 999}, {1, 998}, {2, -1}, Shape{499, 999}},
      {Shape{2000, 513}, {3, 0}, {1, 1}, Shape{1990, 512}},
      // Short contiguous rows of every length from 1 to 9 elements (1 to 72 bytes), strided between.
      {Shape{40, 9, 9}, {1, 0, 0}, {3, 2, 1}, Shape{13, 5, 9}},
      {Shape{40, 9, 9}, {0, 1, 2}, {2, 1, 1}, Shape{20, 8, 7}},
      {Shape{40, 9, 9}, {0, 1, 4}, {2, 3, 1}, Shape{20, 3, 5}},
      {Shape{40, 9, 9}, {0, 0, 6}, {1, 2, 1}, Shape{40, 5, 3}},
      {Shape{40, 9, 9}, {0, 0, 7}, {1, 2, 1}, Shape{40, 5, 2}},
      {Shape{40, 9, 9}, {0, 0, 8}, {1, 2, 1}, Shape{40, 5, 1}},
      {Shape{40, 9, 9}, {0, 0, 3}, {1, 2, 1}, Shape{40, 5, 6}},
      {Shape{40, 9, 9}, {0, 0, 5}, {1, 2, 1}, Shape{40, 5, 4}},
  };
  for (const Case& c : cases)
    for (DType dtype : all_dtypes) check_slice(c.shape, c.start, c.step, c.result, dtype);
}

// ---- concat --------------------------------------------------------------------------

void check_concat(const std::vector<Shape>& shapes, int64_t axis, DType dtype) {
  std::vector<Array> inputs;
  Shape result = shapes[0];
  result[static_cast<int>(axis)] = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    inputs.push_back(make(dtype, shapes[i]));
    kiln::visit_dtype(dtype, [&]<class T>() {
      T* data = inputs.back().mutable_data<T>();
      for (int64_t j = 0; j < shapes[i].numel(); ++j)
        data[j] = static_cast<T>(std::is_same_v<T, std::uint8_t> ? (j + i) % 2 : j * 10 + static_cast<int64_t>(i) + 1);
    });
    result[static_cast<int>(axis)] += shapes[i][static_cast<int>(axis)];
  }
  Array output = make(dtype, result);
  cpu::concat(axis, inputs, output);
  for (int64_t flat = 0; flat < result.numel(); ++flat) {
    std::vector<int64_t> index = unravel(flat, result);
    auto& position = index[static_cast<std::size_t>(axis)];
    std::size_t which = 0;
    while (position >= shapes[which][static_cast<int>(axis)]) position -= shapes[which++][static_cast<int>(axis)];
    ASSERT_TRUE(same_element(output, flat, inputs[which], ravel(index, shapes[which])))
        << "concat on axis " << axis << " into " << result.to_string() << " element " << flat;
  }
}

TEST(ConcatKernel, AxesAndSizes) {
  for (DType dtype : all_dtypes) {
    check_concat({Shape{3}}, 0, dtype);
    check_concat({Shape{3}, Shape{0}, Shape{5}}, 0, dtype);
    check_concat({Shape{2, 3}, Shape{4, 3}}, 0, dtype);
    check_concat({Shape{2, 3}, Shape{2, 1}, Shape{2, 0}, Shape{2, 5}}, 1, dtype);
    check_concat({Shape{3, 5, 7}, Shape{3, 2, 7}}, 1, dtype);
    check_concat({Shape{3, 5, 7, 2}, Shape{3, 5, 1, 2}, Shape{3, 5, 4, 2}}, 2, dtype);
    check_concat({Shape{3, 5, 7, 2}, Shape{3, 5, 7, 3}}, 3, dtype);
    check_concat({Shape{0, 4}, Shape{0, 2}}, 1, dtype);
    check_concat({Shape{0, 4}, Shape{0, 4}}, 0, dtype);
    // Large: split into byte ranges that cut through rows and inputs.
    check_concat({Shape{300, 1001}, Shape{300, 77}, Shape{300, 3000}}, 1, dtype);
    check_concat({Shape{50001}, Shape{70001}}, 0, dtype);
    // Many short inputs (a convolution's taps of 3 channels), empty ones among them and last, over rows enough
    // that the byte ranges start inside rows and inputs: runs of 1 to 40 bytes.
    std::vector<Shape> taps(13, Shape{6000, 3});
    taps.insert(taps.begin() + 5, Shape{6000, 0});
    taps.push_back(Shape{6000, 1});
    taps.push_back(Shape{6000, 5});
    taps.push_back(Shape{6000, 0});
    check_concat(taps, 1, dtype);
  }
}

// ---- nonzero -------------------------------------------------------------------------

void check_nonzero(const Array& input) {
  Array output = cpu::nonzero(input);
  const Shape& shape = input.shape;
  std::vector<int64_t> expected;
  int64_t count = 0;
  for (int64_t flat = 0; flat < shape.numel(); ++flat) {
    bool nonzero = kiln::visit_dtype(input.dtype, [&]<class T>() { return input.data<T>()[flat] != T(0); });
    if (!nonzero) continue;
    ++count;
    for (int64_t i : unravel(flat, shape)) expected.push_back(i);
  }
  ASSERT_EQ(output.dtype, DType::i64);
  ASSERT_EQ(output.shape, Shape({count, shape.rank()})) << "nonzero of " << shape.to_string();
  for (std::size_t i = 0; i < expected.size(); ++i)
    ASSERT_EQ(output.data<int64_t>()[i], expected[i]) << "nonzero of " << shape.to_string() << " entry " << i;
}

// About a third zeros; floats also hold NaN (nonzero) and -0.0 (zero).
void fill_some_zeros(const Array& array, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::uniform_int_distribution<int> value(-3, 5);
  kiln::visit_dtype(array.dtype, [&]<class T>() {
    T* data = array.mutable_data<T>();
    for (int64_t i = 0; i < array.shape.numel(); ++i) {
      int v = value(generator);
      if constexpr (std::is_same_v<T, std::uint8_t>)
        data[i] = v > 1;
      else if constexpr (std::is_floating_point_v<T>)
        data[i] = v == -3 ? std::numeric_limits<T>::quiet_NaN() : v == -2 ? T(-0.0) : v <= 1 ? T(0) : T(v) / 3;
      else
        data[i] = v <= 1 && v >= -1 ? T(0) : static_cast<T>(v);
    }
  });
}

TEST(NonzeroKernel, EveryDtypeAndRank) {
  std::uint64_t seed = 1;
  for (DType dtype : all_dtypes)
    for (const Shape& shape : {Shape{7}, Shape{5, 7, 3}, Shape{3, 5, 7, 2}, Shape{1, 9, 1}, Shape{0}, Shape{4, 0, 3},
                               Shape{300007}, Shape{3, 70001}}) {
      Array input = make(dtype, shape);
      fill_some_zeros(input, seed++);
      check_nonzero(input);
    }
}

TEST(NonzeroKernel, RankZero) {
  for (DType dtype : all_dtypes) {
    Array one = make(dtype, Shape{}), zero = make(dtype, Shape{});
    kiln::visit_dtype(dtype, [&]<class T>() {
      one.mutable_data<T>()[0] = T(1);
      zero.mutable_data<T>()[0] = T(0);
    });
    EXPECT_EQ(cpu::nonzero(one).shape, Shape({1, 0}));
    EXPECT_EQ(cpu::nonzero(zero).shape, Shape({0, 0}));
  }
}

TEST(NonzeroKernel, AllZeroAndAllNonzero) {
  Array zeros = make(DType::f32, Shape{1000, 3});
  std::memset(zeros.mutable_raw(), 0, zeros.bytes());
  check_nonzero(zeros);
  Array ones = make(DType::i32, Shape{200003});
  fill_distinct(ones);
  check_nonzero(ones);
}

}  // namespace
