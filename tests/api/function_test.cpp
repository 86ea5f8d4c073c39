// kiln::function: tracing once per signature, captures, retracing warnings,
// multiple outputs, nesting, errors inside traces, threads.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

namespace kiln {
namespace {

using testing::CapturedLog;
using testing::random_tensor;

std::vector<float> values(const Tensor& tensor) { return tensor.to_vector<float>(); }

TEST(Function, TracesOncePerSignatureAndCountsCalls) {
  std::atomic<int> body_runs = 0;
  auto f = function([&](Tensor x, Tensor y) {
    body_runs += 1;
    return x * y + 1.0;
  });
  Tensor a = random_tensor(DType::f32, {3, 4}, 1), b = random_tensor(DType::f32, {3, 4}, 2);
  Tensor first = f(a, b);
  Tensor second = f(b, a);
  EXPECT_EQ(body_runs, 1);
  EXPECT_EQ(f.statistics().traces, 1);
  EXPECT_EQ(f.statistics().calls, 2);

  Tensor c = random_tensor(DType::f32, {5}, 3);
  f(c, c);
  EXPECT_EQ(body_runs, 2) << "a new shape traces again";
  f(cast(c, DType::f64), cast(c, DType::f64));
  EXPECT_EQ(body_runs, 3) << "a new dtype traces again";
  EXPECT_EQ(f.statistics().traces, 3);

  std::vector<float> got = values(first), x = values(a), y = values(b);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], x[i] * y[i] + 1.0f);
}

TEST(Function, MultipleOutputsInEveryContainer) {
  Tensor a = random_tensor(DType::f32, {6}, 4);
  auto as_tuple = function([](Tensor x) { return std::tuple<Tensor, Tensor, Tensor>{x + 1, x * 2, reduce_sum(x)}; });
  auto [plus, twice, total] = as_tuple(a);
  EXPECT_EQ(plus.shape(), a.shape());
  EXPECT_EQ(total.rank(), 0);
  auto as_pair = function([](Tensor x) { return std::pair<Tensor, Tensor>{x, -x}; });
  EXPECT_FLOAT_EQ(as_pair(a).second.to_vector<float>()[2], -values(a)[2]);
  auto as_vector = function([](Tensor x) { return std::vector<Tensor>{x, x, x}; });
  EXPECT_EQ(as_vector(a).size(), 3u);
  auto as_array = function([](Tensor x) { return std::array<Tensor, 2>{x, abs(x)}; });
  EXPECT_GE(as_array(a)[1].to_vector<float>()[0], 0.0f);
}

TEST(Function, CapturedTensorsBecomeInputsWithoutCopyingData) {
  Tensor weight = random_tensor(DType::f32, {4, 4}, 5);
  auto f = function([&](Tensor x) { return matmul(x, weight); });
  Tensor x = random_tensor(DType::f32, {2, 4}, 6);
  std::string ir = f.get_compiler_ir(Stage::traced, x);
  EXPECT_NE(ir.find("(%0: f32[2,4], %1: f32[4,4])"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("constant"), std::string::npos) << "captured data must not be baked into the IR:\n" << ir;
  Tensor expected = matmul(x, weight);
  EXPECT_EQ(values(f(x)), values(expected));
}

// ---- Captured tensors are guarded: a reassigned one retraces ----

TEST(Function, ReassignedCaptureRetracesAndGivesTheNewValue) {
  for (bool jit : {false, true}) {
    Tensor weight = random_tensor(DType::f32, {4, 4}, 21);
    const Tensor first = weight;  // kept alive: the reassignment alone must tell
    auto f = function([&](Tensor x) { return matmul(x, weight); }, {.jit_compile = jit});
    Tensor x = random_tensor(DType::f32, {2, 4}, 22);
    EXPECT_EQ(values(f(x)), values(matmul(x, first)));
    weight = random_tensor(DType::f32, {4, 4}, 23);
    EXPECT_EQ(values(f(x)), values(matmul(x, weight))) << "jit " << jit;
    EXPECT_EQ(f.statistics().traces, 2);
    f(x);
    EXPECT_EQ(f.statistics().traces, 2) << "an unchanged capture does not retrace";
    EXPECT_EQ(f.statistics().fallbacks, 0);
  }
}

TEST(Function, ReleasedCaptureRetraces) {
  std::vector<Tensor> parameters = {random_tensor(DType::f32, {3}, 24)};
  auto f = function([&](Tensor x) { return x * parameters[0]; });
  Tensor x = random_tensor(DType::f32, {3}, 25);
  f(x);
  // Not an assignment: the old tensor goes with its last handle.
  parameters.clear();
  parameters.push_back(random_tensor(DType::f32, {3}, 26));
  EXPECT_EQ(values(f(x)), values(x * parameters[0]));
  EXPECT_EQ(f.statistics().traces, 2);
}

TEST(Function, CaptureRetracesCountTowardTheRetraceWarning) {
  CapturedLog log;
  Tensor scale = random_tensor(DType::f32, {2}, 27);
  auto f = function([&](Tensor x) { return x * scale; }, {.name = "rescaled", .retrace_warning_limit = 3});
  Tensor x = random_tensor(DType::f32, {2}, 28);
  for (int step = 0; step < 6; ++step) {
    EXPECT_EQ(values(f(x)), values(x * scale));
    scale = scale * 2;
  }
  EXPECT_EQ(f.statistics().traces, 6);
  EXPECT_EQ(log.count("'rescaled'"), 1) << "one warning";
  EXPECT_EQ(log.count("a tensor it captured was reassigned or released since its last trace"), 1);
}

TEST(Function, TensorsMadeOrCopiedInsideTheTraceDoNotRetrace) {
  Tensor outer = random_tensor(DType::f32, {3}, 29);
  auto f = function([&](Tensor x) {
    Tensor local = outer;  // a handle of its own, reassigned below: not the captured variable
    local = local * 2;     // (counted while tracing, but the guard is set after the trace)
    Tensor made = from_vector(std::vector<float>{1, 2, 3}, {3});  // made by each trace, released after it
    return x + local + made;
  });
  Tensor x = random_tensor(DType::f32, {3}, 30);
  f(x);
  f(x);
  EXPECT_EQ(f.statistics().traces, 1);
}

TEST(Function, CaptureByValueKeepsItsTensor) {
  Tensor weight = random_tensor(DType::f32, {3}, 31);
  const Tensor first = weight;
  auto f = function([weight](Tensor x) { return x * weight; });  // a copy, as any C++ lambda's
  Tensor x = random_tensor(DType::f32, {3}, 32);
  f(x);
  weight = random_tensor(DType::f32, {3}, 33);
  EXPECT_EQ(values(f(x)), values(x * first));
  // The outer variable held the captured tensor too: its reassignment retraces once, needlessly.
  EXPECT_EQ(f.statistics().traces, 2);
  f(x);
  EXPECT_EQ(f.statistics().traces, 2);
}

TEST(Function, CapturedScalarIsBakedInAtTraceTime) {
  // The documented sharp bit (docs/guide.md): a number is a constant of the graph, and nothing guards it.
  double scale = 2;
  auto f = function([&](Tensor x) { return x * scale; });
  Tensor x = random_tensor(DType::f32, {3}, 34);
  std::vector<float> twice = values(f(x));
  scale = 3;
  EXPECT_EQ(values(f(x)), twice);
  EXPECT_EQ(f.statistics().traces, 1);
}

TEST(Function, TracedIrOfTheSeedFunction) {
  auto f = function(
      [](Tensor x, Tensor y) {
        Tensor z = matmul(x, y);
        z = z + sin(z);
        z = nn::relu(z);
        return reduce_sum(z);
      },
      {.name = "seed"});
  Tensor a = random_tensor(DType::f32, {4, 4}, 7);
  EXPECT_EQ(f.get_compiler_ir(Stage::traced, a, a),
            "func @seed(%0: f32[4,4], %1: f32[4,4]) -> (f32[]) {\n"
            "  %2 = f32[4,4] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
            "  %3 = f32[4,4] sin(%2)\n"
            "  %4 = f32[4,4] add(%2, %3)\n"
            "  %5 = f32[4,4] relu(%4)\n"
            "  %6 = f32[] reduce_sum(%5) {axes=[0,1], keepdims=false}\n"
            "  return %6\n"
            "}\n");
}

// A constant made inside a traced function lives on the function's device;
// one asked for on a GPU inside a function traced for the CPU is refused,
// naming the user's line (docs/design-notes.md, "Constants in traced functions").
// arange inside a traced function is an iota node, not a captured input (as jnp.arange under jax.jit), with the
// eager values: integer and float ranges, fractional steps, descending, empty, and bool.
TEST(Function, ArangeInsideATraceIsAnIotaWithTheEagerValues) {
  struct Range {
    double start, stop, step;
    DType dtype;
  };
  const std::vector<Range> ranges = {
      {0, 7, 1, DType::i64},    {0, 7, 1, DType::f32},        {0, 5, 1, DType::i32},
      {1, 2, 0.25, DType::f32}, {2.5, -3, -0.75, DType::f64}, {-4, 4, 1.5, DType::i32},
      {3, 3, 1, DType::f32},    {0, 3, 1, DType::boolean},    {0.1, 0.9, 0.1, DType::f32}};
  for (const Range& range : ranges) {
    const Tensor eager = arange(range.start, range.stop, range.step, range.dtype);
    const Tensor offset = zeros({eager.shape()[0]}, range.dtype == DType::boolean ? DType::i32 : range.dtype);
    for (bool jit : {false, true}) {
      auto traced = function(
          [&](Tensor zero) {
            Tensor positions = arange(range.start, range.stop, range.step, range.dtype);
            return range.dtype == DType::boolean ? cast(positions, DType::i32) + zero : positions + zero;
          },
          {.jit_compile = jit, .on_compile_failure = Fallback::none});
      const std::string ir = traced.get_compiler_ir(Stage::traced, offset);
      EXPECT_NE(ir.find("iota"), std::string::npos) << ir;
      const std::string signature = ir.substr(0, ir.find('\n'));
      EXPECT_EQ(signature.find("%1:"), std::string::npos) << "one input, the argument: nothing captured\n" << ir;
      const Tensor expected = range.dtype == DType::boolean ? cast(eager, DType::i32) : eager;
      const Tensor actual = traced(offset);
      ASSERT_EQ(actual.dtype(), expected.dtype());
      ASSERT_EQ(actual.shape(), expected.shape());
      EXPECT_EQ(cast(actual, DType::f64).to_vector<double>(), cast(expected, DType::f64).to_vector<double>())
          << range.start << ":" << range.stop << ":" << range.step << " as " << to_string(range.dtype)
          << (jit ? ", JIT" : ", standard");
    }
  }
}

// linspace and eye, eager and inside traced functions (iotas there: nothing captured), on both executors.
TEST(Function, LinspaceAndEyeHaveNumPysValuesEagerAndTraced) {
  const std::vector<double> spaced = linspace(-1.5, 2.0, 8, DType::f64).to_vector<double>();
  ASSERT_EQ(spaced.size(), 8u);
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(spaced[i], -1.5 + static_cast<double>(i) * (3.5 / 7.0)) << i;
  EXPECT_EQ(spaced[7], 2.0);  // exactly stop
  EXPECT_EQ(linspace(0.1, 0.7, 7).to_vector<float>().back(), 0.7f);
  EXPECT_EQ(linspace(3, 9, 1).to_vector<float>(), std::vector<float>{3.0f});
  EXPECT_EQ(linspace(3, 9, 0).shape(), Shape({0}));
  EXPECT_EQ(linspace(0, 10, 6, DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(eye(2, 3, 1, DType::i32).to_vector<std::int32_t>(), (std::vector<std::int32_t>{0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(eye(3, -1, -1).to_vector<float>(), (std::vector<float>{0, 0, 0, 1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(eye(0).shape(), Shape({0, 0}));
  EXPECT_THROW(eye(-2), ValueError);
  EXPECT_THROW(linspace(0, 1, -1), ValueError);
  const Tensor x = random_tensor(DType::f32, {5, 4}, 70);
  for (bool jit : {false, true}) {
    auto traced = function(
        [](Tensor x) {
          return x * eye(5, 4, 1) + reshape(linspace(-1, 1, 4), {1, 4});
        },
        {.jit_compile = jit, .on_compile_failure = Fallback::none});
    const std::string ir = traced.get_compiler_ir(Stage::traced, x);
    EXPECT_EQ(ir.substr(0, ir.find('\n')).find("%1:"), std::string::npos) << "nothing captured\n" << ir;
    const std::vector<float> got = traced(x).to_vector<float>(), values = x.to_vector<float>();
    const std::vector<float> spaced_row = linspace(-1, 1, 4).to_vector<float>();
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 4; ++j)
        EXPECT_EQ(got[i * 4 + j], (j == i + 1 ? values[i * 4 + j] : 0.0f) + spaced_row[j]) << i << " " << j;
    if (jit) {
      EXPECT_EQ(traced.statistics().kernels_per_call, 1);
    }
  }
}

TEST(Function, ConstantsOnAnotherDeviceInsideATraceAreRefused) {
  for (bool jit : {false, true}) {
    auto scaled = function([](Tensor x) { return x * full({}, 3); }, {.jit_compile = jit});
    EXPECT_EQ(scaled(from_vector<float>({1, 2})).to_vector<float>(), (std::vector<float>{3, 6}));
    auto on_a_gpu =
        function([](Tensor x) { return x + full({}, 1, DType::f32, Device::cuda(0)); }, {.jit_compile = jit});
    try {
      (void)on_a_gpu(from_vector<float>({1, 2}));
      ADD_FAILURE() << "expected kiln::DeviceError";
    } catch (const DeviceError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find("cannot create a constant on cuda:0 inside a function traced for cpu"), std::string::npos)
          << message;
      EXPECT_NE(message.find("function_test.cpp"), std::string::npos) << message;
    }
  }
}

TEST(Function, ControlFlowIsUnrolledAtTraceTime) {
  auto f = function([](Tensor x) {
    for (int i = 0; i < 3; ++i) x = x * 2;
    if (x.rank() == 2) x = reduce_sum(x, {1});
    return x;
  });
  Tensor matrix = random_tensor(DType::f32, {2, 3}, 8);
  std::string ir = f.get_compiler_ir(Stage::traced, matrix);
  int multiplications = 0;
  for (std::size_t at = ir.find(" mul("); at != std::string::npos; at = ir.find(" mul(", at + 1)) ++multiplications;
  EXPECT_EQ(multiplications, 3) << ir;
  EXPECT_NE(ir.find("reduce_sum"), std::string::npos);
  EXPECT_EQ(f(matrix).shape(), Shape({2}));
  EXPECT_EQ(f(random_tensor(DType::f32, {3}, 9)).shape(), Shape({3}));
}

TEST(Function, ReadingATracedValueThrowsAClearError) {
  auto f = function([](Tensor x) {
    if (reduce_sum(x).item<float>() > 0) return x;  // data-dependent control flow
    return -x;
  });
  Tensor a = random_tensor(DType::f32, {3}, 10);
  try {
    f(a);
    FAIL() << "expected kiln::ValueError";
  } catch (const ValueError& error) {
    EXPECT_NE(std::string(error.what()).find("cannot read the value of traced tensor f32[]"), std::string::npos)
        << error.what();
    EXPECT_NE(error.location().find("function_test.cpp"), std::string::npos) << error.what();
  }
}

TEST(Function, WarnsOnceWhenItKeepsRetracingNamingTheArgument) {
  CapturedLog log;
  auto f = function([](Tensor x, Tensor y) { return x + y; }, {.name = "retracer"});
  Tensor y = random_tensor(DType::f32, {1}, 11);
  for (int size = 1; size <= 8; ++size) f(y, random_tensor(DType::f32, {size}, 12));
  EXPECT_EQ(log.count("retracer"), 1);
  EXPECT_EQ(log.count("argument 1 changed from f32[5] cpu to f32[6] cpu"), 1);
  EXPECT_EQ(f.statistics().traces, 8);
}

TEST(Function, ErrorsInsideATraceNameTheUserLineAndLeaveTheFunctionUsable) {
  auto f = function([](Tensor x, Tensor y) { return x + y; });
  Tensor good = random_tensor(DType::f32, {2, 3}, 13);
  Tensor bad = random_tensor(DType::f32, {4}, 14);
  try {
    f(good, bad);
    FAIL() << "expected kiln::ShapeError";
  } catch (const ShapeError& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("add"), std::string::npos) << message;
    EXPECT_NE(message.find("f32[2,3], f32[4]"), std::string::npos) << message;
    EXPECT_NE(message.find("function_test.cpp"), std::string::npos) << message;
  }
  EXPECT_EQ(f(good, good).shape(), Shape({2, 3}));
  EXPECT_EQ(f.statistics().traces, 1) << "a failed trace is not cached";
}

TEST(Function, EscapedTracedTensorsCannotBeUsed) {
  Tensor escaped;
  auto f = function([&](Tensor x) {
    escaped = x * 2;
    return x;
  });
  f(random_tensor(DType::f32, {2}, 15));
  EXPECT_TRUE(escaped.is_traced());
  EXPECT_THROW(escaped + 1, ValueError);
  EXPECT_THROW(escaped.to_vector<float>(), ValueError);
}

TEST(Function, NestedFunctionsAreInlined) {
  auto inner = function([](Tensor x) { return x * x; });
  auto outer = function([&](Tensor x) { return inner(x) + 1; });
  Tensor a = random_tensor(DType::f32, {3}, 16);
  std::string ir = outer.get_compiler_ir(Stage::traced, a);
  EXPECT_NE(ir.find("mul(%0, %0)"), std::string::npos) << ir;
  EXPECT_EQ(inner.statistics().traces, 0);
  std::vector<float> x = values(a), got = values(outer(a));
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(got[i], x[i] * x[i] + 1);
}

TEST(Function, ConstantsCreatedInsideATraceAreGraphConstants) {
  auto f = function([](Tensor x) { return x + ones({3}) * 2.5; });
  Tensor a = random_tensor(DType::f32, {3}, 17);
  std::string ir = f.get_compiler_ir(Stage::traced, a);
  EXPECT_NE(ir.find("f32[3] constant(1)"), std::string::npos) << ir;
  EXPECT_NE(ir.find("f32[] constant(2.5)"), std::string::npos) << ir;
  EXPECT_FLOAT_EQ(values(f(a))[1], values(a)[1] + 2.5f);
}

TEST(Function, StandardExecutorFreesBuffersAfterTheirLastUse) {
  auto f = function([](Tensor x) {
    for (int i = 0; i < 8; ++i) x = x * 1.5 + 1.0;
    return x;
  });
  Tensor a = random_tensor(DType::f32, {1 << 20}, 18);
  f(a);  // trace first
  std::int64_t bytes = a.numel() * 4;
  std::int64_t before = memory_statistics().bytes_in_use;
  reset_peak_memory();
  Tensor result = f(a);
  std::int64_t peak = memory_statistics().peak_bytes_in_use - before;
  // 16 ops each make a buffer of `bytes`; at most two are alive at once
  // (the operand and the result), plus small constants.
  EXPECT_LE(peak, 2 * bytes + 4096) << "peak " << peak << " for buffers of " << bytes;
  EXPECT_EQ(f.statistics().kernels_per_call, 16 + 16);  // 16 ops + 16 scalar constants
}

TEST(Function, ManyThreadsTraceEachSignatureOnce) {
  std::atomic<int> body_runs = 0;
  auto f = function([&](Tensor x) {
    body_runs += 1;
    return exp(x) - 1;
  });
  std::vector<Tensor> inputs;
  for (int size = 1; size <= 4; ++size) inputs.push_back(random_tensor(DType::f32, {size * 100}, 19 + size));
  std::vector<std::thread> threads;
  std::atomic<int> wrong = 0;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int call = 0; call < 20; ++call) {
        const Tensor& input = inputs[static_cast<std::size_t>((t + call) % 4)];
        std::vector<float> got = f(input).to_vector<float>(), x = input.to_vector<float>();
        for (std::size_t i = 0; i < x.size(); ++i)
          if (std::abs(got[i] - (std::exp(x[i]) - 1)) > 1e-5f * (1 + std::abs(got[i]))) wrong += 1;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(body_runs, 4);
  EXPECT_EQ(f.statistics().traces, 4);
  EXPECT_EQ(f.statistics().calls, 160);
  EXPECT_EQ(wrong, 0);
}

// get_compiler_ir's errors name the line that called it, not the line that made the function.
TEST(Function, GetCompilerIrErrorsNameTheCallersLine) {
  auto f = function([](Tensor x) { return x * 2; }, {.name = "uncompiled"});
  const std::string made_at = "function_test.cpp:" + std::to_string(__LINE__ - 1);
  Tensor x = random_tensor(DType::f32, {3}, 31);
  EXPECT_NE(f.get_compiler_ir(Stage::traced, x).find("@uncompiled"), std::string::npos);
  int line = 0;
  try {
    line = __LINE__ + 1;
    f.get_compiler_ir(Stage::optimized, x);
    FAIL() << "expected kiln::ValueError";
  } catch (const ValueError& error) {
    const std::string location = error.location();
    const std::string called_at = "function_test.cpp:" + std::to_string(line);
    EXPECT_EQ(location.substr(location.size() - std::min(location.size(), called_at.size())), called_at) << location;
    EXPECT_NE(error.detail().find("jit_compile"), std::string::npos) << error.what();
    EXPECT_NE(error.detail().find(made_at), std::string::npos) << "and names where the function was made";
  }
  // Called while tracing: an error at the caller's line too.
  auto tracing = function([&](Tensor y) {
    line = __LINE__ + 1;
    f.get_compiler_ir(Stage::traced, y);
    return y;
  });
  try {
    tracing(x);
    FAIL() << "expected kiln::ValueError";
  } catch (const ValueError& error) {
    EXPECT_NE(error.location().find("function_test.cpp:" + std::to_string(line)), std::string::npos) << error.what();
  }
}

TEST(Function, UndefinedArgumentsAndOutputsAreReported) {
  auto f = function([](Tensor x) { return x; });
  EXPECT_THROW(f(Tensor()), ValueError);
  auto g = function([](Tensor) { return Tensor(); });
  EXPECT_THROW(g(random_tensor(DType::f32, {1}, 30)), ValueError);
}

}  // namespace
}  // namespace kiln
