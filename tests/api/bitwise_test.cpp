// bitwise_and, _or, _xor, _not and the shifts (and their operators &, |, ^, ~, <<, >>): NumPy's values, written out
// here, on both executors -- negative integers in two's complement, bools, counts outside [0, bits), scalars and
// broadcasting -- and floats refused under the op's name and line. (Random operands against the reference: the
// kernels' tests and tests/jit/differential_ops_test.cpp.)

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::error_message;

const char* executor(bool jit) { return jit ? "JIT" : "standard"; }

template <class T>
void expect_integer_bits(DType dtype) {
  constexpr T lowest = std::numeric_limits<T>::lowest(), highest = std::numeric_limits<T>::max();
  constexpr T bits = sizeof(T) * 8;
  const std::vector<T> a = {12, -12, 0x55, -1, lowest, highest, 7, -7, 1, -1};
  const std::vector<T> b = {10, 10, 0x0f, 3, 1, bits - 1, bits, bits, -1, 40};
  // NumPy: 12 & 10 = 8, -12 & 10 = 0 (...10100 & 01010), 0x55 & 0x0f = 5, -1 & 3 = 3, ...
  const std::vector<T> both = {8, 0, 5, 3, 0, highest & (bits - 1), 7 & bits, -7 & bits, 1, 40};
  const std::vector<T> either = {14, -2, 0x5f, -1, lowest | 1, highest, 7 | bits, -7 | bits, -1, -1};
  const std::vector<T> one = {6, -2, 0x5a, -4, lowest | 1, highest ^ (bits - 1), 7 ^ bits, -7 ^ bits, -2, -41};
  const std::vector<T> inverted = {-13, 11, -0x56, 0, highest, lowest, -8, 6, -2, 0};
  // Counts: 10 and 3 in range; bits - 1 moves the top bit; bits, -1 and 40 (past i32) shift everything out.
  const T shifted_40 = bits == 32 ? T(0) : static_cast<T>(std::int64_t{-1} * (std::int64_t{1} << 40));
  const std::vector<T> left = {12 << 10, -12 * (1 << 10), 0x55 << 15, -8, 0, lowest, 0, 0, 0, shifted_40};
  const std::vector<T> right = {0, -1, 0, -1, lowest / 2, 0, 0, -1, 0, -1};
  const auto size = static_cast<std::int64_t>(a.size());
  for (bool jit : {false, true}) {
    const auto compute =
        function([](Tensor x, Tensor y) { return std::vector<Tensor>{x & y, x | y, x ^ y, ~x, x << y, x >> y}; },
                 {.jit_compile = jit});
    const auto results = compute(cast(from_vector(a, {size}), dtype), cast(from_vector(b, {size}), dtype));
    const std::string what = std::string(to_string(dtype)) + " on the " + executor(jit) + " executor";
    ASSERT_EQ(results[0].dtype(), dtype) << what;
    EXPECT_EQ(results[0].template to_vector<T>(), both) << "bitwise_and, " << what;
    EXPECT_EQ(results[1].template to_vector<T>(), either) << "bitwise_or, " << what;
    EXPECT_EQ(results[2].template to_vector<T>(), one) << "bitwise_xor, " << what;
    EXPECT_EQ(results[3].template to_vector<T>(), inverted) << "bitwise_not, " << what;
    EXPECT_EQ(results[4].template to_vector<T>(), left) << "left_shift, " << what;
    EXPECT_EQ(results[5].template to_vector<T>(), right) << "right_shift, " << what;
  }
}

TEST(Bitwise, IntegersInTwosComplementWithCountsInAndOutOfRange) {
  expect_integer_bits<std::int32_t>(DType::i32);
  expect_integer_bits<std::int64_t>(DType::i64);
}

TEST(Bitwise, BoolsAreLogical) {
  const Tensor p = from_vector(std::vector<bool>{false, false, true, true}, {4});
  const Tensor q = from_vector(std::vector<bool>{false, true, false, true}, {4});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor p, Tensor q) {
          return std::vector<Tensor>{p & q, p | q, p ^ q, ~p, bitwise_not(q)};
        },
        {.jit_compile = jit});
    const auto results = compute(p, q);
    ASSERT_EQ(results[0].dtype(), DType::boolean) << executor(jit);
    EXPECT_EQ(results[0].to_vector<bool>(), (std::vector<bool>{false, false, false, true})) << executor(jit);
    EXPECT_EQ(results[1].to_vector<bool>(), (std::vector<bool>{false, true, true, true})) << executor(jit);
    EXPECT_EQ(results[2].to_vector<bool>(), (std::vector<bool>{false, true, true, false})) << executor(jit);
    EXPECT_EQ(results[3].to_vector<bool>(), (std::vector<bool>{true, true, false, false})) << executor(jit);
    EXPECT_EQ(results[4].to_vector<bool>(), (std::vector<bool>{true, false, true, false})) << executor(jit);
  }
}

// Masks and fields, as integer code writes them: scalars take the tensor's dtype, bools promote to integers, and a
// row of counts broadcasts.
TEST(Bitwise, ScalarsPromotionAndBroadcasting) {
  const Tensor x = from_vector(std::vector<std::int32_t>{0x1234, -0x1234, 0x7fff0000, 5}, {2, 2});
  const Tensor flags = from_vector(std::vector<bool>{true, false}, {2});
  const Tensor counts = from_vector(std::vector<std::int32_t>{4, 8}, {2});
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x, Tensor flags, Tensor counts) {
          return std::vector<Tensor>{(x >> 4) & 0xff, 1 << counts, x | flags, 0xf0 ^ x, x >> counts};
        },
        {.jit_compile = jit});
    const auto results = compute(x, flags, counts);
    const char* where = executor(jit);
    EXPECT_EQ(results[0].to_vector<std::int32_t>(), (std::vector<std::int32_t>{0x23, 0xdc, 0x00, 0x00})) << where;
    EXPECT_EQ(results[1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{16, 256})) << where;
    ASSERT_EQ(results[2].dtype(), DType::i32) << where;
    EXPECT_EQ(results[2].to_vector<std::int32_t>(), (std::vector<std::int32_t>{0x1235, -0x1234, 0x7fff0001, 5}))
        << where;
    EXPECT_EQ(results[3].to_vector<std::int32_t>(), (std::vector<std::int32_t>{0x12c4, -0x12c4, 0x7fff00f0, 0xf5}))
        << where;
    EXPECT_EQ(results[4].to_vector<std::int32_t>(), (std::vector<std::int32_t>{0x123, -0x13, 0x7fff000, 0})) << where;
  }
}

TEST(Bitwise, FloatsAreRefusedUnderTheOpsNameAndLine) {
  const Tensor x = from_vector(std::vector<float>{1.5f, 2.0f}, {2});
  const Tensor flags = from_vector(std::vector<bool>{true, false}, {2});
  EXPECT_THROW(bitwise_not(x), DTypeError);
  EXPECT_THROW(bitwise_xor(x, x), DTypeError);
  EXPECT_THROW(flags << flags, DTypeError);  // shifts take integers only
  const std::string line = "bitwise_test.cpp:" + std::to_string(__LINE__ + 1);
  const std::string message = error_message([&] { (void)(x & 1); });
  EXPECT_NE(message.find("bitwise_and"), std::string::npos) << message;
  EXPECT_NE(message.find(line), std::string::npos) << message;
  EXPECT_EQ((full({}, 6, DType::i32) & 3).item<std::int32_t>(), 2);  // still usable
}

}  // namespace
}  // namespace kiln
