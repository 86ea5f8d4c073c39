// host_call and nonzero: eager, traced, and the JIT's fallback policy for
// them (they can never be compiled).

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdlib>

namespace kiln {
namespace {

using testing::CapturedLog;
using testing::random_tensor;

// A host callback: doubles its input on the host.
Tensor double_on_host(const std::vector<Tensor>& inputs) {
  std::vector<float> values = inputs.at(0).to_vector<float>();
  for (float& value : values) value *= 2;
  return from_vector(values, inputs[0].shape());
}

TEST(HostCall, RunsEagerlyAndInsideTraces) {
  Tensor a = random_tensor(DType::f32, {2, 3}, 1);
  Tensor eager = host_call(double_on_host, {a}, DType::f32, {2, 3});
  auto f = function([](Tensor x) { return host_call(double_on_host, {x + 1}, DType::f32, {2, 3}) - 1; });
  std::vector<float> x = a.to_vector<float>(), got = f(a).to_vector<float>(), direct = eager.to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_FLOAT_EQ(direct[i], 2 * x[i]);
    EXPECT_FLOAT_EQ(got[i], 2 * (x[i] + 1) - 1);
  }
}

TEST(HostCall, ACallbackReturningTheWrongShapeIsAValueError) {
  auto f = function([](Tensor x) { return host_call(double_on_host, {x}, DType::f32, {7}); });
  try {
    f(random_tensor(DType::f32, {3}, 2));
    FAIL() << "expected kiln::ValueError";
  } catch (const ValueError& error) {
    EXPECT_NE(std::string(error.what()).find("returned f32[3] but was declared to return f32[7]"), std::string::npos)
        << error.what();
  }
}

TEST(Nonzero, EagerAndTracedWithADataDependentShape) {
  Tensor mask = from_vector<std::int32_t>({0, 3, 0, -1, 5, 0}, {2, 3});
  EXPECT_EQ(nonzero(mask).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1, 1, 0, 1, 1}));
  auto f = function([](Tensor x) { return nonzero(x > 0) * 10; });
  std::string ir = f.get_compiler_ir(Stage::traced, mask);
  EXPECT_NE(ir.find("i64[?,2] nonzero"), std::string::npos) << ir;
  Tensor result = f(mask);
  EXPECT_EQ(result.shape(), Shape({2, 2}));
  EXPECT_EQ(result.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 10, 10, 10}));
}

TEST(CompileFailurePolicy, HostCallFallsBackWithOneWarningPerSignature) {
  CapturedLog log;
  auto f = function([](Tensor x) { return host_call(double_on_host, {x}, DType::f32, x.shape()) + 1; },
                    {.jit_compile = true, .name = "with_callback"});
  Tensor a = random_tensor(DType::f32, {4}, 3);
  for (int i = 0; i < 3; ++i) {
    std::vector<float> x = a.to_vector<float>(), got = f(a).to_vector<float>();
    for (std::size_t j = 0; j < x.size(); ++j) EXPECT_FLOAT_EQ(got[j], 2 * x[j] + 1);
  }
  EXPECT_EQ(log.count("with_callback"), 1);
  EXPECT_EQ(log.count("a host callback cannot be compiled"), 1);
  EXPECT_EQ(log.count("host_ops_test.cpp"), 1) << "the warning names the user's line";
  f(random_tensor(DType::f32, {5}, 4));
  EXPECT_EQ(log.count("with_callback"), 2) << "one warning per signature";
  EXPECT_EQ(f.statistics().fallbacks, 2);
}

TEST(CompileFailurePolicy, StrictModeThrowsCompileErrorAndStaysUsable) {
  auto f = function([](Tensor x) { return nonzero(x); }, {.jit_compile = true, .on_compile_failure = Fallback::none});
  Tensor a = random_tensor(DType::f32, {4}, 5);
  try {
    f(a);
    FAIL() << "expected kiln::CompileError";
  } catch (const CompileError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("its output shape depends on the data"), std::string::npos) << message;
    EXPECT_NE(message.find("nonzero"), std::string::npos) << message;
  }
  EXPECT_THROW(f(a), CompileError) << "still strict on the next call, not cached as a fallback";
}

TEST(CompileFailurePolicy, EnvironmentMakesEveryFunctionStrict) {
  setenv("KILN_JIT_STRICT", "1", 1);
  auto f = function([](Tensor x) { return host_call(double_on_host, {x}, DType::f32, x.shape()); },
                    {.jit_compile = true});
  EXPECT_THROW(f(random_tensor(DType::f32, {2}, 6)), CompileError);
  unsetenv("KILN_JIT_STRICT");
  CapturedLog log;
  EXPECT_NO_THROW(f(random_tensor(DType::f32, {2}, 6)));
}

}  // namespace
}  // namespace kiln
