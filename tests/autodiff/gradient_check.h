#pragma once
// JAX's check_grads for kiln: a function's derivatives in forward mode (jvp) and reverse mode (vjp) against
// central finite differences in float64, along random directions, and the table of cases that checks every
// derivative rule (src/autodiff) this way.

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <functional>
#include <string>
#include <vector>

namespace kiln::testing {

// A function of tensors as the transformations see it: a flat list in, a flat list out.
using FlatFunction = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Checks, at `inputs` (f64), that jvp(f) along a random direction v equals (f(x + h v) - f(x - h v)) / 2h, and that
// vjp(f) with a random cotangent u satisfies <vjp(u), v> = <u, J v> (its transpose); order 2 checks the function
// x -> vjp(f)(x)(u) the same way (second derivatives: grad of grad). Failures go to gtest, labelled.
// `step` is the finite differences' (h).
void check_gradients(const std::string& label, const FlatFunction& function, const std::vector<Tensor>& inputs,
                     int order = 1, double tolerance = 1e-6, double step = 1e-6);

// One function whose derivatives test the rules of `ops` (op table names).
struct GradientCase {
  std::string name;
  std::vector<std::string> ops;
  FlatFunction function;
  std::vector<Tensor> inputs;  // f64
  // Wider for a function that rounds to f32 inside: its difference quotients need a longer step.
  double tolerance = 1e-6;
  double step = 1e-6;
};

// Cases for every op with a derivative rule: odd sizes, broadcasting, rank 0, empty tensors; random inputs, away
// from zero and from the points where a derivative is not defined.
std::vector<GradientCase> gradient_cases();
// A test's name for the case at a parameter: its index and name, in letters, digits and underscores.
std::string gradient_case_test_name(const ::testing::TestParamInfo<std::size_t>& info);

// Random f64 inputs: |x| uniform in [low, high], each sign equally likely (`signed_values`) or positive.
Tensor random_input(const Shape& shape, std::uint64_t seed, double low = 0.3, double high = 1.5,
                    bool signed_values = true);

}  // namespace kiln::testing
