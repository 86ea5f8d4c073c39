// Tensor basics: creation, conversion, printing, random numbers, views of
// shape information, and memory statistics.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <sstream>

namespace kiln {
namespace {

TEST(Tensor, CreationAndConversion) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.shape(), Shape({2, 3}));
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ones({2}, DType::i64).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(full({}, 2.5, DType::f64).item<double>(), 2.5);
  Tensor v = from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.dtype(), DType::i32);
  EXPECT_EQ(v.to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  double raw[] = {0.5, -1.5};
  EXPECT_EQ(from_pointer(raw, {2}).to_vector<double>(), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(arange(5).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1.0, 2.0, 0.25).to_vector<float>(), (std::vector<float>{1.0f, 1.25f, 1.5f, 1.75f}));
  EXPECT_EQ(from_vector<bool>({true, false}).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(zeros({0, 4}).numel(), 0);
  EXPECT_EQ(zeros({}).rank(), 0);
  EXPECT_THROW(zeros({1, 2, 3, 4, 5, 6, 7, 8, 9}), ShapeError);
  EXPECT_EQ(v.dim(-1), 3);
}

TEST(Tensor, FloatToIntegerConversionSaturates) {
  Tensor x = from_vector<double>({1e30, -1e30, std::nan(""), -2.7});
  EXPECT_EQ(x.to_vector<std::int32_t>(), (std::vector<std::int32_t>{2147483647, -2147483647 - 1, 0, -2}));
}

TEST(Tensor, PrintingIsReadableAndSummarized) {
  Tensor v = from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(v.to_string(), "i32[2,3] cpu\n[[1, 2, 3],\n [4, 5, 6]]");
  std::string big = arange(5000).to_string();
  EXPECT_NE(big.find("[0, 1, 2, ..., 4997, 4998, 4999]"), std::string::npos) << big;
  EXPECT_EQ(full({}, true, DType::boolean).to_string(), "bool[] cpu\ntrue");
}

TEST(Tensor, DTypeShapeAndDevicePrintAsToStringDoes) {
  std::ostringstream stream;
  stream << DType::f32 << " " << DType::boolean << " " << Shape({2, 3}) << " " << Shape() << " " << Device::cpu() << " "
         << Device::cuda(1);
  EXPECT_EQ(stream.str(), "f32 bool [2,3] [] cpu cuda:1");
  Tensor x = from_vector<std::int64_t>({1, 2}, {2});
  std::ostringstream described;
  described << x.dtype() << x.shape() << " on " << x.device();
  EXPECT_EQ(described.str(),
            std::string(to_string(x.dtype())) + x.shape().to_string() + " on " + x.device().to_string());
}

TEST(Random, ReproducibleAndDistributedAsAsked) {
  Tensor a = random::normal({100000}, {.seed = 5}), b = random::normal({100000}, {.seed = 5});
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), random::normal({100000}, {.seed = 6}).to_vector<float>());
  double mean = reduce_mean(cast(a, DType::f64)).item<double>();
  double variance = reduce_mean(square(cast(a, DType::f64) - mean)).item<double>();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(variance, 1.0, 0.02);
  Tensor u = random::uniform({100000}, {.seed = 1, .low = -2, .high = 3});
  EXPECT_GE(reduce_min(u).item<float>(), -2.0f);
  EXPECT_LT(reduce_max(u).item<float>(), 3.0f);
  EXPECT_NEAR(reduce_mean(u).item<float>(), 0.5f, 0.03f);
}

TEST(Memory, StatisticsFollowTensorLifetimes) {
  std::int64_t before = memory_statistics().bytes_in_use;
  {
    Tensor big = zeros({1 << 20});
    EXPECT_EQ(memory_statistics().bytes_in_use - before, 4 << 20);
  }
  EXPECT_EQ(memory_statistics().bytes_in_use, before);
  EXPECT_GE(memory_statistics().peak_bytes_in_use, before + (4 << 20));
}

}  // namespace
}  // namespace kiln
