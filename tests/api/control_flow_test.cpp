// cond, switch_case, while_loop, fori_loop and scan (include/kiln/control_flow.h) on concrete tensors and inside a
// kiln::function on the standard executor, each against the same computation unrolled in C++; their errors. The JIT
// runs them in tests/jit/control_flow_jit_test.cpp.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <algorithm>
#include <functional>

namespace kiln {
namespace {

using testing::error_message;
using testing::random_tensor;

void expect_same(const Tensor& expected, const Tensor& got) {
  ASSERT_EQ(expected.dtype(), got.dtype());
  ASSERT_EQ(expected.shape(), got.shape());
  EXPECT_EQ(expected.to_vector<double>(), got.to_vector<double>());
}

Tensor scalar(std::int32_t value) { return from_vector(std::vector<std::int32_t>{value}, Shape()); }
Tensor flag(bool value) { return from_vector(std::vector<bool>{value}, Shape()); }

TEST(ControlFlow, CondRunsTheChosenBranchOnConcreteTensorsAndInAFunction) {
  const Tensor x = random_tensor(DType::f32, {3, 5}, 1), y = random_tensor(DType::f32, {3, 5}, 2);
  const auto branchy = [](const Tensor& predicate, const Tensor& a, const Tensor& b) {
    return cond(
        predicate, [](const Tensor& p, const Tensor& q) { return sin(p) * q; },
        [](const Tensor& p, const Tensor& q) { return p - exp(q); }, a, b);
  };
  auto traced = function(branchy);
  for (bool taken : {true, false}) {
    const Tensor expected = taken ? sin(x) * y : x - exp(y);
    expect_same(expected, branchy(flag(taken), x, y));
    expect_same(expected, traced(flag(taken), x, y));
  }
  EXPECT_EQ(traced.statistics().traces, 1) << "both values of the predicate share one trace";
  // An integer predicate: nonzero is true.
  expect_same(sin(x) * y, traced(scalar(-3), x, y));
  expect_same(x - exp(y), traced(scalar(0), x, y));
}

TEST(ControlFlow, CondBranchesReturnTuplesAndCaptureOuterValues) {
  const Tensor x = random_tensor(DType::f32, {4}, 3);
  const Tensor weight = random_tensor(DType::f32, {4}, 4);  // captured from the scope
  auto f = function([&](const Tensor& a) {
    const Tensor shifted = a + 1.0;  // a traced value of the enclosing function, used inside the branches
    return cond(
        reduce_sum(a) > 0.0,
        [&]() {
          return std::tuple<Tensor, Tensor>{shifted * weight, reduce_max(a, {0})};
        },
        [&]() {
          return std::tuple<Tensor, Tensor>{shifted - weight, reduce_min(a, {0})};
        });
  });
  for (const Tensor& input : {x, -x}) {
    const bool positive = reduce_sum(input).item<float>() > 0;
    auto [first, second] = f(input);
    expect_same(positive ? (input + 1.0) * weight : (input + 1.0) - weight, first);
    expect_same(positive ? reduce_max(input, {0}) : reduce_min(input, {0}), second);
  }
}

TEST(ControlFlow, SwitchCaseClampsTheIndexAsJaxDoes) {
  const Tensor x = random_tensor(DType::f32, {2, 3}, 5);
  const auto branches = std::tuple{[](const Tensor& v) { return v + 1.0; }, [](const Tensor& v) { return v * 2.0; },
                                   [](const Tensor& v) { return -v; }};
  auto f = function([&](const Tensor& index, const Tensor& v) { return switch_case(index, branches, v); });
  const std::vector<std::function<Tensor(const Tensor&)>> as_vector{[](const Tensor& v) { return v + 1.0; },
                                                                    [](const Tensor& v) { return v * 2.0; },
                                                                    [](const Tensor& v) { return -v; }};
  const std::vector<std::pair<std::int64_t, Tensor>> cases{{-5, x + 1.0}, {0, x + 1.0}, {1, x * 2.0},
                                                           {2, -x},       {3, -x},      {std::int64_t{1} << 40, -x}};
  for (const auto& [index, expected] : cases) {
    const Tensor as_i64 = from_vector(std::vector<std::int64_t>{index}, Shape());
    expect_same(expected, f(as_i64, x));
    expect_same(expected, switch_case(as_i64, as_vector, x));
  }
}

TEST(ControlFlow, WhileLoopRunsAsOftenAsTheDataSays) {
  // Doubling until the sum passes a bound, with a step counter of another dtype.
  const auto doubling = [](const Tensor& start, const Tensor& bound) {
    return while_loop([&](const std::pair<Tensor, Tensor>& state) { return reduce_sum(state.first) < bound; },
                      [](const std::pair<Tensor, Tensor>& state) {
                        return std::pair<Tensor, Tensor>{state.first * 2.0, state.second + 1};
                      },
                      std::pair<Tensor, Tensor>{start, scalar(0)});
  };
  auto traced = function(doubling);
  const Tensor start = from_vector(std::vector<float>{0.25f, 0.5f, 0.125f});
  for (float bound : {-1.0f, 0.5f, 10.0f, 1000.0f}) {
    Tensor expected = start;
    std::int32_t steps = 0;
    while (reduce_sum(expected).item<float>() < bound) {
      expected = expected * 2.0;
      ++steps;
    }
    const Tensor limit = from_vector(std::vector<float>{bound}, Shape());
    for (const auto& [value, count] : {doubling(start, limit), traced(start, limit)}) {
      expect_same(expected, value);
      EXPECT_EQ(count.item<std::int32_t>(), steps) << "bound " << bound;
    }
  }
  EXPECT_EQ(traced.statistics().traces, 1);
}

TEST(ControlFlow, ForiLoopWithStaticAndTensorBounds) {
  const Tensor x = random_tensor(DType::f32, {5}, 6);
  const auto body = [](const Tensor& i, const Tensor& carry) { return carry * 0.5 + cast(i, DType::f32); };
  const auto unrolled = [&](std::int64_t lower, std::int64_t upper) {
    Tensor carry = x;
    for (std::int64_t i = lower; i < upper; ++i) carry = carry * 0.5 + static_cast<float>(i);
    return carry;
  };
  auto fixed = function([&](const Tensor& v) { return fori_loop(2, 9, body, v); });
  expect_same(unrolled(2, 9), fixed(x));
  expect_same(unrolled(3, 3), fori_loop(3, 1, body, x));  // an empty range runs nothing
  auto dynamic = function(
      [&](const Tensor& lower, const Tensor& upper, const Tensor& v) { return fori_loop(lower, upper, body, v); });
  for (auto [lower, upper] : {std::pair{0, 4}, std::pair{5, 5}, std::pair{7, 2}, std::pair{-2, 3}})
    expect_same(unrolled(lower, upper), dynamic(scalar(lower), scalar(upper), x));
  EXPECT_EQ(dynamic.statistics().traces, 1) << "tensor bounds share one trace";
  // Mixed: a C++ integer with a tensor.
  expect_same(unrolled(1, 6), fori_loop(1, scalar(6), body, x));
}

TEST(ControlFlow, ScanStacksEachStepsOutputsForwardAndReversed) {
  const Tensor xs = random_tensor(DType::f32, {6, 3}, 7), ys = random_tensor(DType::f32, {6}, 8);
  const Tensor init = random_tensor(DType::f32, {3}, 9);
  const auto step = [](const Tensor& carry, const std::tuple<Tensor, Tensor>& element) {
    const auto& [x, y] = element;
    const Tensor next = tanh(carry * y + x);
    return std::pair<Tensor, std::tuple<Tensor, Tensor>>{next, {next * 2.0, reduce_sum(next)}};
  };
  for (bool reverse : {false, true}) {
    Tensor carry = init;
    std::vector<Tensor> doubled(6), sums(6);
    for (int count = 0; count < 6; ++count) {
      const int index = reverse ? 5 - count : count;
      carry = tanh(carry * reshape(slice(ys, {.start = {index}, .stop = {index + 1}}), {}) +
                   reshape(slice(xs, {.start = {index}, .stop = {index + 1}}), {3}));
      doubled[static_cast<std::size_t>(index)] = expand_dims(carry * 2.0, 0);
      sums[static_cast<std::size_t>(index)] = reshape(reduce_sum(carry), {1});
    }
    auto traced = function([&](const Tensor& c, const Tensor& a, const Tensor& b) {
      auto [last, outputs] = scan(step, c, std::tuple<Tensor, Tensor>{a, b}, {.reverse = reverse});
      return std::tuple<Tensor, Tensor, Tensor>{last, std::get<0>(outputs), std::get<1>(outputs)};
    });
    const auto [last, stacked, totals] = traced(init, xs, ys);
    expect_same(carry, last);
    expect_same(concat(doubled, 0), stacked);
    expect_same(concat(sums, 0), totals);
    auto [eager_last, eager_outputs] = scan(step, init, std::tuple<Tensor, Tensor>{xs, ys}, {.reverse = reverse});
    expect_same(carry, eager_last);
    expect_same(concat(doubled, 0), std::get<0>(eager_outputs));
  }
}

TEST(ControlFlow, ScanOfLengthZeroAndWithoutSequences) {
  const Tensor init = random_tensor(DType::f32, {2}, 10);
  const auto step = [](const Tensor& carry, const Tensor& x) {
    return std::pair<Tensor, Tensor>{carry + reduce_sum(x), carry};
  };
  auto [last, outputs] = scan(step, init, zeros({0, 4}));
  expect_same(init, last);
  EXPECT_EQ(outputs.shape(), Shape({0, 2}));
  // No sequences: the count from options.length.
  const auto count_up = [](const Tensor& carry, const std::vector<Tensor>&) {
    return std::pair<Tensor, Tensor>{carry + 1, carry};
  };
  auto [counted, history] = scan(count_up, scalar(3), std::vector<Tensor>{}, {.length = 4});
  EXPECT_EQ(counted.item<std::int32_t>(), 7);
  EXPECT_EQ(history.to_vector<std::int32_t>(), (std::vector<std::int32_t>{3, 4, 5, 6}));
}

TEST(ControlFlow, NestedLoopsAndBranches) {
  // A triangular sum: for i in [0, 4): for j in [0, i]: total += (i odd ? j : -j) * x
  const Tensor x = random_tensor(DType::f64, {3}, 11);
  auto f = function([](const Tensor& v) {
    return fori_loop(
        0, 4,
        [&](const Tensor& i, const Tensor& total) {
          return fori_loop(
              scalar(0), i + 1,
              [&](const Tensor& j, const Tensor& inner) {
                const Tensor weight = cast(j, DType::f64);
                return cond(
                    remainder(i, 2) == 1, [&]() { return inner + weight * v; }, [&]() { return inner - weight * v; });
              },
              total);
        },
        zeros(v.shape(), v.dtype()));
  });
  Tensor expected = zeros(x.shape(), x.dtype());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j <= i; ++j)
      expected = i % 2 == 1 ? expected + static_cast<double>(j) * x : expected - static_cast<double>(j) * x;
  const Tensor got = f(x);
  const std::vector<double> want = expected.to_vector<double>(), have = got.to_vector<double>();
  ASSERT_EQ(want.size(), have.size());
  for (std::size_t index = 0; index < want.size(); ++index) EXPECT_NEAR(want[index], have[index], 1e-12);
}

TEST(ControlFlow, TheTracedGraphHoldsOneLoopWhateverTheTripCount) {
  auto f = function([](const Tensor& v) {
    return fori_loop(
        0, 10000, [](const Tensor&, const Tensor& carry) { return carry * 1.0001; }, v);
  });
  const std::string ir = f.get_compiler_ir(Stage::traced, ones({4}));
  EXPECT_NE(ir.find("scan_loop("), std::string::npos) << ir;
  EXPECT_NE(ir.find("length=10000"), std::string::npos) << ir;
  EXPECT_LT(std::count(ir.begin(), ir.end(), '\n'), 30) << ir;
}

TEST(ControlFlow, TheGuidesConjugateGradientsSolveTheSystem) {
  // docs/guide.md's example, verbatim but for the names.
  using State = std::tuple<Tensor, Tensor, Tensor, Tensor>;  // x, r, p, |r|^2
  auto solve = function(
      [](Tensor a, Tensor b) {
        const auto dot = [](const Tensor& u, const Tensor& v) { return reduce_sum(u * v); };
        const Tensor threshold = dot(b, b) * 1e-10;
        State solved = while_loop([&](const State& s) { return std::get<3>(s) > threshold; },
                                  [&](const State& s) {
                                    const auto& [x, r, p, rr] = s;
                                    const Tensor ap = matmul(a, p);
                                    const Tensor alpha = rr / dot(p, ap);
                                    const Tensor next = r - alpha * ap;
                                    return State{x + alpha * p, next, next + (dot(next, next) / rr) * p,
                                                 dot(next, next)};
                                  },
                                  State{zeros(b.shape(), b.dtype()), b, b, dot(b, b)});
        return std::get<0>(solved);
      },
      {.jit_compile = true});
  const Tensor m = random_tensor(DType::f64, {40, 40}, 12);
  const Tensor a = matmul(m, m, {.transpose_b = true}) / 40.0 + eye(40, 40, 0, DType::f64) * 0.5;
  const Tensor b = random_tensor(DType::f64, {40}, 13);
  const Tensor x = solve(a, b);
  const std::vector<double> residual = (matmul(a, x) - b).to_vector<double>();
  for (double element : residual) EXPECT_LT(std::abs(element), 1e-4);
  EXPECT_EQ(solve.statistics().fallbacks, 0);
}

TEST(ControlFlow, ErrorsNameTheConstructAndTheCallersLine) {
  const Tensor x = ones({3});
  const std::string mismatched = error_message([&] {
    cond(
        flag(true), [&]() { return x; }, [&]() { return ones({4}); });
  });
  EXPECT_NE(mismatched.find("cond"), std::string::npos) << mismatched;
  EXPECT_NE(mismatched.find("f32[3]"), std::string::npos) << mismatched;
  EXPECT_NE(mismatched.find("f32[4]"), std::string::npos) << mismatched;
  EXPECT_NE(mismatched.find("control_flow_test.cpp"), std::string::npos) << mismatched;

  const std::string dtype = error_message([&] {
    cond(
        flag(true), [&]() { return x; }, [&]() { return cast(x, DType::f64); });
  });
  EXPECT_NE(dtype.find("f64[3]"), std::string::npos) << dtype;

  const std::string carry = error_message([&] {
    while_loop([](const Tensor& v) { return reduce_sum(v) < 10.0; },
               [](const Tensor& v) {
                 return concat({v, v}, 0);
               },
               x);
  });
  EXPECT_NE(carry.find("while_loop"), std::string::npos) << carry;
  EXPECT_NE(carry.find("carry 0"), std::string::npos) << carry;

  const std::string predicate = error_message([&] {
    cond(
        x, [&]() { return x; }, [&]() { return x; });
  });
  EXPECT_NE(predicate.find("scalar"), std::string::npos) << predicate;
  const std::string float_predicate = error_message([&] {
    cond(
        reduce_sum(x), [&]() { return x; }, [&]() { return x; });
  });
  EXPECT_NE(float_predicate.find("bool or integer"), std::string::npos) << float_predicate;
  const std::string condition = error_message(
      [&] { while_loop([](const Tensor& v) { return reduce_sum(v); }, [](const Tensor& v) { return v; }, x); });
  EXPECT_NE(condition.find("bool scalar"), std::string::npos) << condition;
  const std::string lengths = error_message([&] {
    scan(
        [](const Tensor& c, const std::pair<Tensor, Tensor>&) {
          return std::pair<Tensor, Tensor>{c, c};
        },
        x, std::pair<Tensor, Tensor>{ones({3, 2}), ones({4, 2})});
  });
  EXPECT_NE(lengths.find("leading axis"), std::string::npos) << lengths;
  const std::string no_length = error_message([&] {
    scan(
        [](const Tensor& c, const std::vector<Tensor>&) {
          return std::pair<Tensor, Tensor>{c, c};
        },
        x, std::vector<Tensor>{});
  });
  EXPECT_NE(no_length.find("options.length"), std::string::npos) << no_length;
  // The function stays usable after a failed trace.
  auto f = function([](const Tensor& p, const Tensor& v) {
    return cond(
        p, [&]() { return v * 2.0; }, [&]() { return v; });
  });
  EXPECT_THROW(f(ones({2}, DType::boolean), x), ShapeError);
  expect_same(x * 2.0, f(flag(true), x));
}

}  // namespace
}  // namespace kiln
