#include "gradient_check.h"

#include "derivative_graph.h"
#include "reference/reference_evaluator.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

namespace kiln::fuzz {
namespace {

Failure reference_exception(const std::exception& error) {
  Failure failure = exception_failure(Executor::reference, error);
  failure.gradient = true;
  return failure;
}

// The derivative case of `primal`, tampered with if the options say so; or the transformation's exception.
std::optional<DerivativeCase> derivative_of(const FuzzCase& primal, const GradientCheckOptions& options,
                                            std::vector<Failure>& failures) {
  try {
    DerivativeCase derivative = build_derivative_case(primal);
    if (options.tamper) options.tamper(derivative.fuzz_case.graph);
    return derivative;
  } catch (const std::exception& error) {
    failures.push_back(reference_exception(error));
    return std::nullopt;
  }
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.12g", value);
  return text;
}

}  // namespace

std::vector<Failure> check_derivative_executors(const FuzzCase& primal, const GradientCheckOptions& options,
                                                CheckTimes* times) {
  std::vector<Failure> failures;
  if (!has_float_path(primal)) return failures;
  std::optional<DerivativeCase> derivative = derivative_of(primal, options, failures);
  if (!derivative) return failures;
  for (Failure& failure : check(derivative->fuzz_case, options.executors, times)) {
    failure.gradient = true;
    failures.push_back(std::move(failure));
  }
  return failures;
}

std::vector<Failure> check_finite_differences(const FuzzCase& primal, const GradientCheckOptions& options) {
  std::vector<Failure> failures;
  if (!has_float_path(primal)) return failures;
  std::optional<DerivativeCase> derivative = derivative_of(promote_to_f64(primal), options, failures);
  if (!derivative) return failures;
  try {
    const std::vector<reference::Value> at_x =
        reference::evaluate(derivative->fuzz_case.graph, derivative->fuzz_case.inputs);
    // gradient . v, and its scale: the sum of the magnitudes of its terms.
    double reverse = 0, scale = 0;
    for (std::size_t i = 0; i < derivative->differentiated.size(); ++i) {
      const reference::Value& gradient = at_x.at(DerivativeCase::first_gradient_output + i);
      const runtime::Array& direction = derivative->direction(i);
      for (std::int64_t k = 0; k < gradient.numel(); ++k) {
        const double term = gradient.values[static_cast<std::size_t>(k)] * element(direction, k);
        reverse += term;
        scale += std::fabs(term);
      }
    }
    const double forward = at_x.at(DerivativeCase::jvp_output).values.at(0);

    const DifferenceQuotients quotients = difference_quotients(*derivative);
    const double long_quotient = quotients.long_quotient, short_quotient = quotients.short_quotient;
    const double extrapolated = (4 * short_quotient - long_quotient) / 3;
    if (!std::isfinite(extrapolated)) return failures;  // a hazard (gradient_hazards.h), not a derivative to check
    const double allowed = 1e-6 * std::max(scale, std::fabs(extrapolated)) +
                           2 * std::fabs(long_quotient - short_quotient) + quotients.rounding;
    const std::string finite_differences = "finite differences " + number(extrapolated) + " (D(h) " +
                                           number(long_quotient) + ", D(h/2) " + number(short_quotient) +
                                           "), allowed difference " + number(allowed);
    auto compare = [&](double derivative_value, const std::string& mode, const std::string& what) {
      if (std::fabs(derivative_value - extrapolated) <= allowed) return;  // (false for NaN)
      Failure failure;
      failure.gradient = true;
      failure.executor = Executor::reference;
      failure.mismatch = mode + " vs finite differences";
      failure.detail = what + " " + number(derivative_value) + ", " + finite_differences;
      failures.push_back(std::move(failure));
    };
    compare(reverse, "reverse mode", "gradient . direction");
    compare(forward, "forward mode", "jvp along the direction");
  } catch (const std::exception& error) {
    failures.push_back(reference_exception(error));
  }
  return failures;
}

std::vector<Failure> check_gradients(const FuzzCase& primal, const GradientCheckOptions& options, CheckTimes* times) {
  std::vector<Failure> failures = check_finite_differences(primal, options);
  for (Failure& failure : check_derivative_executors(primal, options, times)) failures.push_back(std::move(failure));
  return failures;
}

}  // namespace kiln::fuzz
