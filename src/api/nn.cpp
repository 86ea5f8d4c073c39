// Neural-network composites, written with the primitive ops so that the JIT
// sees (and fuses) every step.

#include <kiln/creation.h>
#include <kiln/error.h>
#include <kiln/nn.h>

#include <cmath>
#include <numbers>

namespace kiln::nn {

Tensor relu(const Tensor& x, Location location) { return kiln::relu(x, location); }

Tensor sigmoid(const Tensor& x, Location location) { return kiln::sigmoid(x, location); }

Tensor gelu(const Tensor& x, GeluApproximation approximation, Location location) {
  if (approximation == GeluApproximation::erf) {
    // x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
    Tensor phi = add(1.0, erf(mul(x, 1.0 / std::numbers::sqrt2, location), location), location);
    return mul(mul(x, 0.5, location), phi, location);
  }
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  const double sqrt_2_over_pi = std::sqrt(2.0 / std::numbers::pi);
  Tensor cube = mul(mul(x, x, location), x, location);
  Tensor inner = mul(add(x, mul(cube, 0.044715, location), location), sqrt_2_over_pi, location);
  return mul(mul(x, 0.5, location), add(tanh(inner, location), 1.0, location), location);
}

Tensor softmax(const Tensor& x, std::int64_t axis, Location location) {
  Tensor shifted = sub(x, reduce_max(x, {axis}, true, location), location);
  Tensor exponent = exp(shifted, location);
  return div(exponent, reduce_sum(exponent, {axis}, true, location), location);
}

Tensor log_softmax(const Tensor& x, std::int64_t axis, Location location) {
  Tensor shifted = sub(x, reduce_max(x, {axis}, true, location), location);
  Tensor total = reduce_sum(exp(shifted, location), {axis}, true, location);
  return sub(shifted, log(total, location), location);
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon, Location location) {
  if (x.defined() && x.rank() == 0)
    throw ShapeError("layer_norm", "needs rank >= 1, got a scalar " + std::string(to_string(x.dtype())) + "[]",
                     location);
  Tensor mean = reduce_mean(x, {-1}, true, location);
  Tensor centered = sub(x, mean, location);
  Tensor variance = reduce_mean(mul(centered, centered, location), {-1}, true, location);
  Tensor result = mul(centered, rsqrt(add(variance, epsilon, location), location), location);
  if (gamma.defined()) result = mul(result, gamma, location);
  if (beta.defined()) result = add(result, beta, location);
  return result;
}

}  // namespace kiln::nn
