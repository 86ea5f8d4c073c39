// kiln::config::flush_denormals: subnormal operands and results are 0 in kiln's CPU kernels (standard and JIT,
// on every thread of the pool) while it is set, IEEE subnormals otherwise, and the caller's own floating-point
// environment is the same after a call as before.

#include "runtime/float_environment.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>
#include <vector>

namespace kiln {
namespace {

// Sets kiln::config::flush_denormals for one scope.
class FlushDenormals {
 public:
  explicit FlushDenormals(bool flush) : previous_(config::flush_denormals.exchange(flush)) {}
  ~FlushDenormals() { config::flush_denormals = previous_; }

 private:
  bool previous_;
};

constexpr float subnormal = 1e-40f;  // below the smallest normal float, 1.18e-38

// Enough elements that the kernels split the work across the pool's threads.
std::vector<float> many(float value) { return std::vector<float>(1 << 20, value); }

TEST(FlushDenormals, OffKeepsSubnormalsOnFlushesThemInBothExecutorsAndEveryThread) {
  const Tensor tiny = from_vector(many(subnormal), {1 << 20});
  const Tensor small = from_vector(many(-100.0f), {1 << 20});  // e^-100 = 3.7e-44, a subnormal result
  for (bool jit : {false, true}) {
    const auto compute = function(
        [](Tensor x, Tensor y) {
          return std::vector<Tensor>{x * 1.5, exp(y), x + y};
        },
        {.jit_compile = jit});
    const std::string executor = jit ? "JIT" : "standard";
    {
      const std::vector<Tensor> results = compute(tiny, small);
      const std::vector<float> scaled = results[0].to_vector<float>(), decayed = results[1].to_vector<float>();
      EXPECT_EQ(scaled.front(), subnormal * 1.5f) << executor;
      EXPECT_EQ(scaled.back(), subnormal * 1.5f) << executor;
      EXPECT_GT(decayed.back(), 0.0f) << executor;
    }
    FlushDenormals flush(true);
    const std::vector<Tensor> results = compute(tiny, small);
    for (const float value : results[0].to_vector<float>()) ASSERT_EQ(value, 0.0f) << executor << ": x * 1.5";
    for (const float value : results[1].to_vector<float>()) ASSERT_EQ(value, 0.0f) << executor << ": exp(-100)";
    for (const float value : results[2].to_vector<float>()) ASSERT_EQ(value, -100.0f) << executor << ": x + y";
  }
  // Eager ops too.
  FlushDenormals flush(true);
  EXPECT_EQ((tiny * 2.0).to_vector<float>().back(), 0.0f);
}

// The control bits (MXCSR's exception flags, bits 0-5, are sticky status that any arithmetic may set).
std::uint32_t control_bits() { return runtime::float_control() & ~std::uint32_t{0x3f}; }

TEST(FlushDenormals, TheCallersEnvironmentIsRestored) {
  const std::uint32_t before = control_bits();
  const Tensor x = from_vector(many(subnormal), {1 << 20});
  {
    FlushDenormals flush(true);
    (void)(x * 2.0).to_vector<float>();
    auto jit = function([](Tensor x) { return x * 2.0; }, {.jit_compile = true});
    (void)jit(x).to_vector<float>();
  }
  EXPECT_EQ(control_bits(), before);
  // The caller's own arithmetic keeps IEEE subnormals (a volatile keeps the compiler from folding it).
  volatile float value = subnormal;
  EXPECT_GT(value * 1.5f, 0.0f);
}

}  // namespace
}  // namespace kiln
