#pragma once
// The graphs that gradient mode (kiln-fuzz --gradients) checks. A fuzz case
// becomes a scalar function of its float parameters x,
//
//   f(x) = sum over the float outputs o_k of reduce_sum(o_k * w_k)
//
// (each term cast to f64, w_k fixed random weights of o_k's type), and kiln's
// own transformation differentiates it: src/autodiff linearizes the graph,
// transposes the linearization (reverse mode, what kiln::grad adds to a
// trace) and replays it on a direction v (forward mode, kiln::jvp). The
// result is one ordinary graph that both executors and the float64
// reference run.
//
// The weights and the direction are functions of the case alone (of its
// outputs' types and its inputs' sizes), so that a case the shrinker cuts
// down keeps a comparable function.

#include "fuzz_case.h"

#include <cstddef>
#include <vector>

namespace kiln::fuzz {

struct DerivativeCase {
  // Parameters: the primal case's (in order), then one weight per float
  // output, then one direction per differentiated parameter; then the
  // primal's other nodes, then f, then the derivative's nodes. Outputs: f,
  // the forward-mode derivative of f along the direction (f's jvp), then the
  // gradient of f with respect to each differentiated parameter.
  FuzzCase fuzz_case;
  std::vector<std::size_t> differentiated;  // the primal's float parameters, by position
  ir::ValueId primal_end = 0;               // values before it are the primal's (and the added parameters)
  ir::ValueId function_value = 0;           // f; nothing before it depends on what comes after
  ir::ValueId body_offset = 0;              // the primal's value i (not a parameter) is value i + body_offset

  static constexpr std::size_t function_output = 0, jvp_output = 1, first_gradient_output = 2;

  // The primal value that `value` stands for, or -1 (weights, directions, f and derivative nodes).
  ir::ValueId primal_value(ir::ValueId value) const;
  // The direction of differentiated parameter i (a parameter's input).
  const runtime::Array& direction(std::size_t i) const;
};

// The steps of the central finite differences, along the direction: f(x + t v) at t = +-long_step and
// +-short_step. The direction's elements are about the size of their inputs, clamped to [0.1, 1]
// (derivative_graph.cpp), so a step moves an input by about 1e-4 of that: short enough that few kinks lie within
// reach, long enough that float64 rounding in f (relative 1e-16) stays near 1e-12 of the difference quotient.
constexpr double long_step = 1e-4, short_step = 0.5e-4;

// Whether the case has a float parameter and a float output (else f has no gradient to check).
bool has_float_path(const FuzzCase& primal);

// The function of `primal` and its derivatives, as above. Throws what the autodiff transformation throws.
DerivativeCase build_derivative_case(const FuzzCase& primal);

// The case with every f32 value made f64 (parameters, constants, iota, casts and every op after them; inputs
// widened exactly): the function in float64, which finite differences can resolve.
FuzzCase promote_to_f64(const FuzzCase& primal);

// The derivative case cut after f, with every value up to f an output: the function alone, to evaluate at many
// points (its values index like the derivative case's).
FuzzCase function_case(const DerivativeCase& derivative);

// The derivative case's inputs with each differentiated parameter x moved to x + t v (v its direction).
std::vector<runtime::Array> inputs_at(const DerivativeCase& derivative, double t);

// The central difference quotients of f along the direction, D(t) = (f(x + t v) - f(x - t v)) / 2t, at
// long_step and short_step, by the float64 reference; and the error that rounding in f may cause in them (f's
// rounding scale, reference_evaluator.h's magnitude, relative 2^-52, over the short step, times 16). Needs a
// derivative case of float64 values (promote_to_f64).
struct DifferenceQuotients {
  double long_quotient = 0, short_quotient = 0, rounding = 0;
};
DifferenceQuotients difference_quotients(const DerivativeCase& derivative);

}  // namespace kiln::fuzz
