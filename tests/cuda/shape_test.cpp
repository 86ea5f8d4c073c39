// CUDA shape kernels against the CPU's, exactly: transpose (tiled and
// gathered), slice (negative steps), broadcast_to, concat, reshape-likes,
// gather (and its index errors), nonzero.

#include "api/tensor_impl.h"
#include "cuda/cuda_test_support.h"

#include <limits>

namespace {

using namespace kiln;
using kiln::testing::expect_same;
using kiln::testing::gpu;
using kiln::testing::random_tensor;

const std::vector<DType> every = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};

TEST(CudaShape, Transpose) {
  KILN_REQUIRE_GPU();
  const std::vector<std::pair<Shape, std::vector<std::int64_t>>> cases = {
      {Shape{64, 32}, {1, 0}},           {Shape{1000, 37}, {1, 0}},        {Shape{5, 67, 33}, {0, 2, 1}},
      {Shape{5, 67, 33}, {2, 0, 1}},     {Shape{5, 67, 33}, {1, 0, 2}},    {Shape{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}},
      {Shape{1, 40, 1, 50}, {3, 2, 1, 0}}, {Shape{}, {}},                  {Shape{0, 7}, {1, 0}},
      {Shape{2048, 2048}, {1, 0}}};
  for (DType dtype : every)
    for (const auto& [shape, permutation] : cases) {
      Tensor x = random_tensor(dtype, shape, 91);
      expect_same(transpose(x, permutation), transpose(x.to(gpu), permutation), 0,
                  "transpose " + std::string(to_string(dtype)) + shape.to_string());
    }
}

TEST(CudaShape, SliceAndBroadcast) {
  KILN_REQUIRE_GPU();
  const std::vector<std::pair<Shape, SliceOptions>> slices = {
      {Shape{100}, {.start = {3}, .stop = {90}, .step = {7}}},
      {Shape{100}, {.start = {-1}, .stop = {-101}, .step = {-1}}},
      {Shape{30, 40}, {.start = {5, 2}, .stop = {25, 38}, .step = {2, 3}}},
      {Shape{30, 40}, {.start = {10}, .stop = {20}}},
      {Shape{30, 40}, {.start = {29, 39}, .stop = {-31, -41}, .step = {-3, -2}}},
      {Shape{6, 7, 8}, {.start = {1, 0, 7}, .stop = {5, 7, 0}, .step = {2, 1, -1}}},
      {Shape{10}, {.start = {5}, .stop = {5}}}};
  for (DType dtype : every) {
    for (const auto& [shape, options] : slices) {
      Tensor x = random_tensor(dtype, shape, 92);
      expect_same(slice(x, options), slice(x.to(gpu), options), 0, "slice " + shape.to_string());
    }
    for (const auto& [from, to] : std::vector<std::pair<Shape, Shape>>{{Shape{}, Shape{1000003}},
                                                                      {Shape{41}, Shape{37, 41}},
                                                                      {Shape{37, 1}, Shape{37, 41}},
                                                                      {Shape{3, 1, 5}, Shape{2, 3, 4, 5}},
                                                                      {Shape{5}, Shape{0, 5}}}) {
      Tensor x = random_tensor(dtype, from, 93);
      expect_same(broadcast_to(x, to), broadcast_to(x.to(gpu), to), 0, "broadcast_to " + to.to_string());
    }
  }
}

TEST(CudaShape, ReshapeLikesShareTheBuffer) {
  KILN_REQUIRE_GPU();
  Tensor x = random_tensor(DType::f32, {6, 4}, 94);
  Tensor y = x.to(gpu);
  expect_same(reshape(x, {3, 8}), reshape(y, {3, 8}));
  expect_same(expand_dims(x, 1), expand_dims(y, 1));
  expect_same(squeeze(expand_dims(x, 0)), squeeze(expand_dims(y, 0)));
  EXPECT_EQ(reshape(y, {24}).impl().array.buffer, y.impl().array.buffer);
}

TEST(CudaShape, Concat) {
  KILN_REQUIRE_GPU();
  for (DType dtype : every) {
    for (std::int64_t axis : {0, 1, 2}) {
      Shape a{4, 6, 10}, b{4, 6, 10}, c{4, 6, 10};
      std::vector<Shape*> along = {&a, &b, &c};
      std::int64_t sizes[] = {3, 0, 5};
      for (int i = 0; i < 3; ++i) (*along[static_cast<std::size_t>(i)])[static_cast<int>(axis)] = sizes[i];
      Tensor x = random_tensor(dtype, a, 95), y = random_tensor(dtype, b, 96), z = random_tensor(dtype, c, 97);
      expect_same(concat({x, y, z}, axis), concat({x.to(gpu), y.to(gpu), z.to(gpu)}, axis), 0,
                  "concat " + std::string(to_string(dtype)) + " axis " + std::to_string(axis));
    }
  }
  // Rows of odd byte widths (1-byte units) and of 16-byte multiples.
  Tensor p = random_tensor(DType::boolean, {1000, 3}, 98), q = random_tensor(DType::boolean, {1000, 5}, 99);
  expect_same(concat({p, q}, 1), concat({p.to(gpu), q.to(gpu)}, 1), 0, "concat bool rows");
  Tensor r = random_tensor(DType::f32, {1000, 8}, 100), s = random_tensor(DType::f32, {1000, 4}, 101);
  expect_same(concat({r, s}, 1), concat({r.to(gpu), s.to(gpu)}, 1), 0, "concat f32 rows");
}

TEST(CudaShape, Gather) {
  KILN_REQUIRE_GPU();
  for (DType dtype : every)
    for (std::int64_t axis : {0, 1, 2}) {
      Tensor params = random_tensor(dtype, {5, 6, 7}, 110);
      const std::int64_t size = params.dim(static_cast<int>(axis));
      // Negative and repeated indices, in a [2, 3] block.
      Tensor indices = from_vector(std::vector<std::int64_t>{size - 1, 0, -1, -size, 2, 2}, {2, 3});
      expect_same(gather(params, indices, axis), gather(params.to(gpu), indices.to(gpu), axis), 0,
                  "gather " + std::string(to_string(dtype)) + " axis " + std::to_string(axis));
    }
  // Rows of 16-byte multiples, odd byte widths (1-byte units), i32 indices, many of them; an empty index list.
  Tensor table = random_tensor(DType::f32, {1000, 64}, 111), flags = random_tensor(DType::boolean, {300, 3}, 112);
  std::vector<std::int32_t> tokens;
  for (std::int32_t i = 0; i < 4096; ++i) tokens.push_back((i * 7919) % 1000 - (i % 3 == 0 ? 1000 : 0));
  Tensor many = from_vector(tokens, {64, 64});
  expect_same(gather(table, many), gather(table.to(gpu), many.to(gpu)), 0, "gather f32 rows");
  Tensor few = from_vector(std::vector<std::int32_t>{299, -300, 7});
  expect_same(gather(flags, few), gather(flags.to(gpu), few.to(gpu)), 0, "gather bool rows");
  Tensor none = zeros({0}, DType::i32);
  expect_same(gather(table, none), gather(table.to(gpu), none.to(gpu)), 0, "gather of no index");
}

TEST(CudaShape, GatherReportsTheFirstIndexOutOfRangeAndStaysUsable) {
  KILN_REQUIRE_GPU();
  Tensor table = random_tensor(DType::f32, {8, 4}, 113).to(gpu);
  for (DType dtype : {DType::i32, DType::i64}) {
    Tensor bad = cast(from_vector(std::vector<std::int64_t>{1, 9, -9, 8}), dtype).to(gpu);
    try {
      gather(table, bad);
      ADD_FAILURE() << "no error for " << to_string(dtype);
    } catch (const ValueError& error) {
      EXPECT_NE(
          std::string(error.what()).find("index 9 (element 1 of the indices) is out of range for axis 0 of size 8"),
          std::string::npos)
          << error.what();
      EXPECT_NE(error.location().find("shape_test.cpp"), std::string::npos) << error.what();
    }
    Tensor good = cast(from_vector(std::vector<std::int64_t>{1, 7, -8}), dtype);
    expect_same(gather(table.to(Device::cpu()), good), gather(table, good.to(gpu)), 0, "gather after an error");
  }
  Tensor empty_axis = zeros({0, 4}).to(gpu);
  EXPECT_THROW(gather(empty_axis, from_vector(std::vector<std::int32_t>{0}).to(gpu)), ValueError);
}

// take_along_axis equals the CPU's for every dtype and axis, and reports the first index out of range.
TEST(CudaShape, TakeAlongAxis) {
  KILN_REQUIRE_GPU();
  for (DType dtype : every)
    for (std::int64_t axis : {0, 1, 2}) {
      Tensor values = random_tensor(dtype, {5, 6, 7}, 114);
      const std::int64_t size = values.dim(static_cast<int>(axis));
      Shape shape({5, 6, 7});
      shape[static_cast<int>(axis)] = 2;
      std::vector<std::int64_t> picks;
      for (std::int64_t i = 0; i < shape.numel(); ++i) picks.push_back((i * 31) % (2 * size) - size);
      Tensor indices = from_vector(picks, shape);
      expect_same(take_along_axis(values, indices, axis), take_along_axis(values.to(gpu), indices.to(gpu), axis), 0,
                  "take_along_axis " + std::string(to_string(dtype)) + " axis " + std::to_string(axis));
    }
  Tensor values = random_tensor(DType::f32, {2, 4}, 115).to(gpu);
  Tensor bad = from_vector(std::vector<std::int32_t>{1, 2, 3, 4, 5, -5}, {2, 3}).to(gpu);
  try {
    take_along_axis(values, bad, 1);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& error) {
    EXPECT_NE(std::string(error.what()).find("index 4 (element 3 of the indices) is out of range for axis 1 of size 4"),
              std::string::npos)
        << error.what();
  }
  Tensor good = from_vector(std::vector<std::int32_t>{1, 2, 3, -4, 0, 0}, {2, 3});
  expect_same(take_along_axis(values.to(Device::cpu()), good, 1), take_along_axis(values, good.to(gpu), 1), 0,
              "take_along_axis after an error");
}

TEST(CudaShape, Nonzero) {
  KILN_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : every)
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{17}, Shape{30, 41}, Shape{3, 100003}, Shape{2, 3, 4, 5}}) {
      // About half zeros.
      Tensor x = random_tensor(dtype, shape, 102);
      Tensor mostly = where(random_tensor(DType::boolean, shape, 103), x, zeros(shape, dtype));
      expect_same(nonzero(mostly), nonzero(mostly.to(gpu)), 0,
                  "nonzero " + std::string(to_string(dtype)) + shape.to_string());
      Tensor none = zeros(shape, dtype);
      expect_same(nonzero(none), nonzero(none.to(gpu)), 0, "nonzero of zeros");
    }
  Tensor special = from_vector<double>({0.0, -0.0, nan, 1e-300, 0.0}, Shape{5});  // NaN counts, -0 does not
  expect_same(nonzero(special), nonzero(special.to(gpu)), 0, "nonzero special");
}

}  // namespace
