#pragma once
// Shared helpers for kiln's tests: random inputs (never zeros) and capturing
// kiln's warnings.

#include <kiln/kiln.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

// A random tensor of `dtype` and `shape` with no zeros: floats from a normal
// distribution pushed away from 0, integers in [-9, 9] without 0, bools of
// both values.
Tensor random_tensor(DType dtype, const Shape& shape, std::uint64_t seed);

// Random values in [low, high] (floats only).
Tensor random_uniform(DType dtype, const Shape& shape, double low, double high, std::uint64_t seed);

// `count` random floats in +-[0.25, 1.25], for kernel tests on raw buffers: never zero, so a missed or
// doubled term always shows.
std::vector<float> random_floats(std::int64_t count, std::uint64_t seed);

// `count` bf16 bit patterns of normally distributed values (rounded to nearest even), for kernel tests on raw
// bf16 buffers.
std::vector<std::uint16_t> random_bf16_bits(std::int64_t count, std::uint64_t seed);

// The float results of `compute` run with two threads and then with one (the thread count is restored): a kernel
// whose results must not depend on how its work is split gives the same bits both times.
std::pair<std::vector<float>, std::vector<float>> floats_with_two_threads_and_one(
    const std::function<Tensor()>& compute);

// The message of the kiln::Error that `statement` throws, or "no error".
std::string error_message(const std::function<void()>& statement);

// Collects kiln's log messages while alive.
class CapturedLog {
 public:
  CapturedLog();
  ~CapturedLog();
  const std::vector<std::string>& messages() const { return messages_; }
  // Messages containing `fragment`.
  int count(const std::string& fragment) const;

 private:
  std::vector<std::string> messages_;
  LogHandler previous_;
};

}  // namespace kiln::testing
