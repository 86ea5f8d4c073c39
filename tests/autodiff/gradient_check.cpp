#include "autodiff/gradient_check.h"

#include <cmath>
#include <sstream>

namespace kiln::testing {
namespace {

double dot(const Tensor& a, const Tensor& b) {
  return reduce_sum(cast(a, DType::f64) * cast(b, DType::f64)).item<double>();
}

// sum |a b|: the scale an inner product's rounding and truncation errors are relative to.
double absolute_dot(const Tensor& a, const Tensor& b) {
  return reduce_sum(abs(cast(a, DType::f64) * cast(b, DType::f64))).item<double>();
}

std::vector<Tensor> displaced(const std::vector<Tensor>& inputs, const std::vector<Tensor>& direction, double step) {
  std::vector<Tensor> moved;
  for (std::size_t i = 0; i < inputs.size(); ++i) moved.push_back(inputs[i] + direction[i] * step);
  return moved;
}

std::string shapes(const std::vector<Tensor>& tensors) {
  std::ostringstream text;
  for (const Tensor& tensor : tensors) text << to_string(tensor.dtype()) << tensor.shape().to_string() << " ";
  return text.str();
}

void check_first_order(const std::string& label, const FlatFunction& function, const std::vector<Tensor>& inputs,
                       double tolerance, double step, std::uint64_t seed) {
  const std::vector<Tensor> outputs = function(inputs);
  std::vector<Tensor> direction, cotangent;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    direction.push_back(random::normal(inputs[i].shape(), {.seed = seed + 31 * i, .dtype = DType::f64}));
  for (std::size_t i = 0; i < outputs.size(); ++i)
    cotangent.push_back(
        random::normal(outputs[i].shape(), {.seed = seed + 1000 + 17 * i, .dtype = outputs[i].dtype()}));

  // Central differences: f's directional derivative along `direction`.
  const std::vector<Tensor> ahead = function(displaced(inputs, direction, step));
  const std::vector<Tensor> behind = function(displaced(inputs, direction, -step));
  std::vector<Tensor> differences;
  for (std::size_t i = 0; i < outputs.size(); ++i) differences.push_back((ahead[i] - behind[i]) / (2 * step));

  // Forward mode.
  std::vector<Tensor> flat = detail::jvp_call(function, inputs, direction, Location::current());
  ASSERT_EQ(flat.size(), 2 * outputs.size()) << label;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& tangent = flat[outputs.size() + i];
    ASSERT_EQ(tangent.shape(), outputs[i].shape()) << label << ": tangent " << i;
    const Tensor error = abs(tangent - differences[i]);
    const Tensor bound = tolerance * (1 + abs(differences[i]));
    EXPECT_TRUE(reduce_all(error <= bound).item<bool>())
        << label << ": jvp output " << i << " differs from central differences\njvp:\n"
        << tangent << "\ndifferences:\n"
        << differences[i];
  }

  // Reverse mode: <vjp(u), v> = <u, J v>.
  detail::VjpResult result = detail::vjp_call(function, inputs, Location::current());
  const std::vector<Tensor> gradients = detail::pull_back(*result.pullback, cotangent, Location::current());
  ASSERT_EQ(gradients.size(), inputs.size()) << label;
  double reverse = 0, forward = 0, scale = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ASSERT_EQ(gradients[i].shape(), inputs[i].shape()) << label << ": gradient " << i << " of " << shapes(inputs);
    ASSERT_EQ(gradients[i].dtype(), inputs[i].dtype()) << label << ": gradient " << i;
    reverse += dot(gradients[i], direction[i]);
    scale += absolute_dot(gradients[i], direction[i]);
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    forward += dot(cotangent[i], differences[i]);
    scale += absolute_dot(cotangent[i], differences[i]);
  }
  EXPECT_LE(std::fabs(reverse - forward), tolerance * (1 + scale))
      << label << ": <vjp(u), v> = " << reverse << " but <u, central differences along v> = " << forward;
}

}  // namespace

void check_gradients(const std::string& label, const FlatFunction& function, const std::vector<Tensor>& inputs,
                     int order, double tolerance, double step) {
  check_first_order(label, function, inputs, tolerance, step, 1);
  if (order < 2) return;
  // The derivative of the vjp with a fixed cotangent: second derivatives through every rule's transpose.
  const std::vector<Tensor> outputs = function(inputs);
  std::vector<Tensor> cotangent;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    cotangent.push_back(random::normal(outputs[i].shape(), {.seed = 77 + i, .dtype = outputs[i].dtype()}));
  const FlatFunction pulled_back = [function, cotangent](const std::vector<Tensor>& x) {
    detail::VjpResult result = detail::vjp_call(function, x, Location::current());
    return detail::pull_back(*result.pullback, cotangent, Location::current());
  };
  check_first_order(label + " (second order)", pulled_back, inputs, tolerance * 10, step, 2);
}

Tensor random_input(const Shape& shape, std::uint64_t seed, double low, double high, bool signed_values) {
  const Tensor magnitude = random::uniform(shape, {.seed = seed, .low = low, .high = high, .dtype = DType::f64});
  if (!signed_values) return magnitude;
  const Tensor coin = random::uniform(shape, {.seed = seed + 7919, .dtype = DType::f64});
  return where(coin < 0.5, -magnitude, magnitude);
}

}  // namespace kiln::testing
