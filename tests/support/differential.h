#pragma once
// Differential checking, kiln's main correctness tool: a function of tensors
// runs on the standard executor and on the JIT (strict: a fallback is a
// failure), and both results are compared with the float64 reference
// evaluator's on the traced graph, within each output's tolerance
// (reference::graph_tolerance).

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

struct DifferentialResult {
  FunctionStatistics jit;  // statistics of the JIT function after the call
  std::string fused;       // its `fused` stage
};

// Compares standard, JIT and reference results; reports failures through
// gtest with `label`.
// `output_names` (optional) names the outputs in failure messages.
void check_outputs(const std::string& label, const std::string& traced_ir, const std::vector<Tensor>& inputs,
                   const std::vector<Tensor>& standard, const std::vector<Tensor>& jit,
                   const std::vector<std::string>& output_names = {});

// The same for a graph given as IR text (ops the public API does not reach,
// like iota): standard executor, JIT and reference on `inputs`.
void expect_graph_agreement(const std::string& label, const std::string& ir_text, const std::vector<Tensor>& inputs);

// Every output of `got` (any device, any float dtype) within a bf16 rounding of the same output of `expected`:
// |a - b| <= 2^-7 (|b| + 10^-2), element by element.
void expect_within_bf16_rounding(const std::vector<Tensor>& expected, const std::vector<Tensor>& got);

template <class Result> std::vector<Tensor> flatten_result(const Result& result) {
  return detail::Outputs<Result>::flatten(result);
}

// Bitwise equality of two tensors of one dtype and shape; with `any_nan`, a NaN of a float dtype equals any other
// NaN (IEEE 754 leaves a NaN result's sign and payload open: a product of a NaN carries whichever the hardware
// picks).
bool same_bits(const Tensor& a, const Tensor& b, bool any_nan = false);

// `body` on the standard executor and compiled (a fallback is a failure): the same bits in every output (NaNs
// alike, with `any_nan`).
template <class Body, class... Inputs>
DifferentialResult expect_same_bits_where(const std::string& label, bool any_nan, Body body, const Inputs&... inputs) {
  auto standard = function(body, {.name = "standard"});
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "jit"});
  const std::vector<Tensor> expected = flatten_result(standard(inputs...));
  const std::vector<Tensor> got = flatten_result(jit(inputs...));
  DifferentialResult result{jit.statistics(), jit.get_compiler_ir(Stage::fused, inputs...)};
  EXPECT_EQ(expected.size(), got.size()) << label;
  for (std::size_t i = 0; i < got.size() && i < expected.size(); ++i)
    EXPECT_TRUE(same_bits(expected[i], got[i], any_nan))
        << label << ", output " << i << ": " << got[i].to_string() << "\nexpected " << expected[i].to_string() << "\n"
        << result.fused;
  return result;
}

template <class Body, class... Inputs>
DifferentialResult expect_same_bits(const std::string& label, Body body, const Inputs&... inputs) {
  return expect_same_bits_where(label, false, body, inputs...);
}

template <class Body, class... Inputs>
DifferentialResult expect_named_agreement(const std::string& label, const std::vector<std::string>& output_names,
                                          Body body, const Inputs&... inputs) {
  auto standard = function(body, {.name = "standard"});
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none, .name = "jit"});
  DifferentialResult result;
  try {
    auto standard_outputs = flatten_result(standard(inputs...));
    auto jit_outputs = flatten_result(jit(inputs...));
    check_outputs(label, standard.get_compiler_ir(Stage::traced, inputs...), {inputs...}, standard_outputs, jit_outputs,
                  output_names);
    result.jit = jit.statistics();
    result.fused = jit.get_compiler_ir(Stage::fused, inputs...);
  } catch (const std::exception& error) {
    ADD_FAILURE() << label << ": " << error.what();
  }
  return result;
}

template <class Body, class... Inputs>
DifferentialResult expect_agreement(const std::string& label, Body body, const Inputs&... inputs) {
  return expect_named_agreement(label, {}, body, inputs...);
}

}  // namespace kiln::testing
