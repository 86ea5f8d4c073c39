#include "support/test_support.h"

#include "runtime/parallel.h"

#include <cmath>
#include <mutex>
#include <random>

namespace kiln::testing {

Tensor random_tensor(DType dtype, const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  auto count = static_cast<std::size_t>(shape.numel());
  switch (dtype) {
    case DType::f32:
    case DType::f64:
    case DType::bf16:  // the values rounded once by the cast
    case DType::f16: {
      std::normal_distribution<double> normal(0.0, 1.0);
      std::vector<double> values(count);
      for (double& value : values) {
        double sample = normal(generator);
        value = sample + (sample >= 0 ? 0.05 : -0.05);
      }
      return cast(from_vector(values, shape), dtype);
    }
    case DType::i32:
    case DType::i64: {
      std::uniform_int_distribution<std::int64_t> uniform(1, 9);
      std::bernoulli_distribution negative(0.5);
      std::vector<std::int64_t> values(count);
      for (auto& value : values) value = uniform(generator) * (negative(generator) ? -1 : 1);
      return cast(from_vector(values, shape), dtype);
    }
    case DType::boolean: {
      std::bernoulli_distribution coin(0.5);
      std::vector<bool> values(count);
      for (std::size_t i = 0; i < count; ++i) values[i] = coin(generator);
      return from_vector(values, shape);
    }
  }
  return {};
}

Tensor random_uniform(DType dtype, const Shape& shape, double low, double high, std::uint64_t seed) {
  return random::uniform(shape, {.seed = seed, .low = low, .high = high, .dtype = dtype});
}

std::vector<float> random_floats(std::int64_t count, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::uniform_real_distribution<float> magnitude(0.25f, 1.25f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (auto& value : values) value = (generator() & 1 ? -1.0f : 1.0f) * magnitude(generator);
  return values;
}

std::vector<std::uint16_t> random_bf16_bits(std::int64_t count, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::uint16_t> values(static_cast<std::size_t>(count));
  for (std::uint16_t& value : values) value = to_bfloat16(normal(generator)).bits;
  return values;
}

std::pair<std::vector<float>, std::vector<float>> floats_with_two_threads_and_one(
    const std::function<Tensor()>& compute) {
  const int original = runtime::thread_count();
  runtime::set_thread_count(2);
  std::vector<float> two = compute().to_vector<float>();
  runtime::set_thread_count(1);
  std::vector<float> one = compute().to_vector<float>();
  runtime::set_thread_count(original);
  return {std::move(two), std::move(one)};
}

namespace {
std::mutex log_mutex;
}

std::string error_message(const std::function<void()>& statement) {
  try {
    statement();
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

CapturedLog::CapturedLog() {
  previous_ = set_log_handler([this](LogLevel, const std::string& message) {
    std::lock_guard lock(log_mutex);
    messages_.push_back(message);
  });
}

CapturedLog::~CapturedLog() { set_log_handler(std::move(previous_)); }

int CapturedLog::count(const std::string& fragment) const {
  std::lock_guard lock(log_mutex);
  int found = 0;
  for (const std::string& message : messages_) found += message.find(fragment) != std::string::npos ? 1 : 0;
  return found;
}

}  // namespace kiln::testing
