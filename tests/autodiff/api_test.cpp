// kiln::grad, value_and_grad, vjp, jvp, stop_gradient and custom_vjp (include/kiln/autodiff.h): their results on
// concrete tensors and inside kiln::function, their composition (grad of grad, jvp of grad), JAX's choices at
// ties and kinks, and their errors, which name the transformation and the user's line and leave it usable.

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cmath>
#include <string>

namespace kiln {
namespace {

Tensor vector_of(std::vector<double> values) { return from_vector(values); }

void expect_near(const Tensor& actual, const std::vector<double>& expected, double tolerance = 1e-12) {
  const std::vector<double> values = cast(actual, DType::f64).to_vector<double>();
  ASSERT_EQ(values.size(), expected.size());
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(values[i], expected[i], tolerance) << "element " << i;
}

TEST(Grad, OfAScalarFunctionOnConcreteTensors) {
  auto f = [](Tensor x) { return reduce_sum(x * x * x); };
  Tensor x = vector_of({1, -2, 3});
  Tensor gradient = grad(f)(x);
  expect_near(gradient, {3, 12, 27});
  // Gradients is a Tensor: it takes part in ops.
  expect_near(gradient * 2 + 1, {7, 25, 55});
}

TEST(Grad, WithRespectToSeveralArgumentsInTheOrderAsked) {
  auto f = [](Tensor w, Tensor b, Tensor x) { return reduce_sum(square(matmul(x, w) + b)); };
  Tensor w = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2}), b = vector_of({0.5, -1}),
         x = from_vector<double>({1, 0, -1}, {1, 3});
  Gradients gradients = grad(f, {.argnums = {1, 0}})(w, b, x);
  ASSERT_EQ(gradients.size(), 2u);
  // y = x w + b = [-4 + 0.5, -4 - 1] = [-3.5, -5]; d/db = 2y, d/dw = x^T 2y.
  expect_near(gradients[0], {-7, -10});
  expect_near(gradients[1], {-7, -10, 0, 0, 7, 10});
}

TEST(ValueAndGrad, GivesTheValueAndTheGradientFromOneEvaluation) {
  auto f = [](Tensor x) { return reduce_mean(exp(x)); };
  Tensor x = vector_of({0, std::log(2.0)});
  auto [value, gradient] = value_and_grad(f)(x);
  expect_near(value, {1.5});
  expect_near(gradient, {0.5, 1});
}

TEST(Grad, InsideKilnFunctionBothExecutorsAgree) {
  auto loss = [](Tensor w, Tensor x) { return reduce_sum(tanh(matmul(x, w))); };
  Tensor w = random::normal({4, 3}, {.seed = 1, .dtype = DType::f64});
  Tensor x = random::normal({5, 4}, {.seed = 2, .dtype = DType::f64});
  Tensor eager = grad(loss)(w, x);
  for (bool jit : {false, true}) {
    auto compiled = function(value_and_grad(loss), {.jit_compile = jit, .on_compile_failure = Fallback::none});
    auto [value, gradient] = compiled(w, x);
    expect_near(value, {loss(w, x).item<double>()}, 1e-12);
    expect_near(gradient, eager.to_vector<double>(), 1e-12);
    EXPECT_EQ(compiled.statistics().traces, 1);
    compiled(w, x);
    EXPECT_EQ(compiled.statistics().traces, 1) << "a second call traces again";
  }
}

// A traced grad is nodes of the function's graph: the traced IR holds the forward and the backward ops.
TEST(Grad, ExtendsTheTracedGraph) {
  auto f = function(grad([](Tensor x) { return reduce_sum(sin(x)); }));
  Tensor x = vector_of({0.5, 1.5});
  const std::string traced = f.get_compiler_ir(Stage::traced, x);
  EXPECT_NE(traced.find("sin("), std::string::npos) << traced;
  EXPECT_NE(traced.find("cos("), std::string::npos) << traced;
  expect_near(f(x), {std::cos(0.5), std::cos(1.5)});
}

TEST(Grad, OfGradGivesSecondDerivatives) {
  auto f = [](Tensor x) { return reduce_sum(x * x * x); };
  auto second = grad([f](Tensor x) { return reduce_sum(grad(f)(x)); });
  expect_near(second(vector_of({1, -2})), {6, -12});
  // Hessian-vector product: the derivative of <grad f, v>.
  auto quadratic = [](Tensor x) { return reduce_sum(square(x)) * reduce_sum(x); };
  Tensor v = vector_of({1, 0, 2});
  auto hessian_vector = [&](Tensor x) { return grad([&](Tensor y) { return reduce_sum(grad(quadratic)(y) * v); })(x); };
  // f = |x|^2 s with s = sum x: H = 2 s I + 2 x 1^T + 2 1 x^T.
  Tensor x = vector_of({1, 2, 3});
  const double s = 6;
  std::vector<double> expected(3);
  const std::vector<double> xs = {1, 2, 3}, vs = {1, 0, 2};
  const double x_dot_v = 1 + 6, sum_v = 3;
  for (int i = 0; i < 3; ++i) expected[static_cast<std::size_t>(i)] = 2 * s * vs[i] + 2 * xs[i] * sum_v + 2 * x_dot_v;
  expect_near(hessian_vector(x), expected);
  expect_near(function(hessian_vector, {.jit_compile = true})(x), expected);
}

TEST(Grad, ClosingOverADifferentiatedValueDifferentiatesThroughIt) {
  // d/dx [d/dy (x y)] at y = 1 is 1; d/dx of x * (d/dy x y) = 2x.
  auto outer = grad([](Tensor x) {
    Tensor inner = grad([x](Tensor y) { return x * y; })(ones({}, DType::f64));
    return x * inner;
  });
  expect_near(outer(full({}, 3.0, DType::f64)), {6});
}

TEST(Vjp, GivesOutputsAndAPullback) {
  auto f = [](Tensor a, Tensor b) { return std::make_tuple(a * b, sin(a)); };
  Tensor a = vector_of({1, 2}), b = vector_of({3, 4});
  auto [outputs, pullback] = vjp(f, a, b);
  expect_near(std::get<0>(outputs), {3, 8});
  Gradients cotangents = pullback(vector_of({1, 10}), vector_of({2, 0}));
  ASSERT_EQ(cotangents.size(), 2u);
  expect_near(cotangents[0], {3 + 2 * std::cos(1.0), 40});
  expect_near(cotangents[1], {1, 20});
  // Called again with other cotangents.
  expect_near(pullback(vector_of({1, 1}), vector_of({0, 0}))[1], {1, 2});
}

TEST(Vjp, InsideKilnFunction) {
  auto step = function([](Tensor x, Tensor cotangent) {
    auto [y, pullback] = vjp([](Tensor value) { return exp(value) * 2; }, x);
    return std::make_pair(y, Tensor(pullback(cotangent)));
  });
  auto [y, dx] = step(vector_of({0, 1}), vector_of({1, 3}));
  expect_near(y, {2, 2 * std::exp(1.0)});
  expect_near(dx, {2, 6 * std::exp(1.0)});
}

TEST(Jvp, ForwardMode) {
  auto f = [](Tensor x, Tensor y) { return x * sin(y); };
  Tensor x = vector_of({2, 3}), y = vector_of({0.5, 1});
  auto [out, out_tangent] = jvp(f, {x, y}, {vector_of({1, 1}), vector_of({0, 2})});
  expect_near(out, {2 * std::sin(0.5), 3 * std::sin(1.0)});
  expect_near(out_tangent, {std::sin(0.5), std::sin(1.0) + 3 * std::cos(1.0) * 2});
}

TEST(Jvp, OfGradIsAHessianVectorProduct) {
  auto f = [](Tensor x) { return reduce_sum(exp(x) * x); };  // f'' = e^x (x + 2) on the diagonal
  Tensor x = vector_of({0, 1}), v = vector_of({1, -1});
  auto [gradient, hessian_v] = jvp([&](Tensor y) { return Tensor(grad(f)(y)); }, {x}, {v});
  expect_near(gradient, {1, 2 * std::exp(1.0)});
  expect_near(hessian_v, {2, -3 * std::exp(1.0)});
}

TEST(StopGradient, BlocksTheDerivative) {
  auto f = [](Tensor x) { return reduce_sum(x * stop_gradient(x)); };
  expect_near(grad(f)(vector_of({2, -3})), {2, -3});
  expect_near(function(grad(f), {.jit_compile = true})(vector_of({2, -3})), {2, -3});
  // On concrete tensors it is the tensor itself.
  expect_near(stop_gradient(vector_of({4})), {4});
}

// log(1 + e^x) written naively overflows for large x; a custom derivative gives sigmoid(x) exactly.
TEST(CustomVjp, TheBackwardFunctionGivesTheDerivative) {
  auto softplus = custom_vjp(
      [](Tensor x) {
        Tensor y = log1p(exp(x));
        return std::make_pair(y, std::vector<Tensor>{x});
      },
      [](const std::vector<Tensor>& residuals, const Tensor& cotangent) { return cotangent * sigmoid(residuals[0]); });
  Tensor x = vector_of({1000, 0});
  expect_near(grad([&](Tensor y) { return reduce_sum(softplus(y)); })(x), {1, 0.5});
  expect_near(softplus(vector_of({0})), {std::log(2.0)});
  // Inside a compiled function, and twice (the backward function is part of the derivative's graph).
  auto compiled = function(grad([&](Tensor y) { return reduce_sum(softplus(y) * y); }), {.jit_compile = true});
  expect_near(compiled(vector_of({1})), {std::log1p(std::exp(1.0)) + 1 / (1 + std::exp(-1.0))}, 1e-7);
}

TEST(CustomVjp, MayOverrideWhatTheChainRuleWouldGive) {
  // A "straight-through" rounding: forward rounds, backward passes the cotangent through.
  auto straight_through = custom_vjp([](Tensor x) { return std::make_pair(round(x), std::vector<Tensor>{}); },
                                     [](const std::vector<Tensor>&, const Tensor& cotangent) { return cotangent; });
  expect_near(grad([&](Tensor x) { return reduce_sum(straight_through(x) * 3); })(vector_of({0.2, 1.7})), {3, 3});
  // Forward mode through it is refused, as in JAX.
  EXPECT_THROW(jvp([&](Tensor x) { return straight_through(x); }, {vector_of({1})}, {vector_of({1})}), ValueError);
}

// JAX's choices where the derivative is not defined.
TEST(Grad, TiesAndKinksAsJaxDefinesThem) {
  Tensor x = vector_of({1, 3, 3, -2});
  expect_near(grad([](Tensor y) { return reduce_max(y); })(x), {0, 0.5, 0.5, 0});
  expect_near(grad([](Tensor y) { return reduce_min(y); })(vector_of({2, 2, 5})), {0.5, 0.5, 0});
  expect_near(grad([](Tensor y) { return reduce_sum(maximum(y, y)); })(x), {1, 1, 1, 1});
  expect_near(grad([](Tensor y) { return reduce_sum(maximum(y, 3.0)); })(x), {0, 0.5, 0.5, 0});
  expect_near(grad([](Tensor y) { return reduce_sum(minimum(y, 1.0)); })(x), {0.5, 0, 0, 1});
  expect_near(grad([](Tensor y) { return reduce_sum(relu(y) + abs(y) + sign(y)); })(vector_of({0, 2, -1})), {0, 2, -1});
  // pow: no base derivative where the exponent is 0, no exponent derivative where the base is 0.
  auto power = [](Tensor base, Tensor exponent) { return reduce_sum(pow(base, exponent)); };
  Gradients both = grad(power, {.argnums = {0, 1}})(vector_of({0, 2}), vector_of({0, 3}));
  expect_near(both[0], {0, 12});
  expect_near(both[1], {0, 8 * std::log(2.0)});
  // A product with zeros: each element's derivative is the product of the others.
  expect_near(grad([](Tensor y) { return reduce_prod(y); })(vector_of({0, 2, 3})), {6, 0, 0});
  expect_near(grad([](Tensor y) { return reduce_prod(y); })(vector_of({0, 2, 0})), {0, 0, 0});
  // Comparisons, argmax and integer results give no gradient.
  expect_near(
      grad([](Tensor y) { return reduce_sum(cast(argmax(y, 0), DType::f64) + cast(y > 0, DType::f64) * y); })(x),
      {1, 1, 1, 0});
}

// softmax, log_softmax and logsumexp shift by the row's maximum, which changes no result: the shift has no
// derivative (stop_gradient, as in JAX), so a tied maximum gets the softmax's own gradient, y (g - sum(g y)), and
// the backward graph compares nothing with the maximum (reduce_max's rule would share among ties with eq).
TEST(Grad, TheSoftmaxShiftHasNoDerivative) {
  Tensor x = vector_of({2, 2, 0.5, -1});
  const std::vector<double> g = {0.3, -1.2, 0.7, 2.0};
  Tensor weights = vector_of(g);
  std::vector<double> y(4);
  double total = 0, weighted = 0;
  for (std::size_t i = 0; i < 4; ++i) total += std::exp(x.to_vector<double>()[i]);
  for (std::size_t i = 0; i < 4; ++i) y[i] = std::exp(x.to_vector<double>()[i]) / total;
  for (std::size_t i = 0; i < 4; ++i) weighted += g[i] * y[i];
  std::vector<double> softmax_gradient(4), log_softmax_gradient(4);
  double sum_g = 0;
  for (double each : g) sum_g += each;
  for (std::size_t i = 0; i < 4; ++i) {
    softmax_gradient[i] = y[i] * (g[i] - weighted);
    log_softmax_gradient[i] = g[i] - y[i] * sum_g;
  }
  auto of_softmax = [&](Tensor v) { return reduce_sum(nn::softmax(v) * weights); };
  auto of_log_softmax = [&](Tensor v) { return reduce_sum(nn::log_softmax(v) * weights); };
  auto of_logsumexp = [](Tensor v) { return reduce_logsumexp(v); };
  expect_near(grad(of_softmax)(x), softmax_gradient, 1e-15);
  expect_near(grad(of_log_softmax)(x), log_softmax_gradient, 1e-15);
  expect_near(grad(of_logsumexp)(x), y, 1e-15);
  const FunctionOptions jit = {.jit_compile = true};
  for (const std::string& optimized : {function(grad(of_softmax), jit).get_compiler_ir(Stage::optimized, x),
                                       function(grad(of_log_softmax), jit).get_compiler_ir(Stage::optimized, x),
                                       function(grad(of_logsumexp), jit).get_compiler_ir(Stage::optimized, x)})
    EXPECT_EQ(optimized.find(" eq("), std::string::npos) << optimized;
}

// The softmax's derivative is its own, dy = y (dz - sum(y dz)): the backward reads the probabilities and the
// cotangent, not the exponentials (no second exp, no division beyond the forward's). Checked against central
// differences in float64 along both axes, forward mode too, and grad of grad (a Hessian-vector product).
TEST(Grad, TheSoftmaxBackwardReadsItsProbabilitiesAlone) {
  const Tensor x = random::normal({3, 5}, {.seed = 5, .dtype = DType::f64});
  const Tensor w = random::normal({3, 5}, {.seed = 6, .dtype = DType::f64});
  const Tensor v = random::normal({3, 5}, {.seed = 7, .dtype = DType::f64});
  for (const std::int64_t axis : {std::int64_t{-1}, std::int64_t{0}}) {
    auto f = [&](Tensor y) { return reduce_sum(square(nn::softmax(y, axis) * w)); };
    auto along = [&](double step) {  // f(x + step v)
      return f(x + step * v).item<double>();
    };
    const double h = 1e-5;
    const double directional = (along(h) - along(-h)) / (2 * h);
    const Tensor gradient = grad(f)(x);
    EXPECT_NEAR(reduce_sum(gradient * v).item<double>(), directional, 1e-8) << "axis " << axis;
    auto [value, tangent] = jvp(f, {x}, {v});
    EXPECT_NEAR(tangent.item<double>(), directional, 1e-8) << "axis " << axis;
    // grad of grad along v, against central differences of the gradient.
    auto [unused, hessian_v] = jvp([&](Tensor y) { return Tensor(grad(f)(y)); }, {x}, {v});
    const std::vector<double> ahead = grad(f)(x + h * v).to_vector<double>(),
                              behind = grad(f)(x - h * v).to_vector<double>(), got = hessian_v.to_vector<double>();
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], (ahead[i] - behind[i]) / (2 * h), 1e-6) << "axis " << axis << ", element " << i;
    const std::string optimized = function(grad(f), {.jit_compile = true}).get_compiler_ir(Stage::optimized, x);
    auto count = [&](const std::string& op) {
      int found = 0;
      for (std::size_t at = optimized.find(op); at != std::string::npos; at = optimized.find(op, at + 1)) ++found;
      return found;
    };
    EXPECT_EQ(count(" exp("), 1) << optimized;
    EXPECT_EQ(count(" div("), 1) << optimized;
  }
}

TEST(Grad, OfAFunctionNotDependingOnTheArgumentIsZero) {
  Tensor w = vector_of({1, 2});
  expect_near(grad([&](Tensor x) { return reduce_sum(w) + reduce_sum(floor(x)); })(vector_of({5, 6})), {0, 0});
  expect_near(grad([&](Tensor) { return reduce_sum(w); })(vector_of({5, 6})), {0, 0});
}

TEST(Grad, ThroughEmptyTensorsAndScalars) {
  Tensor empty = zeros({0, 3}, DType::f64);
  Tensor gradient = grad([](Tensor x) { return reduce_sum(exp(x)); })(empty);
  EXPECT_EQ(gradient.shape(), Shape({0, 3}));
  expect_near(grad([](Tensor x) { return x * x; })(full({}, 3.0, DType::f64)), {6});
  // The maximum over an axis of no elements is -inf, which nothing moves: its tangent is 0 (an average over the
  // elements equal to the maximum would be 0 / 0), and erfc there is flat (kiln-fuzz --gradients seed 2).
  auto flat_max = [](Tensor x) { return erfc(reduce_max(x, {1}, true)) + reduce_sum(x, {1}, true); };
  Tensor rows = zeros({2, 0}, DType::f64);
  auto [value, tangent] = jvp(flat_max, {rows}, {rows});
  expect_near(value, {2, 2});
  expect_near(tangent, {0, 0});
  auto compiled = function([&](Tensor x, Tensor dx) { return jvp(flat_max, {x}, {dx}).second; }, {.jit_compile = true});
  expect_near(compiled(rows, rows), {0, 0});
  EXPECT_EQ(grad([&](Tensor x) { return reduce_sum(flat_max(x)); })(rows).shape(), Shape({2, 0}));
}

TEST(Grad, TheSameTensorAsTwoArgumentsGetsTwoGradients) {
  Tensor x = vector_of({2});
  Gradients gradients = grad([](Tensor a, Tensor b) { return reduce_sum(a * a * b); }, {.argnums = {0, 1}})(x, x);
  expect_near(gradients[0], {8});
  expect_near(gradients[1], {4});
}

// ---- errors --------------------------------------------------------------------------------------------------

TEST(GradErrors, ANonScalarOutputIsAShapeErrorNamingGradAndTheLine) {
  Tensor x = vector_of({1, 2});
  const int line = __LINE__ + 1;
  auto g = grad([](Tensor y) { return y * 2; });
  try {
    g(x);
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& error) {
    EXPECT_EQ(error.op(), "grad");
    EXPECT_NE(error.detail().find("f64[2]"), std::string::npos) << error.what();
    EXPECT_NE(error.detail().find("scalar"), std::string::npos) << error.what();
    EXPECT_NE(error.location().find("api_test.cpp:" + std::to_string(line)), std::string::npos) << error.what();
  }
  // Usable afterwards, and inside a kiln::function the error propagates and the function stays usable.
  auto summed = grad([](Tensor y) { return reduce_sum(y * 2); });
  expect_near(summed(x), {2, 2});
  auto compiled = function([&](Tensor y) { return Tensor(g(y)); });
  EXPECT_THROW(compiled(x), ShapeError);
  EXPECT_THROW(compiled(x), ShapeError);
  auto fine = function([&](Tensor y) { return Tensor(summed(y)); });
  expect_near(fine(x), {2, 2});
}

TEST(GradErrors, AnIntegerOrBoolArgumentIsADTypeErrorNamingTheArgument) {
  auto f = [](Tensor x, Tensor n) { return reduce_sum(x * cast(n, DType::f32)); };
  Tensor x = ones({3}), n = from_vector<std::int32_t>({1, 2, 3});
  const int line = __LINE__ + 1;
  auto g = grad(f, {.argnums = {0, 1}});
  try {
    g(x, n);
    ADD_FAILURE() << "no error";
  } catch (const DTypeError& error) {
    EXPECT_EQ(error.op(), "grad");
    EXPECT_NE(error.detail().find("argument 1 is i32[3]"), std::string::npos) << error.what();
    EXPECT_NE(error.location().find("api_test.cpp:" + std::to_string(line)), std::string::npos) << error.what();
  }
  EXPECT_THROW(grad(f, {.argnums = {1}})(x, from_vector<bool>({true, false, true})), DTypeError);
  expect_near(grad(f)(x, n), {1, 2, 3});
  EXPECT_THROW(grad(f, {.argnums = {2}})(x, n), ValueError);
  EXPECT_THROW(grad(f, {.argnums = {0, 0}})(x, n), ValueError);
}

TEST(GradErrors, AHostCallInTheWayIsAClearError) {
  auto f = [](Tensor x) {
    Tensor doubled =
        host_call([](const std::vector<Tensor>& inputs) { return inputs[0] * 2; }, {x}, x.dtype(), x.shape());
    return reduce_sum(doubled);
  };
  Tensor x = vector_of({1, 2});
  const int line = __LINE__ + 1;
  auto g = grad(f);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      g(x);
      ADD_FAILURE() << "no error";
    } catch (const ValueError& error) {
      EXPECT_EQ(error.op(), "grad");
      EXPECT_NE(error.detail().find("host_call"), std::string::npos) << error.what();
      EXPECT_NE(error.detail().find("no derivative"), std::string::npos) << error.what();
      EXPECT_NE(error.location().find("api_test.cpp:" + std::to_string(line)), std::string::npos) << error.what();
    }
  }
  // With its input's gradient stopped, nothing flows through it and the function differentiates.
  expect_near(grad([&](Tensor y) { return f(stop_gradient(y)) + reduce_sum(y); })(x), {1, 1});
}

TEST(VjpErrors, CotangentsMustMatchTheOutputs) {
  auto [y, pullback] = vjp([](Tensor x) { return x * 2; }, vector_of({1, 2}));
  (void)y;
  EXPECT_THROW(pullback(vector_of({1, 2, 3})), ShapeError);
  EXPECT_THROW(pullback(ones({2}, DType::f32)), DTypeError);
  expect_near(pullback(vector_of({1, 1})), {2, 2});
}

}  // namespace
}  // namespace kiln
