#pragma once
// Helpers of the CUDA tests: skipping without a GPU, and comparing a result
// computed on the GPU with the CPU's.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/cuda.h>
#include <kiln/kiln.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace kiln::testing {

inline bool has_gpu() {
  for (const DeviceInfo& info : devices())
    if (info.device.is_cuda()) return true;
  return false;
}

// The GPU the tests run on.
inline constexpr Device gpu = Device::cuda(0);

// Distance in units in the last place between two floats of one type (0 for
// equal values, NaN and NaN included; huge for NaN against a number).
template <class T> std::int64_t ulp_distance(T a, T b) {
  if (a == b || (a != a && b != b)) return 0;
  if (a != a || b != b) return std::int64_t{1} << 62;
  using Bits = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  auto ordered = [](T value) {
    auto bits = static_cast<std::int64_t>(std::bit_cast<Bits>(value));
    return bits < 0 ? -(bits & std::numeric_limits<Bits>::max()) : bits;
  };
  std::int64_t distance = ordered(a) - ordered(b);
  return distance < 0 ? -distance : distance;
}

// Checks that `actual` (any device, as `expected`) has `expected`'s dtype and shape and
// equals it element for element (NaN equals NaN; for floats, at most
// `max_ulps` apart).
inline void expect_same(const Tensor& expected, const Tensor& actual, std::int64_t max_ulps = 0,
                        const std::string& what = "") {
  ASSERT_EQ(expected.dtype(), actual.dtype()) << what;
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  Tensor host = actual.to(Device::cpu()), expected_host = expected.to(Device::cpu());
  std::int64_t count = expected.numel(), reported = 0;
  visit_dtype(expected.dtype(), [&]<class T>() {
    const T* want = static_cast<const T*>(expected_host.data());
    const T* got = static_cast<const T*>(host.data());
    for (std::int64_t i = 0; i < count && reported < 5; ++i) {
      bool equal;
      if constexpr (std::is_floating_point_v<T>) equal = ulp_distance(want[i], got[i]) <= max_ulps;
      else equal = want[i] == got[i];
      if (!equal) {
        ++reported;
        ADD_FAILURE() << what << " element " << i << " of " << to_string(expected.dtype())
                      << expected.shape().to_string() << ": CPU " << +want[i] << ", GPU " << +got[i];
      }
    }
  });
}

// Checks |actual - expected| <= tolerance * scale + tiny per element, where
// `scale` (same shape, CPU) bounds the magnitude of the terms that were
// summed (sum of |x|, or |A| @ |B|).
inline void expect_close_scaled(const Tensor& expected, const Tensor& actual, const Tensor& scale, double tolerance,
                                const std::string& what = "") {
  ASSERT_EQ(expected.shape(), actual.shape()) << what;
  std::vector<double> want = expected.to_vector<double>(), got = actual.to_vector<double>();
  std::vector<double> bound = cast(scale, DType::f64).to_vector<double>();
  int reported = 0;
  for (std::size_t i = 0; i < want.size() && reported < 5; ++i) {
    bool same_nan = std::isnan(want[i]) && std::isnan(got[i]);
    if (!same_nan && !(std::abs(want[i] - got[i]) <= tolerance * bound[i] + 1e-300)) {
      ++reported;
      ADD_FAILURE() << what << " element " << i << ": CPU " << want[i] << ", GPU " << got[i] << " (allowed "
                    << tolerance * bound[i] << ")";
    }
  }
}

}  // namespace kiln::testing

// Skips the test when kiln sees no GPU, saying why.
#define KILN_REQUIRE_GPU()                                                                     \
  do {                                                                                         \
    if (!::kiln::testing::has_gpu())                                                           \
      GTEST_SKIP() << "no CUDA device: " << ::kiln::cuda_unavailable_reason();                 \
  } while (0)
