// Every kiln::Error class, with its message checked: the op, the operands'
// shapes and dtypes, and the user's file:line.

#include "ir/parser.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::random_tensor;

// Runs `statement`, expects an error of type E whose message contains every
// fragment, and returns the message.
template <class E, class Statement>
std::string expect_error(Statement statement, std::initializer_list<std::string> fragments) {
  try {
    statement();
  } catch (const E& error) {
    std::string message = error.what();
    for (const std::string& fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << message;
    return message;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "wrong exception type: " << other.what();
    return {};
  }
  ADD_FAILURE() << "no exception";
  return {};
}

std::string this_line(int line) { return "errors_test.cpp:" + std::to_string(line); }

TEST(Errors, ShapeErrorNamesOpOperandsAndLine) {
  Tensor a = random_tensor(DType::f32, {2, 3}, 1), b = random_tensor(DType::f32, {4}, 2);
  int line = __LINE__ + 1;
  auto message = expect_error<ShapeError>([&] { (void)(a + b); }, {"kiln::ShapeError: add:", "f32[2,3], f32[4]"});
  EXPECT_NE(message.find(this_line(line)), std::string::npos) << message;
  expect_error<ShapeError>([&] { matmul(a, a); }, {"matmul", "contracting dimensions differ (3 vs 2)"});
  expect_error<ShapeError>([&] { reduce_sum(a, {2}); }, {"reduce_sum", "axis 2 is out of range for rank 2"});
  expect_error<ShapeError>([&] { reshape(a, {4, -1}); }, {"reshape", "6 elements", "f32[2,3]"});
  expect_error<ShapeError>([&] { transpose(a, {0, 0}); }, {"transpose", "repeats axis 0"});
  expect_error<ShapeError>([&] { concat({a, b}, 0); }, {"concat", "one rank"});
  expect_error<ShapeError>([&] { squeeze(a, {0}); }, {"squeeze", "cannot squeeze axis 0 of size 2"});
  expect_error<ShapeError>([&] { broadcast_to(a, {3, 3}); }, {"broadcast_to", "cannot broadcast to [3,3]"});
}

TEST(Errors, DTypeErrorNamesTheDtype) {
  Tensor flags = random_tensor(DType::boolean, {3}, 3);
  int line = __LINE__ + 1;
  auto message = expect_error<DTypeError>([&] { neg(flags); }, {"kiln::DTypeError: neg:", "bool", "bool[3]"});
  EXPECT_NE(message.find(this_line(line)), std::string::npos) << message;
  expect_error<DTypeError>([&] { (void)(flags + flags); }, {"add", "does not accept bool operands"});
  expect_error<DTypeError>([&] { random::normal({2}, {.dtype = DType::i32}); }, {"random::normal", "i32"});
}

TEST(Errors, DeviceErrorForAMissingGpu) {
  expect_error<DeviceError>([&] { zeros({2}, DType::f32, Device::cuda(0)); }, {"cuda:0"});
  Tensor a = random_tensor(DType::f32, {2}, 4);
  expect_error<DeviceError>([&] { a.to(Device::cuda(0)); }, {"Tensor::to", "cuda:0"});
}

TEST(Errors, ValueErrorForBadValues) {
  Tensor a = random_tensor(DType::f32, {2}, 5);
  int line = __LINE__ + 1;
  auto message = expect_error<ValueError>([&] { a.item<float>(); }, {"Tensor::item", "one element", "f32[2]"});
  EXPECT_NE(message.find(this_line(line)), std::string::npos) << message;
  expect_error<ValueError>([&] { (void)(Tensor() + a); }, {"add", "undefined"});
  expect_error<ValueError>([&] { random::uniform({2}, {.low = 1, .high = 0}); }, {"random::uniform", "low < high"});
  expect_error<ShapeError>([&] { from_vector<float>({1, 2, 3}, {2, 2}); }, {"from_vector", "3 values do not fill"});
}

TEST(Errors, ParseErrorSaysWhere) {
  expect_error<ParseError>([] { ir::parse("func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = f32[2] frobnicate(%0)\n}\n"); },
                           {"frobnicate", "2:"});
}

TEST(Errors, EveryErrorIsAKilnError) {
  Tensor a = random_tensor(DType::f32, {2, 3}, 6);
  EXPECT_THROW(reduce_sum(a, {5}), Error);
  EXPECT_THROW(neg(random_tensor(DType::boolean, {1}, 7)), Error);
  EXPECT_THROW(a.item<float>(), Error);
}

}  // namespace
}  // namespace kiln
