// Loops the CPU JIT compiles whole (compiler/compiled_loop.h): a generated driver runs every iteration, the carries
// passed on by pointer, double-buffered or updated in place. Each case runs the JIT twice (a second call must find
// its inputs as they were and the buffers fresh) against the standard executor and the float64 reference, with trip
// counts of both parities (a double-buffered carry ends in either buffer).

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;
using testing::random_uniform;

Tensor scalar(std::int32_t value) { return from_vector(std::vector<std::int32_t>{value}, Shape()); }

// The JIT's second call agrees with the first, and leaves its inputs as they were.
template <class Body, class... Inputs>
void expect_repeatable(const std::string& label, Body body, const Inputs&... inputs) {
  const std::vector<Tensor> arguments{inputs...};
  std::vector<std::vector<float>> before;
  for (const Tensor& input : arguments) before.push_back(cast(input, DType::f32).to_vector<float>());
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const std::vector<Tensor> first = testing::flatten_result(jit(inputs...));
  const std::vector<Tensor> second = testing::flatten_result(jit(inputs...));
  for (std::size_t output = 0; output < first.size(); ++output)
    EXPECT_EQ(cast(first[output], DType::f64).to_vector<double>(), cast(second[output], DType::f64).to_vector<double>())
        << label << ": output " << output << " differs between calls";
  for (std::size_t input = 0; input < arguments.size(); ++input)
    EXPECT_EQ(before[input], cast(arguments[input], DType::f32).to_vector<float>())
        << label << ": input " << input << " was written";
}

// Conjugate gradients as kiln-bench's solver writes them, at an odd size: x and p are updated in place (the kernel
// writing each reads it element by element, last), r and the scalars double-buffered (a row kernel writes them).
TEST(CompiledLoop, ASolverRunsWholeWithVectorsUpdatedInPlace) {
  const std::int64_t n = 37;
  const Tensor m = random_tensor(DType::f32, {n, n}, 1);
  const Tensor a = matmul(m, m, {.transpose_b = true}) / static_cast<double>(n) + eye(n, n, 0, DType::f32) * 0.5;
  const Tensor b = random_tensor(DType::f32, {n}, 2);
  const auto body = [](const Tensor& a, const Tensor& b, const Tensor& limit) {
    const auto dot = [](const Tensor& p, const Tensor& q) { return reduce_sum(p * q); };
    using State = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;
    const State solved = while_loop(
        [&](const State& state) { return logical_and(std::get<3>(state) > 1e-10, std::get<4>(state) < limit); },
        [&](const State& state) {
          const auto& [x, r, p, residual, iterations] = state;
          const Tensor ap = reshape(matmul(a, reshape(p, {p.dim(0), 1})), {p.dim(0)});
          const Tensor alpha = residual / dot(p, ap);
          const Tensor next_r = r - alpha * ap;
          const Tensor next_residual = dot(next_r, next_r);
          return State{x + alpha * p, next_r, next_r + (next_residual / residual) * p, next_residual, iterations + 1};
        },
        State{zeros(b.shape()), b, b, dot(b, b), zeros(Shape(), DType::i32)});
    return std::tuple<Tensor, Tensor, Tensor>{std::get<0>(solved), std::get<3>(solved), std::get<4>(solved)};
  };
  for (std::int32_t limit : {0, 1, 2, 7, 8}) {
    const std::string label = "solver, at most " + std::to_string(limit) + " iterations";
    const testing::DifferentialResult result = expect_agreement(label, body, a, b, scalar(limit));
    EXPECT_NE(result.fused.find("while_loop: compiled whole"), std::string::npos) << result.fused;
    EXPECT_NE(result.fused.find("carry 0 f32[37]: updated in place"), std::string::npos) << result.fused;
    EXPECT_NE(result.fused.find("carry 1 f32[37]: two buffers"), std::string::npos) << result.fused;
    expect_repeatable(label, body, a, b, scalar(limit));
  }
}

// Carries that swap, one passed on as it came in, one that is also the condition: copies and pointers in the driver.
TEST(CompiledLoop, CarriesSwappedPassedOnAndTestedAgree) {
  const Tensor x = random_uniform(DType::f32, {19}, 0.5, 1.5, 3), y = random_tensor(DType::f32, {19}, 4);
  const auto body = [](const Tensor& x, const Tensor& y, const Tensor& limit) {
    using State = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor>;  // a, b, kept, count, go on
    const State done =
        while_loop([](const State& state) { return std::get<4>(state); },
                   [&](const State& state) {
                     const auto& [first, second, kept, count, go_on] = state;
                     return State{second, first * 1.5 - kept, kept, count + 1, count + 1 < limit};
                   },
                   State{x, y, x * 0.25, zeros(Shape(), DType::i32), zeros(Shape(), DType::i32) < limit});
    return std::tuple<Tensor, Tensor, Tensor, Tensor>{std::get<0>(done), std::get<1>(done), std::get<2>(done),
                                                      std::get<3>(done)};
  };
  for (std::int32_t limit : {0, 1, 2, 5, 6}) {
    const std::string label = "swapping carries, " + std::to_string(limit) + " iterations";
    const testing::DifferentialResult result = expect_agreement(label, body, x, y, scalar(limit));
    EXPECT_NE(result.fused.find("compiled whole"), std::string::npos) << result.fused;
    EXPECT_NE(result.fused.find("returned as it came in"), std::string::npos) << result.fused;
    expect_repeatable(label, body, x, y, scalar(limit));
  }
}

// Elements of 12 bytes and rows of 12 and 20 bytes are not 64-byte aligned: copied through the workspace. The carry
// is also an output (a copy of its slot) and an element is returned as it came (a copy of a parameter).
TEST(CompiledLoop, ScansOverElementsAndRowsOutOfAlignment) {
  const Tensor w = random_tensor(DType::f32, {3, 5}, 6) * 0.4;
  const auto body = [](const Tensor& xs, const Tensor& h0, const Tensor& w) {
    const auto step = [&](const Tensor& h, const Tensor& x) {
      const Tensor next = tanh(h * 0.9 + matmul(reshape(x, {1, 3}), w));
      return std::pair<Tensor, std::tuple<Tensor, Tensor>>{next, {next, x}};
    };
    auto [last, outputs] = scan(step, h0, xs);
    auto [last_reversed, reversed] = scan(step, h0 * 0.5, xs, {.reverse = true});
    return std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>{
        last, std::get<0>(outputs), std::get<1>(outputs), last_reversed, std::get<0>(reversed), std::get<1>(reversed)};
  };
  for (std::int64_t steps : {0, 1, 4, 9}) {
    const std::string label = "scan of " + std::to_string(steps) + " steps";
    const Tensor xs = random_tensor(DType::f32, {steps, 3}, 7), h0 = random_tensor(DType::f32, {1, 5}, 8);
    const testing::DifferentialResult result = expect_agreement(label, body, xs, h0, w);
    EXPECT_NE(result.fused.find("scan_loop: compiled whole"), std::string::npos) << result.fused;
    expect_repeatable(label, body, xs, h0, w);
  }
}

// x + transpose(x) reads element (j, i) to write (i, j): the carry keeps two buffers, and the stage says why.
TEST(CompiledLoop, ACarryReadThroughATransposeIsNotUpdatedInPlace) {
  const Tensor x = random_tensor(DType::f64, {6, 6}, 9);
  const auto body = [](const Tensor& x) {
    return fori_loop(
        0, 5, [](const Tensor&, const Tensor& v) { return (v + transpose(v)) * 0.5 + 0.125; }, x);
  };
  const testing::DifferentialResult result = expect_agreement("symmetrizing loop", body, x);
  EXPECT_NE(result.fused.find("carry 1 f64[6,6]: two buffers, the step writes the one it does not read: kernel "),
            std::string::npos)
      << result.fused;
  EXPECT_NE(result.fused.find("reads it through transpose"), std::string::npos) << result.fused;
  expect_repeatable("symmetrizing loop", body, x);
}

// An op with only a standard kernel (argsort) in the step, a branch, a loop in a loop whose bound is the outer's
// index: the driver asks kiln to run each (the branch's regions and the inner loop compiled on their own), the rest
// of the step stays generated.
TEST(CompiledLoop, LibraryKernelsBranchesAndInnerLoopsRunFromTheDriver) {
  const Tensor x = random_tensor(DType::f32, {4, 7}, 10);
  const auto sorting = [](const Tensor& x) {
    return fori_loop(
        0, 3, [](const Tensor&, const Tensor& v) { return v * 0.5 + cast(argsort(v, 1), DType::f32) * 0.25; }, x);
  };
  const testing::DifferentialResult sorted = expect_agreement("argsort in a loop", sorting, x);
  EXPECT_NE(sorted.fused.find("scan_loop: compiled whole"), std::string::npos) << sorted.fused;
  expect_repeatable("argsort in a loop", sorting, x);
  const auto branching = [](const Tensor& x) {
    return fori_loop(
        0, 4,
        [](const Tensor& i, const Tensor& v) {
          return cond(
              i % 2 == 0, [&]() { return v * 0.5; }, [&]() { return exp(v) - 1.0; });
        },
        x);
  };
  const testing::DifferentialResult branched = expect_agreement("cond in a loop", branching, x);
  EXPECT_NE(branched.fused.find("scan_loop: compiled whole"), std::string::npos) << branched.fused;
  expect_repeatable("cond in a loop", branching, x);
  const auto nested = [](const Tensor& x) {
    return fori_loop(
        0, 4,
        [](const Tensor& i, const Tensor& v) {
          return fori_loop(
              zeros(Shape(), DType::i32), i + 1,
              [&](const Tensor& j, const Tensor& inner) { return inner * 0.75 + cast(i - j, DType::f32) * 0.125; }, v);
        },
        x);
  };
  const testing::DifferentialResult looped = expect_agreement("a loop in a loop", nested, x);
  EXPECT_NE(looped.fused.find("scan_loop: compiled whole"), std::string::npos) << looped.fused;
  expect_repeatable("a loop in a loop", nested, x);
}

// A library kernel's error inside the driver (gather's index out of range at step 2) is the error the standard
// executor raises, naming the op and the user's line; the function then runs again with good indices.
TEST(CompiledLoop, AnErrorInTheDriverNamesTheOpAndTheFunctionStaysUsable) {
  const Tensor table = random_tensor(DType::f32, {5, 3}, 11);
  auto gathering = function(
      [](const Tensor& table, const Tensor& rows) {
        return scan(
            [&](const Tensor& total, const Tensor& row) {
              const Tensor picked = gather(table, row);
              return std::pair<Tensor, Tensor>{total + reduce_sum(picked, {0}), picked};
            },
            zeros({3}), rows);
      },
      {.jit_compile = true, .on_compile_failure = Fallback::none});
  const Tensor bad = from_vector(std::vector<std::int32_t>{0, 4, 1, 2, 7, 3}, {3, 2});
  try {
    gathering(table, bad);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("gather"), std::string::npos) << message;
    EXPECT_NE(message.find("compiled_loop_test.cpp"), std::string::npos) << message;
  }
  const Tensor good = from_vector(std::vector<std::int32_t>{0, 4, 1, 2, 3, 3}, {3, 2});
  const auto [total, picked] = gathering(table, good);
  std::vector<float> expected(3, 0.0f);
  const std::vector<float> values = table.to_vector<float>();
  for (int row : {0, 4, 1, 2, 3, 3})
    for (int column = 0; column < 3; ++column)
      expected[static_cast<std::size_t>(column)] += values[static_cast<std::size_t>(row * 3 + column)];
  const std::vector<float> got = total.to_vector<float>();
  for (int column = 0; column < 3; ++column)
    EXPECT_NEAR(got[static_cast<std::size_t>(column)], expected[static_cast<std::size_t>(column)], 1e-5);
  EXPECT_EQ(picked.shape(), Shape({3, 2, 3}));
  EXPECT_NE(gathering.get_compiler_ir(Stage::fused, table, good).find("scan_loop: compiled whole"), std::string::npos);
}

// A generated kernel's index out of range (take_along_axis, fused into the step) is reported to the call and raised
// once the driver returns, naming the op, the bad element and the user's line, as outside a loop.
TEST(CompiledLoop, AGeneratedKernelsIndexOutOfRangeInTheStepIsRaised) {
  const Tensor values = random_tensor(DType::f32, {4, 6}, 12);
  const auto body = [](const Tensor& values, const Tensor& labels) {
    return scan(
        [&](const Tensor& total, const Tensor& label) {
          const Tensor picked = squeeze(take_along_axis(values, expand_dims(label, -1), -1), {-1}) * 2.0;
          return std::pair<Tensor, Tensor>{total + picked, picked};
        },
        zeros({4}), labels);
  };
  auto picking = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  const Tensor bad = from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 5, 4, 6, 0, 1, 2, 3, 4}, {3, 4});
  try {
    picking(values, bad);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("take_along_axis: index 6"), std::string::npos) << message;
    EXPECT_NE(message.find("compiled_loop_test.cpp"), std::string::npos) << message;
  }
  const Tensor good = from_vector(std::vector<std::int64_t>{0, 1, 2, 3, 5, 4, -6, 0, 1, 2, 3, 4}, {3, 4});
  expect_agreement("picks in a loop", body, values, good);
  EXPECT_NE(picking.get_compiler_ir(Stage::fused, values, good).find("scan_loop: compiled whole"), std::string::npos);
}

// A while_loop that would never end once its index goes out of range: the driver stops at the iteration whose kernel
// reported it, and the call raises take_along_axis's error (without the check this test hangs until ctest's timeout).
TEST(CompiledLoop, AnIndexOutOfRangeStopsAWhileLoopThatWouldNotEnd) {
  const Tensor values = random_uniform(DType::f32, {6}, 1.0, 2.0, 13);
  auto endless = function(
      [](const Tensor& values) {
        using State = std::pair<Tensor, Tensor>;  // an index, a running sum
        return while_loop(
                   [](const State& state) { return state.second >= 0.0; },
                   [&](const State& state) {
                     const Tensor next = state.first + 1;
                     return State{next, state.second + reduce_sum(take_along_axis(values, reshape(next, {1}), 0))};
                   },
                   State{zeros(Shape({}), DType::i64), zeros(Shape({}))})
            .second;
      },
      {.jit_compile = true, .on_compile_failure = Fallback::none});
  try {
    endless(values);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("take_along_axis: index 6"), std::string::npos) << message;
    EXPECT_NE(message.find("compiled_loop_test.cpp"), std::string::npos) << message;
  }
  EXPECT_NE(endless.get_compiler_ir(Stage::fused, values).find("while_loop: compiled whole"), std::string::npos);
}

}  // namespace
}  // namespace kiln
