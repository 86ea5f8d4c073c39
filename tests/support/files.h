#pragma once
// Helpers for tests that write and read files: a fresh directory per test,
// whole files as byte strings, and exact comparison of tensors.

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kiln::testing {

// A directory for one test's files, removed with everything in it when the
// test ends; named after the test and the process, so parallel ctest runs do
// not meet.
class TemporaryDirectory {
 public:
  TemporaryDirectory() {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            ("kiln-" + std::string(test->test_suite_name()) + "-" + test->name() + "-" + std::to_string(getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;

  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream stream(path, std::ios::binary);
  stream.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The raw bytes of a concrete tensor's elements (on the CPU).
inline std::string element_bytes(const Tensor& tensor) {
  const Tensor host = tensor.to(Device::cpu());
  return std::string(static_cast<const char*>(host.data()),
                     static_cast<std::size_t>(host.numel()) * size_of(host.dtype()));
}

// Same dtype, shape and element bits (so NaNs compare equal to themselves).
inline ::testing::AssertionResult same_tensor(const Tensor& expected, const Tensor& actual) {
  if (expected.dtype() != actual.dtype() || !(expected.shape() == actual.shape()))
    return ::testing::AssertionFailure() << "expected " << to_string(expected.dtype()) << expected.shape().to_string()
                                         << ", got " << to_string(actual.dtype()) << actual.shape().to_string();
  if (element_bytes(expected) != element_bytes(actual))
    return ::testing::AssertionFailure() << "the elements differ: expected\n" << expected << "\ngot\n" << actual;
  return ::testing::AssertionSuccess();
}

// The message of the error of type E that `statement` throws; a test failure
// (and an empty string) when it throws nothing or something else.
template <class E, class Statement>
std::string error_of(Statement statement) {
  try {
    statement();
  } catch (const E& error) {
    return error.what();
  } catch (const std::exception& other) {
    ADD_FAILURE() << "wrong exception type: " << other.what();
    return {};
  }
  ADD_FAILURE() << "no exception";
  return {};
}

}  // namespace kiln::testing
