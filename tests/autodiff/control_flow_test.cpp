// Derivatives through control flow (src/autodiff/control_rules.h) beyond the finite-difference cases of
// gradient_cases.cpp: a while_loop's forward mode and its refused reverse mode, a scan's gradients against the same
// loop unrolled in C++ (standard executor and JIT), a cond's gradient from the branch taken alone, and the marks a
// region cannot keep.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>

namespace kiln {
namespace {

using testing::error_message;

Tensor vector_of(std::vector<double> values) {
  const auto size = static_cast<std::int64_t>(values.size());
  return from_vector(values, {size});
}

void expect_close(const Tensor& expected, const Tensor& got, double tolerance) {
  ASSERT_EQ(expected.shape(), got.shape());
  const std::vector<double> a = expected.to_vector<double>(), b = got.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tolerance * (1 + std::fabs(a[i]))) << "element " << i;
}

// Iterates x <- x cos(x) + w until the step count reaches the data's own bound (a trip count known only at run time).
Tensor iterate(const Tensor& x, const Tensor& w) {
  const Tensor bound = cast(reduce_sum(w) * 0.0 + 5.0, DType::i32);
  const auto [count, result] = while_loop([&](const std::pair<Tensor, Tensor>& state) { return state.first < bound; },
                                          [&](const std::pair<Tensor, Tensor>& state) {
                                            return std::pair{state.first + 1, state.second * cos(state.second) + w};
                                          },
                                          std::pair{zeros({}, DType::i32), x});
  (void)count;
  return result;
}

TEST(ControlFlowDerivatives, WhileLoopHasAForwardModeDerivative) {
  const Tensor x = vector_of({0.3, -0.7, 1.1}), w = vector_of({0.2, 0.1, -0.4});
  const Tensor v = vector_of({0.5, -1.0, 0.25}), u = vector_of({-0.3, 0.8, 1.5});
  const double step = 1e-6;
  const Tensor differences = (iterate(x + v * step, w + u * step) - iterate(x - v * step, w - u * step)) / (2 * step);
  auto [value, tangent] = jvp([](Tensor a, Tensor b) { return iterate(a, b); }, {x, w}, {v, u});
  expect_close(iterate(x, w), value, 1e-12);
  expect_close(differences, tangent, 1e-6);
  // Traced and compiled: the tangent loop is a loop of the generated code.
  auto compiled = function(
      [](const Tensor& a, const Tensor& b, const Tensor& da, const Tensor& db) {
        return std::get<1>(jvp([](Tensor p, Tensor q) { return iterate(p, q); }, {a, b}, {da, db}));
      },
      {.jit_compile = true});
  expect_close(differences, compiled(x, w, v, u), 1e-6);
}

TEST(ControlFlowDerivatives, WhileLoopRefusesReverseModeNamingTheLoopAndTheLine) {
  const Tensor x = vector_of({0.3, -0.7}), w = vector_of({0.2, 0.1});
  const std::string message =
      error_message([&] { grad([](Tensor a, Tensor b) { return reduce_sum(iterate(a, b)); })(x, w); });
  EXPECT_NE(message.find("while_loop"), std::string::npos) << message;
  EXPECT_NE(message.find("reverse-mode"), std::string::npos) << message;
  EXPECT_NE(message.find("fori_loop"), std::string::npos) << message;
  EXPECT_NE(message.find("control_flow_test.cpp"), std::string::npos) << message;
  // Nothing is lost: the same function differentiates in forward mode afterwards.
  EXPECT_NO_THROW(jvp([](Tensor a, Tensor b) { return iterate(a, b); }, {x, w}, {x, w}));
}

// A recurrent loss: h <- tanh(h W + x_t U + b) over the sequence, the loss the squares of every step's h.
Tensor recurrent_step(const Tensor& h, const Tensor& x, const Tensor& w, const Tensor& u, const Tensor& b) {
  return tanh(matmul(h, w) + matmul(x, u) + b);
}

Tensor scanned_loss(const Tensor& h0, const Tensor& w, const Tensor& u, const Tensor& b, const Tensor& xs) {
  const auto [last, states] = scan(
      [&](const Tensor& h, const Tensor& x) {
        const Tensor next = recurrent_step(h, x, w, u, b);
        return std::pair{next, next};
      },
      h0, xs);
  return reduce_sum(square(states)) + reduce_sum(last);
}

Tensor unrolled_loss(const Tensor& h0, const Tensor& w, const Tensor& u, const Tensor& b, const Tensor& xs) {
  Tensor h = h0, total = reduce_sum(h0) * 0.0;
  for (std::int64_t t = 0; t < xs.shape()[0]; ++t) {
    h = recurrent_step(h, squeeze(slice(xs, {.start = {t, 0, 0}, .stop = {t + 1, xs.shape()[1], xs.shape()[2]}}), {0}),
                       w, u, b);
    total = total + reduce_sum(square(h));
  }
  return total + reduce_sum(h);
}

TEST(ControlFlowDerivatives, ScanGradientsEqualTheUnrolledLoopsOnEveryExecutor) {
  const std::int64_t steps = 9, batch = 3, hidden = 5, features = 4;
  const Tensor h0 = random::normal({batch, hidden}, {.seed = 1, .dtype = DType::f64});
  const Tensor w = random::normal({hidden, hidden}, {.seed = 2, .stddev = 0.4, .dtype = DType::f64});
  const Tensor u = random::normal({features, hidden}, {.seed = 3, .stddev = 0.4, .dtype = DType::f64});
  const Tensor b = random::normal({hidden}, {.seed = 4, .dtype = DType::f64});
  const Tensor xs = random::normal({steps, batch, features}, {.seed = 5, .dtype = DType::f64});
  const GradOptions every_weight{.argnums = {0, 1, 2, 3}};
  const auto expected = value_and_grad(unrolled_loss, every_weight)(h0, w, u, b, xs);
  const auto eager = value_and_grad(scanned_loss, every_weight)(h0, w, u, b, xs);
  for (const bool jit : {false, true}) {
    auto training = function(
        [&](const Tensor& a, const Tensor& p, const Tensor& q, const Tensor& r, const Tensor& s) {
          auto [loss, gradients] = value_and_grad(scanned_loss, every_weight)(a, p, q, r, s);
          std::vector<Tensor> results{loss};
          for (const Tensor& gradient : gradients) results.push_back(gradient);
          return results;
        },
        {.jit_compile = jit});
    const std::vector<Tensor> got = training(h0, w, u, b, xs);
    SCOPED_TRACE(jit ? "JIT" : "standard executor");
    expect_close(expected.first, got[0], 1e-12);
    for (std::size_t i = 0; i < 4; ++i) {
      expect_close(expected.second[i], eager.second[i], 1e-12);
      expect_close(expected.second[i], got[i + 1], 1e-12);
    }
  }
}

TEST(ControlFlowDerivatives, ACondsGradientComesFromTheBranchTakenAlone) {
  // The branch not taken has an infinite derivative here; a select of both branches' gradients would be NaN.
  auto root = [](Tensor x) {
    return cond(
        x > 0.0, [](const Tensor& y) { return sqrt(y); }, [](const Tensor& y) { return sqrt(-y); }, x);
  };
  const Tensor four = from_vector(std::vector<double>{4}, Shape());
  EXPECT_DOUBLE_EQ(0.25, grad(root)(four).item<double>());
  auto compiled = function([&](const Tensor& x) { return Tensor(grad(root)(x)); }, {.jit_compile = true});
  EXPECT_DOUBLE_EQ(-0.25, compiled(-four).item<double>());
}

TEST(ControlFlowDerivatives, StopGradientInsideABranchIsRefusedRatherThanIgnored) {
  const Tensor x = vector_of({0.5, 2.0});
  auto f = [](Tensor y) {
    return reduce_sum(cond(
        reduce_sum(y) > 0.0, [](const Tensor& z) { return z * stop_gradient(z); }, [](const Tensor& z) { return z; },
        y));
  };
  const std::string message = error_message([&] { grad(f)(x); });
  EXPECT_NE(message.find("stop_gradient"), std::string::npos) << message;
  EXPECT_NE(message.find("cond"), std::string::npos) << message;
  // Where no derivative flows into the construct, it runs as it did.
  EXPECT_NO_THROW(f(x));
}

}  // namespace
}  // namespace kiln
