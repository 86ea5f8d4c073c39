// kiln-fuzz's gradient mode (tools/kiln-fuzz/gradient_check.h): the derivative graph it builds with kiln's autodiff
// transformation, its comparison with finite differences (a planted wrong derivative is caught, right ones pass),
// its hazards (kinks and poles within the step), and the shrinker on a gradient failure. The executors checked here
// are the standard executor's; the JIT runs in the kiln_fuzz_gradients_quick test.

#include "derivative_graph.h"
#include "gradient_check.h"
#include "gradient_hazards.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "random_source.h"
#include "reference/reference_evaluator.h"
#include "shrinker.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::fuzz {
namespace {

runtime::Array array_of(DType dtype, const Shape& shape, const std::vector<double>& values) {
  runtime::Array array = runtime::allocate_array(dtype, shape);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32)
      array.mutable_data<float>()[i] = static_cast<float>(values[i]);
    else
      array.mutable_data<double>()[i] = values[i];
  }
  return array;
}

FuzzCase case_of(const std::string& text, std::vector<runtime::Array> inputs) {
  return {ir::parse(text), std::move(inputs)};
}

GradientCheckOptions standard_only(std::function<void(ir::Graph&)> tamper = nullptr) {
  GradientCheckOptions options;
  options.executors.jit = false;
  options.tamper = std::move(tamper);
  return options;
}

// A smooth function of two f32 inputs through a matmul, a broadcast, a reduction and transcendental ops, at a
// point away from every kink.
FuzzCase smooth_case() {
  return case_of(
      "func @f(%0: f32[3,4], %1: f32[4], %2: i32[3]) -> (f32[3,4], f32[3], i32[3]) {\n"
      "  %3 = f32[3,4] add(%0, %1)\n"
      "  %4 = f32[3,4] sin(%3)\n"
      "  %5 = f32[3,4] mul(%4, %0)\n"
      "  %6 = f32[3] reduce_sum(%5) {axes=[1], keepdims=false}\n"
      "  %7 = f32[3] tanh(%6)\n"
      "  %8 = f32[4,4] matmul(%0, %0) {transpose_a=true, transpose_b=false}\n"
      "  %9 = f32[4] reduce_mean(%8) {axes=[0], keepdims=false}\n"
      "  %10 = f32[3,4] div(%5, %9)\n"
      "  %11 = f32[3,4] exp(%10)\n"
      "  return %11, %7, %2\n"
      "}\n",
      {array_of(DType::f32, Shape({3, 4}), {0.3, -0.7, 1.1, 0.45, -1.3, 0.8, 0.25, -0.6, 0.9, -0.35, 0.65, 1.2}),
       array_of(DType::f32, Shape({4}), {0.2, -0.4, 0.7, -1.1}), runtime::allocate_array(DType::i32, Shape({3}))});
}

// The tamper hook's plant: every cos (which only sin's derivative rule adds here) becomes a sin.
void wrong_sin_derivative(ir::Graph& graph) {
  for (ir::Node& node : graph.nodes)
    if (node.op == ir::Op::cos) node.op = ir::Op::sin;
}

std::vector<std::string> signatures(const std::vector<Failure>& failures) {
  std::vector<std::string> result;
  for (const Failure& failure : failures) result.push_back(failure.signature());
  return result;
}

TEST(KilnFuzzGradients, DerivativeGraphHasTheFunctionItsJvpAndOneGradientPerFloatInput) {
  const FuzzCase primal = smooth_case();
  const DerivativeCase derivative = build_derivative_case(primal);
  const ir::Graph& graph = derivative.fuzz_case.graph;
  ASSERT_EQ(derivative.differentiated, (std::vector<std::size_t>{0, 1}));  // not the i32 input
  ASSERT_EQ(graph.outputs.size(), 4u);
  EXPECT_EQ(graph.type(graph.outputs[0]), (ir::Type{DType::f64, Shape()}));
  EXPECT_EQ(graph.type(graph.outputs[1]), (ir::Type{DType::f64, Shape()}));
  EXPECT_EQ(graph.type(graph.outputs[2]), primal.graph.type(primal.graph.parameters[0]));
  EXPECT_EQ(graph.type(graph.outputs[3]), primal.graph.type(primal.graph.parameters[1]));
  // Parameters: 3 of the primal, a weight per float output (2), a direction per float input (2).
  EXPECT_EQ(derivative.fuzz_case.inputs.size(), 7u);
  // The primal's nodes keep their order after the added parameters, and map back.
  for (ir::ValueId id = 0; id < primal.graph.size(); ++id) {
    const ir::ValueId here = id < 3 ? id : id + derivative.body_offset;
    EXPECT_EQ(derivative.primal_value(here), id);
    EXPECT_EQ(graph.node(here).op, primal.graph.node(id).op);
  }
  EXPECT_EQ(derivative.primal_value(derivative.function_value), -1);
  // f is sum(o_k * w_k) over the float outputs.
  const std::vector<reference::Value> values = reference::evaluate(graph, derivative.fuzz_case.inputs);
  const std::vector<reference::Value> outputs = reference::evaluate(primal.graph, primal.inputs);
  double expected = 0;
  for (std::size_t k = 0; k < 2; ++k)
    for (std::int64_t i = 0; i < outputs[k].numel(); ++i)
      expected += outputs[k].values[static_cast<std::size_t>(i)] * element(derivative.fuzz_case.inputs[3 + k], i);
  EXPECT_NEAR(values[0].values[0], expected, 1e-12 * std::fabs(expected) + 1e-12);
}

TEST(KilnFuzzGradients, RightDerivativesPassBothChecks) {
  EXPECT_TRUE(find_gradient_hazards(smooth_case()).empty());
  EXPECT_EQ(signatures(check_gradients(smooth_case(), standard_only())), std::vector<std::string>{});
}

TEST(KilnFuzzGradients, AWrongDerivativeRuleIsCaughtInBothModes) {
  const std::vector<std::string> found =
      signatures(check_gradients(smooth_case(), standard_only(wrong_sin_derivative)));
  EXPECT_EQ(found, (std::vector<std::string>{"gradient reference mismatch reverse mode vs finite differences",
                                             "gradient reference mismatch forward mode vs finite differences"}));
}

TEST(KilnFuzzGradients, AGradientOffByOnePartInAThousandIsCaught) {
  // Scales one gradient (not the jvp) by 1.001: reverse mode alone is wrong.
  auto scaled_gradient = [](ir::Graph& graph) {
    ir::Node scale;
    scale.type = {graph.type(graph.outputs[3]).dtype, Shape()};
    scale.attributes.float_value = 1.001;
    const ir::ValueId factor = graph.add(scale);
    ir::Node product;
    product.op = ir::Op::mul;
    product.type = graph.type(graph.outputs[3]);
    product.operands = {graph.outputs[3], factor};
    graph.outputs[3] = graph.add(product);
  };
  EXPECT_EQ(signatures(check_finite_differences(smooth_case(), standard_only(scaled_gradient))),
            std::vector<std::string>{"gradient reference mismatch reverse mode vs finite differences"});
}

TEST(KilnFuzzGradients, ShrinkerMinimizesAGradientFailure) {
  const GradientCheckOptions options = standard_only(wrong_sin_derivative);
  const std::string signature = "gradient reference mismatch reverse mode vs finite differences";
  auto still_fails = [&](const FuzzCase& candidate) {
    if (!find_gradient_hazards(candidate).empty()) return false;
    for (const Failure& failure : check_finite_differences(candidate, options))
      if (failure.signature() == signature) return true;
    return false;
  };
  ASSERT_TRUE(still_fails(smooth_case()));
  const FuzzCase smallest = shrink(smooth_case(), still_fails);
  // What is left: a sin of something that depends on a float parameter.
  int computed = 0;
  bool has_sin = false;
  for (const ir::Node& node : smallest.graph.nodes) {
    computed += node.op == ir::Op::parameter || node.op == ir::Op::constant ? 0 : 1;
    has_sin = has_sin || node.op == ir::Op::sin;
  }
  EXPECT_TRUE(has_sin) << ir::print(smallest.graph);
  EXPECT_LE(computed, 2) << ir::print(smallest.graph);
}

std::vector<std::string> hazard_reasons(const FuzzCase& fuzz_case) {
  std::vector<std::string> reasons;
  for (const Hazard& hazard : find_gradient_hazards(fuzz_case))
    reasons.push_back("%" + std::to_string(hazard.value) + " " + hazard.reason);
  return reasons;
}

TEST(KilnFuzzGradientHazards, KinksWithinTheStepAreHazards) {
  // relu at 0 and max of a tie: not differentiable there; one element is enough.
  const std::string relu = "func @f(%0: f64[2]) -> (f64[2]) {\n  %1 = f64[2] relu(%0)\n  return %1\n}\n";
  EXPECT_EQ(hazard_reasons(case_of(relu, {array_of(DType::f64, Shape({2}), {1.5, 0.0})})),
            std::vector<std::string>{"%0 operand of relu near 0 within the step"});
  EXPECT_EQ(hazard_reasons(case_of(relu, {array_of(DType::f64, Shape({2}), {1.5, -0.5})})), std::vector<std::string>{});
  const std::string maximum =
      "func @f(%0: f64[2], %1: f64[2]) -> (f64[2]) {\n  %2 = f64[2] maximum(%0, %1)\n  return %2\n}\n";
  EXPECT_EQ(hazard_reasons(case_of(
                maximum, {array_of(DType::f64, Shape({2}), {0.5, 2}), array_of(DType::f64, Shape({2}), {0.25, 2})})),
            (std::vector<std::string>{"%0 operand of maximum near a tie within the step",
                                      "%1 operand of maximum near a tie within the step"}));
  // floor(3 x) jumps at x = 1/3: near it the step crosses it, a little farther it does not.
  const std::string floor =
      "func @f(%0: f64[1]) -> (f64[1]) {\n  %1 = f64[] constant(3)\n  %2 = f64[1] mul(%0, %1)\n"
      "  %3 = f64[1] floor(%2)\n  %4 = f64[1] add(%3, %0)\n  return %4\n}\n";
  EXPECT_EQ(hazard_reasons(case_of(floor, {array_of(DType::f64, Shape({1}), {1.0 / 3 + 1e-6})})),
            std::vector<std::string>{"%2 operand of floor near an integer within the step"});
  EXPECT_EQ(hazard_reasons(case_of(floor, {array_of(DType::f64, Shape({1}), {1.0 / 3 + 1e-2})})),
            std::vector<std::string>{});
  // remainder by the smallest subnormal jumps at every double: its quotient overflows, and no distance to an
  // integer says so (kiln-fuzz --gradients seed 90802, graph 408). By 0.7 it is smooth at 2.
  const auto remainder_by = [](const std::string& divisor) {
    return "func @f(%0: f64[1]) -> (f64[1]) {\n  %1 = f64[] constant(" + divisor +
           ")\n  %2 = f64[1] remainder(%0, %1)\n  return %2\n}\n";
  };
  EXPECT_EQ(hazard_reasons(case_of(remainder_by("-5e-324"), {array_of(DType::f64, Shape({1}), {0.368})})),
            (std::vector<std::string>{"%0 operand of remainder whose quotient is beyond 2^52 within the step",
                                      "%1 operand of remainder whose quotient is beyond 2^52 within the step"}));
  EXPECT_EQ(hazard_reasons(case_of(remainder_by("0.7"), {array_of(DType::f64, Shape({1}), {2.0})})),
            std::vector<std::string>{});
}

// Orderings inside a loop's step of what the loop passes in unchanged: a captured value's maximum (three tied
// maxima: the central difference is (max + min) / 2 of their directions, reverse mode their mean; kiln-fuzz
// --gradients seed 93305, graph 331) and a scanned sequence's, each step's element a row of the whole.
TEST(KilnFuzzGradientHazards, TiesOrderedInsideALoopsStepAreHazards) {
  const std::string captured =
      "func @f(%0: f64[3,2]) -> (f64[3]) {\n"
      "  %1 = f64[] constant(0)\n"
      "  %2 = f64[] scan_loop(%1, %0, %0) {carry_count=1, sequence_count=1, length=3, reverse=false} regions(\n"
      "    func @step(%0: f64[], %1: f64[2], %2: f64[3,2]) -> (f64[], f64[]) {\n"
      "      %3 = f64[] reduce_max(%2) {axes=[0,1], keepdims=false}\n"
      "      return %0, %3\n"
      "    }\n"
      "  )\n"
      "  %3 = f64[3] result(%2) {index=1}\n"
      "  return %3\n"
      "}\n";
  EXPECT_EQ(hazard_reasons(case_of(captured, {array_of(DType::f64, Shape({3, 2}), {0.5, 2, 2, -1, 2, 0.25})})),
            std::vector<std::string>{"%0 operand of reduce_max in a region with a near tie"});
  EXPECT_EQ(hazard_reasons(case_of(captured, {array_of(DType::f64, Shape({3, 2}), {0.5, 2, 1, -1, 1.5, 0.25})})),
            std::vector<std::string>{});
  const std::string sequence =
      "func @f(%0: f64[3,2]) -> (f64[3]) {\n"
      "  %1 = f64[] constant(0)\n"
      "  %2 = f64[] scan_loop(%1, %0) {carry_count=1, sequence_count=1, length=3, reverse=false} regions(\n"
      "    func @step(%0: f64[], %1: f64[2]) -> (f64[], f64[]) {\n"
      "      %2 = f64[] reduce_min(%1) {axes=[0], keepdims=false}\n"
      "      return %0, %2\n"
      "    }\n"
      "  )\n"
      "  %3 = f64[3] result(%2) {index=1}\n"
      "  return %3\n"
      "}\n";
  // Row 1 ties at its minimum; rows apart (2 in row 0, 2 in row 2) are no tie.
  EXPECT_EQ(hazard_reasons(case_of(sequence, {array_of(DType::f64, Shape({3, 2}), {0.5, 2, -1, -1, 2, 0.25})})),
            std::vector<std::string>{"%0 operand of reduce_min in a region with a near tie"});
  EXPECT_EQ(hazard_reasons(case_of(sequence, {array_of(DType::f64, Shape({3, 2}), {0.5, 2, -1, 3, 2, 0.25})})),
            std::vector<std::string>{});
}

TEST(KilnFuzzGradientHazards, PolesAndNonFiniteValuesAreHazards) {
  // sqrt(relu(x)) at x < 0: sqrt at exactly 0, where the rule's 0 * inf is NaN.
  EXPECT_EQ(hazard_reasons(case_of("func @f(%0: f64[2]) -> (f64[2]) {\n  %1 = f64[2] relu(%0)\n"
                                   "  %2 = f64[2] sqrt(%1)\n  return %2\n}\n",
                                   {array_of(DType::f64, Shape({2}), {-1.5, 2.0})})),
            std::vector<std::string>{"%1 operand of sqrt near 0 within the step"});
  // A divisor 1e-6 from 0 moves by about 1e-4 of the input's size over the step.
  EXPECT_EQ(hazard_reasons(
                case_of("func @f(%0: f64[2], %1: f64[2]) -> (f64[2]) {\n  %2 = f64[] constant(1)\n"
                        "  %3 = f64[2] sub(%1, %2)\n  %4 = f64[2] div(%0, %3)\n  return %4\n}\n",
                        {array_of(DType::f64, Shape({2}), {1, 2}), array_of(DType::f64, Shape({2}), {1.000001, 1.5})})),
            std::vector<std::string>{"%3 operand of div (its divisor) near 0 within the step"});
  EXPECT_EQ(hazard_reasons(case_of("func @f(%0: f64[1]) -> (f64[1]) {\n  %1 = f64[1] exp(%0)\n  return %1\n}\n",
                                   {array_of(DType::f64, Shape({1}), {800})})),
            std::vector<std::string>{"%1 exp makes an infinity of finite values on the differentiated inputs' path"});
}

// Scores masked with -inf, by a where and by an additive mask (its -inf a where of constants), less their row's
// maximum, through exp (%11): the infinities are the same at every point and every derivative through them is finite
// (the maximum's derivative compares the scores with it: no tie, the largest is far from the next). `extra` (from %13
// on) is appended to the body, which returns %12 and `returned`.
FuzzCase masked_case(const std::string& extra, const std::string& returned) {
  return case_of(
      "func @f(%0: f64[2,3], %1: f64[2,3]) -> (f64[2,3], f64[2,3]) {\n"
      "  %2 = f64[] constant(0)\n"
      "  %3 = bool[2,3] gt(%1, %2)\n"
      "  %4 = f64[] constant(-inf)\n"
      "  %5 = f64[2,3] where(%3, %0, %4)\n"
      "  %6 = f64[2,3] where(%3, %2, %4)\n"
      "  %7 = f64[2,3] add(%1, %6)\n"
      "  %8 = f64[2,3] add(%5, %7)\n"
      "  %9 = f64[2,1] reduce_max(%8) {axes=[1], keepdims=true}\n"
      "  %10 = f64[2,3] sub(%8, %9)\n"
      "  %11 = f64[2,3] exp(%10)\n"
      "  %12 = f64[2,3] neg(%11)\n" +
          extra + "  return %12, " + returned + "\n}\n",
      {array_of(DType::f64, Shape({2, 3}), {0.3, -0.7, 1.1, 0.45, -1.3, 0.8}),
       array_of(DType::f64, Shape({2, 3}), {1.5, -0.5, 0.75, -1.25, 0.5, 1.0})});
}

TEST(KilnFuzzGradientHazards, InfinitiesTheDerivativesPassAreChecked) {
  const std::string softmax =
      "  %13 = f64[2,1] reduce_sum(%11) {axes=[1], keepdims=true}\n"
      "  %14 = f64[2,3] div(%11, %13)\n"
      "  %15 = f64[2,3] sin(%14)\n";
  const FuzzCase masked = masked_case(softmax, "%15");
  EXPECT_EQ(hazard_reasons(masked), std::vector<std::string>{});
  EXPECT_EQ(signatures(check_gradients(masked, standard_only())), std::vector<std::string>{});
  // The checks run through the infinities: sin's derivative planted wrong after the masked softmax is caught.
  EXPECT_EQ(signatures(check_gradients(masked, standard_only(wrong_sin_derivative))),
            (std::vector<std::string>{"gradient reference mismatch reverse mode vs finite differences",
                                      "gradient reference mismatch forward mode vs finite differences"}));
  // square at -inf: a derivative of inf times a tangent of 0 (NaN, as JAX and PyTorch give) where exp flattens it.
  const std::string squared =
      "  %13 = f64[2,3] square(%8)\n"
      "  %14 = f64[2,3] neg(%13)\n"
      "  %15 = f64[2,3] exp(%14)\n";
  EXPECT_EQ(hazard_reasons(masked_case(squared, "%15")),
            std::vector<std::string>{
                "%13 square of an infinity on the differentiated inputs' path (its derivative there is not finite)"});
}

TEST(KilnFuzzGradientHazards, TheIdentitiesOfExtremesAreNoOverflow) {
  // An exclusive running max starts at -inf, which nothing moves: erfc there is flat and the case is checked; exp of
  // an exclusive running min from the back ends at exp(+inf), whose derivative is infinite.
  const std::string text =
      "func @f(%0: f64[2,3]) -> (f64[2,3]) {\n"
      "  %1 = f64[2,3] cummax(%0) {axis=1, exclusive=true, reverse=false}\n"
      "  %2 = f64[2,3] erfc(%1)\n"
      "  %3 = f64[2,3] cummin(%0) {axis=1, exclusive=true, reverse=true}\n"
      "  %4 = f64[2,3] OP(%3)\n"
      "  %5 = f64[2,3] add(%2, %4)\n"
      "  return %5\n}\n";
  const auto with = [&](const std::string& op) {
    std::string graph = text;
    graph.replace(graph.find("OP"), 2, op);
    return case_of(graph, {array_of(DType::f64, Shape({2, 3}), {0.3, -0.7, 1.1, 0.45, -1.3, 0.8})});
  };
  EXPECT_EQ(hazard_reasons(with("tanh")), std::vector<std::string>{});
  EXPECT_EQ(signatures(check_gradients(with("tanh"), standard_only())), std::vector<std::string>{});
  EXPECT_EQ(hazard_reasons(with("exp")),
            std::vector<std::string>{
                "%4 exp of an infinity on the differentiated inputs' path (its derivative there is not finite)"});
}

}  // namespace
}  // namespace kiln::fuzz
