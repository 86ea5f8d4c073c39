// Control nodes in the IR (ir/graph.h): their regions printed and parsed back, the verifier's checks of their
// signatures, and the reference evaluator running them.

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "reference/reference_evaluator.h"

#include <kiln/error.h>

#include <gtest/gtest.h>

#include <string>

namespace kiln::ir {
namespace {

// x -> (x, 0); while i < 3: (x * 2, i + 1); then the carry plus 1. Regions capture %1 (the step).
constexpr const char* while_text = R"(func @doubling(%0: f32[3], %1: f32[]) -> (f32[3], i32[]) {
  %2 = i32[] constant(0)
  %3 = f32[3] while_loop(%0, %2, %1) {carry_count=2, sequence_count=0, length=0, reverse=false} regions(
    func @condition(%0: f32[3], %1: i32[], %2: f32[]) -> (bool[]) {
      %3 = i32[] constant(3)
      %4 = bool[] lt(%1, %3)
      return %4
    }
    func @body(%0: f32[3], %1: i32[], %2: f32[]) -> (f32[3], i32[]) {
      %3 = f32[3] mul(%0, %2)
      %4 = i32[] constant(1)
      %5 = i32[] add(%1, %4)
      return %3, %5
    }
  )
  %4 = i32[] result(%3) {index=1}
  %5 = f32[] constant(1)
  %6 = f32[3] add(%3, %5)
  return %6, %4
}
)";

// A scan over the rows of %0 with a nested cond in its step, reversed.
constexpr const char* scan_text = R"(func @steps(%0: f32[4,2], %1: f32[2]) -> (f32[2], f32[4,2]) {
  %2 = f32[2] scan_loop(%1, %0) {carry_count=1, sequence_count=1, length=4, reverse=true} regions(
    func @step(%0: f32[2], %1: f32[2]) -> (f32[2], f32[2]) {
      %2 = f32[] reduce_sum(%1) {axes=[0], keepdims=false}
      %3 = f32[] constant(0)
      %4 = bool[] gt(%2, %3)
      %5 = i32[] cast(%4)
      %6 = f32[2] cond(%5, %0, %1) {carry_count=2, sequence_count=0, length=0, reverse=false} regions(
        func @false_branch(%0: f32[2], %1: f32[2]) -> (f32[2]) {
          %2 = f32[2] sub(%0, %1)
          return %2
        }
        func @true_branch(%0: f32[2], %1: f32[2]) -> (f32[2]) {
          %2 = f32[2] add(%0, %1)
          return %2
        }
      )
      return %6, %6
    }
  )
  %3 = f32[4,2] result(%2) {index=1}
  return %2, %3
}
)";

TEST(ControlFlowIr, RegionsPrintAndParseBack) {
  for (const char* text : {while_text, scan_text}) {
    SCOPED_TRACE(text);
    Graph graph;
    ASSERT_NO_THROW(graph = parse(text));
    EXPECT_EQ(print(graph), text);
    const Graph again = parse(print(graph, {.locations = true}));
    EXPECT_EQ(print(again), text);
  }
  const Graph graph = parse(while_text);
  const Node& loop = graph.node(3);
  ASSERT_EQ(loop.regions.size(), 2u);
  EXPECT_EQ(loop.regions[1].name, "body");
  EXPECT_EQ(result_types(graph, 3), (std::vector<Type>{{DType::f32, Shape({3})}, {DType::i32, Shape()}}));
}

// `text` with the first occurrence of `from` replaced by `to`.
std::string with(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

void expect_parse_error(const std::string& text, const std::string& expected) {
  try {
    parse(text);
    ADD_FAILURE() << "parsed: " << text;
  } catch (const ParseError& error) {
    EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
  }
}

TEST(ControlFlowIr, TheVerifierChecksRegionSignatures) {
  // The body returns the wrong type for a carry.
  expect_parse_error(
      with(with(while_text, "%3 = f32[3] mul(%0, %2)", "%3 = f32[] reduce_sum(%0) {axes=[0], keepdims=false}"),
           "-> (f32[3], i32[]) {\n      %3", "-> (f32[], i32[]) {\n      %3"),
      "its body returns (f32[], i32[]) for carries (f32[3], i32[])");
  // The condition is not a bool.
  expect_parse_error(
      with(with(while_text, "%4 = bool[] lt(%1, %3)", "%4 = i32[] add(%1, %3)"), "-> (bool[])", "-> (i32[])"),
      "its condition returns (i32[]), not (bool[])");
  // A region taking other parameters than the node gives it.
  expect_parse_error(with(while_text, "func @condition(%0: f32[3], %1: i32[], %2: f32[])",
                          "func @condition(%0: f32[3], %1: i32[], %2: f64[])"),
                     "region 0 (@condition) takes");
  // A result index past the results, and a result of a node that is not a control node.
  expect_parse_error(with(while_text, "result(%3) {index=1}", "result(%3) {index=2}"), "is not among results");
  expect_parse_error(with(while_text, "%4 = i32[] result(%3) {index=1}", "%4 = i32[] result(%2) {index=1}"),
                     "not a control node");
  // A sequence whose leading axis is not the scan's length.
  expect_parse_error(with(scan_text, "length=4", "length=5"), "needs a leading axis of the length 5");
  // Branches returning different types.
  expect_parse_error(with(with(scan_text, "%2 = f32[2] add(%0, %1)\n          return %2",
                               "%2 = f32[] reduce_sum(%0) {axes=[0], keepdims=false}\n          return %2"),
                          "func @true_branch(%0: f32[2], %1: f32[2]) -> (f32[2])",
                          "func @true_branch(%0: f32[2], %1: f32[2]) -> (f32[])"),
                     "branch 1 returns (f32[]), branch 0 (f32[2])");
  // A node of another op with regions.
  Graph graph = parse(while_text);
  graph.node(6).regions.push_back(graph.node(3).regions[0]);
  EXPECT_THROW(verify(graph), InternalError);
}

TEST(ControlFlowIr, RegionsNestAtMost32Deep) {
  // A cond inside a cond inside ..., 40 deep: a ParseError, not a stack overflow.
  std::string text = "func @f(%0: i32[]) -> (i32[]) {\n";
  for (int depth = 0; depth < 40; ++depth)
    text +=
        "%1 = i32[] cond(%0, %0) {carry_count=1, sequence_count=0, length=0, reverse=false} regions(\n"
        "func @b(%0: i32[]) -> (i32[]) {\n";
  expect_parse_error(text, "regions nest deeper than 32 levels");
}

TEST(ControlFlowIr, TheReferenceEvaluatorRunsRegions) {
  const Graph doubling = parse(while_text);
  runtime::Array x = runtime::allocate_array(DType::f32, Shape({3}));
  runtime::Array step = runtime::allocate_array(DType::f32, Shape());
  for (int i = 0; i < 3; ++i) x.mutable_data<float>()[i] = 0.5f + static_cast<float>(i);
  *step.mutable_data<float>() = 3.0f;
  const std::vector<reference::Value> results = reference::evaluate(doubling, std::vector<runtime::Array>{x, step});
  EXPECT_EQ(results[0].values, (std::vector<double>{0.5 * 27 + 1, 1.5 * 27 + 1, 2.5 * 27 + 1}));
  EXPECT_EQ(results[1].integers, (std::vector<std::int64_t>{3}));

  // Reversed: the carry meets row 3 first; each row picks add or sub by its own sum's sign.
  const Graph steps = parse(scan_text);
  runtime::Array rows = runtime::allocate_array(DType::f32, Shape({4, 2}));
  const std::vector<float> row_values{1, 2, -3, -1, 0.5f, 0.25f, -2, 1};
  std::copy(row_values.begin(), row_values.end(), rows.mutable_data<float>());
  runtime::Array init = runtime::allocate_array(DType::f32, Shape({2}));
  init.mutable_data<float>()[0] = 10;
  init.mutable_data<float>()[1] = 20;
  std::vector<double> carry{10, 20};
  std::vector<double> stacked(8);
  for (int row = 3; row >= 0; --row) {
    const double a = row_values[static_cast<std::size_t>(2 * row)],
                 b = row_values[static_cast<std::size_t>(2 * row + 1)];
    const bool positive = a + b > 0;
    carry = {positive ? carry[0] + a : carry[0] - a, positive ? carry[1] + b : carry[1] - b};
    stacked[static_cast<std::size_t>(2 * row)] = carry[0];
    stacked[static_cast<std::size_t>(2 * row + 1)] = carry[1];
  }
  const std::vector<reference::Value> scanned = reference::evaluate(steps, std::vector<runtime::Array>{rows, init});
  EXPECT_EQ(scanned[0].values, carry);
  EXPECT_EQ(scanned[1].values, stacked);
}

}  // namespace
}  // namespace kiln::ir
