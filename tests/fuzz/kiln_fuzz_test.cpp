// The differential fuzzer's own parts (tools/kiln-fuzz): the generator is
// deterministic, covers every op and only makes valid, hazard-free graphs;
// the hazard filter finds values near a jump; the graph edits keep graphs
// valid; the shrinker finds a minimal case. None of this runs the JIT.

#include "fuzz_case.h"
#include "graph_generator.h"
#include "hazards.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "random_source.h"
#include "reference/reference_evaluator.h"
#include "shrinker.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace kiln::fuzz {
namespace {

runtime::Array array_of(DType dtype, const Shape& shape, const std::vector<double>& values) {
  runtime::Array array = runtime::allocate_array(dtype, shape);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f32) array.mutable_data<float>()[i] = static_cast<float>(values[i]);
    else array.mutable_data<double>()[i] = values[i];
  }
  return array;
}

FuzzCase case_of(const std::string& text, std::vector<runtime::Array> inputs) {
  return {ir::parse(text), std::move(inputs)};
}

TEST(KilnFuzzGenerator, SameSeedAndIndexGiveTheSameGraphAndInputs) {
  GeneratorOptions options;
  for (std::uint64_t index : {0, 7, 123}) {
    FuzzCase first = generate_graph(42, index, options);
    FuzzCase second = generate_graph(42, index, options);
    EXPECT_EQ(describe(first), describe(second));
  }
  EXPECT_NE(describe(generate_graph(42, 1, options)), describe(generate_graph(43, 1, options)));
}

TEST(KilnFuzzGenerator, GraphsAreValidHazardFreeAndCoverEveryOp) {
  GeneratorOptions options;
  GeneratorStatistics statistics;
  std::set<DType> dtypes;
  std::set<int> ranks;
  bool zero_size = false;
  for (std::uint64_t index = 0; index < 300; ++index) {
    FuzzCase fuzz_case = generate_graph(5, index, options, &statistics);
    ASSERT_FALSE(ir::find_verifier_failure(fuzz_case.graph)) << describe(fuzz_case);
    ASSERT_EQ(fuzz_case.inputs.size(), fuzz_case.graph.parameters.size());
    EXPECT_TRUE(find_hazards(fuzz_case).empty()) << describe(fuzz_case);
    EXPECT_FALSE(fuzz_case.graph.outputs.empty());
    for (const ir::Node& node : fuzz_case.graph.nodes) {
      dtypes.insert(node.type.dtype);
      ranks.insert(node.type.shape.rank());
      zero_size = zero_size || node.type.shape.numel() == 0;
    }
    // Inputs are never all zeros.
    for (const runtime::Array& input : fuzz_case.inputs) {
      if (input.shape.numel() == 0) continue;
      bool nonzero = false;
      for (std::int64_t i = 0; i < input.shape.numel(); ++i) nonzero = nonzero || element(input, i) != 0;
      EXPECT_TRUE(nonzero || (input.dtype == DType::boolean && input.shape.numel() == 1));
    }
  }
  for (int i = 0; i < ir::op_count; ++i) {
    auto op = static_cast<ir::Op>(i);
    if (op == ir::Op::parameter || ir::info(op).category == ir::OpCategory::host) continue;
    EXPECT_GT(statistics.ops[std::string(ir::name(op))], 0) << ir::name(op);
  }
  // About 15 of each motif in 300 graphs.
  EXPECT_GT(statistics.ops["(attention motif)"], 3);
  EXPECT_GT(statistics.ops["(epilogue motif)"], 3);
  EXPECT_GT(statistics.ops["(convolution motif)"], 3);
  EXPECT_EQ(dtypes.size(), 5u);
  for (int rank = 0; rank <= 4; ++rank) EXPECT_TRUE(ranks.count(rank)) << "rank " << rank;
  EXPECT_TRUE(zero_size);
  // Control flow in about one graph in 16 (each kind in one in 50), sometimes nested.
  EXPECT_GT(statistics.ops["(nested control flow)"], 0);
}

// The number of control nodes in `graph` and its regions, and how deep they nest.
void count_control(const ir::Graph& graph, int depth, int& count, int& deepest) {
  for (const ir::Node& node : graph.nodes) {
    if (node.regions.empty()) continue;
    ++count;
    deepest = std::max(deepest, depth + 1);
    for (const ir::Graph& region : node.regions) count_control(region, depth + 1, count, deepest);
  }
}

TEST(KilnFuzzGenerator, ControlFlowIsDeterministicNestedAtMostTwoDeepAndParsesBack) {
  GeneratorOptions options;
  int graphs = 0, deepest = 0;
  for (std::uint64_t index = 0; index < 300; ++index) {
    FuzzCase fuzz_case = generate_graph(6, index, options);
    int count = 0, depth = 0;
    count_control(fuzz_case.graph, 0, count, depth);
    if (count == 0) continue;
    ++graphs;
    deepest = std::max(deepest, depth);
    // What --replay reads; and the same graph again.
    const std::string text = ir::print(fuzz_case.graph);
    EXPECT_EQ(ir::print(ir::parse(text)), text);
    EXPECT_EQ(describe(generate_graph(6, index, options)), describe(fuzz_case));
  }
  EXPECT_GT(graphs, 5);
  EXPECT_EQ(deepest, 2);
  // Off: none.
  options.control_flow = false;
  for (std::uint64_t index = 0; index < 300; ++index)
    EXPECT_FALSE(has_control_flow(generate_graph(6, index, options).graph)) << index;
}

TEST(KilnFuzzHazards, FloorOfAComputedValueNearAnIntegerIsAHazard) {
  const std::string text =
      "func @f(%0: f32[2], %1: f32[2]) -> (f32[2]) {\n"
      "  %2 = f32[2] mul(%0, %1)\n"
      "  %3 = f32[2] floor(%2)\n"
      "  return %3\n"
      "}\n";
  // 0.1f * 30 is 3.0000001192... in float64, 3 in f32: right at the jump.
  FuzzCase near = case_of(text, {array_of(DType::f32, Shape({2}), {0.1, 0.5}), array_of(DType::f32, Shape({2}), {30, 3})});
  std::vector<Hazard> hazards = find_hazards(near);
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_EQ(hazards[0].value, 2);
  FuzzCase far = case_of(text, {array_of(DType::f32, Shape({2}), {0.25, 0.5}), array_of(DType::f32, Shape({2}), {10, 3})});
  EXPECT_TRUE(find_hazards(far).empty());
  // Exact operands are never hazards, even on the jump.
  FuzzCase exact = case_of(
      "func @g(%0: f32[2]) -> (f32[2]) {\n  %1 = f32[2] floor(%0)\n  return %1\n}\n",
      {array_of(DType::f32, Shape({2}), {3, -2})});
  EXPECT_TRUE(find_hazards(exact).empty());
}

TEST(KilnFuzzHazards, AValueAgainstItsOwnMaximumTiesOnlyWithItsNeighbours) {
  // eq(x, max(x)) (reduce_max's derivative marks the maximum so): the largest element equals the maximum in every
  // executor, however x rounds; another element within rounding reach of it is a tie.
  const std::string text =
      "func @f(%0: f32[2,3]) -> (bool[2,3]) {\n"
      "  %1 = f32[2,3] exp(%0)\n"
      "  %2 = f32[2,1] reduce_max(%1) {axes=[1], keepdims=true}\n"
      "  %3 = bool[2,3] eq(%1, %2)\n"
      "  return %3\n"
      "}\n";
  EXPECT_TRUE(find_hazards(case_of(text, {array_of(DType::f32, Shape({2, 3}), {0.5, -1, 2, 1, 0.25, -3})})).empty());
  const std::vector<Hazard> hazards =
      find_hazards(case_of(text, {array_of(DType::f32, Shape({2, 3}), {0.5, -1, 2, 1, 0.25, 1.0000001})}));
  ASSERT_EQ(hazards.size(), 2u);  // x and its maximum, both inexact
  EXPECT_EQ(hazards[0].value, 1);
}

TEST(KilnFuzzHazards, F32ErrorCarriedIntoF64IsJudgedAtF32Precision) {
  // kiln-fuzz seed 2, graph 384: tanh(-9) is -0.99999994 in f32 (a 4-ulp-accurate tanh may say -1), and
  // ceil of its f64 cast jumps from -0 to -1 there; the f64 separation (1e-10) missed it.
  const std::string text =
      "func @f(%0: f32[2]) -> (f64[2]) {\n"
      "  %1 = f32[2] tanh(%0)\n"
      "  %2 = f64[2] cast(%1)\n"
      "  %3 = f64[2] ceil(%2)\n"
      "  return %3\n"
      "}\n";
  std::vector<Hazard> hazards = find_hazards(case_of(text, {array_of(DType::f32, Shape({2}), {-9, 0.5})}));
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_EQ(hazards[0].value, 2);
  EXPECT_TRUE(find_hazards(case_of(text, {array_of(DType::f32, Shape({2}), {-1, 0.5})})).empty());
}

TEST(KilnFuzzHazards, ProductOfZeroAndOverflowingFactorsIsAHazard) {
  // 0 * 1 * ... * 56 is 0 in order and NaN when the lanes multiply 1 * ... * 56 (inf) first.
  const std::string text =
      "func @f(%0: f32[57]) -> (f32[]) {\n"
      "  %1 = f32[] reduce_prod(%0) {axes=[0], keepdims=false}\n"
      "  return %1\n"
      "}\n";
  std::vector<double> factorial(57);
  for (int i = 0; i < 57; ++i) factorial[static_cast<std::size_t>(i)] = i;
  std::vector<Hazard> hazards = find_hazards(case_of(text, {array_of(DType::f32, Shape({57}), factorial)}));
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_EQ(hazards[0].value, 1);
  std::vector<double> small(57, 1.5);  // a zero, but 1.5^56 stays finite: 0 in every order
  small[3] = 0;
  EXPECT_TRUE(find_hazards(case_of(text, {array_of(DType::f32, Shape({57}), small)})).empty());
}

TEST(KilnFuzzHazards, ProductOfOverflowingAndVanishingFactorsIsAHazard) {
  // seed 90, graph 1106: no zero, but 1e20^4 overflows f32 and 1e-20^4 underflows it:
  // inf, 0 or NaN by the order.
  const std::string text =
      "func @f(%0: f32[8]) -> (f32[]) {\n"
      "  %1 = f32[] reduce_prod(%0) {axes=[0], keepdims=false}\n"
      "  return %1\n"
      "}\n";
  const std::vector<double> both = {1e20, 1e20, 1e20, 1e20, 1e-20, 1e-20, 1e-20, 1e-20};
  std::vector<Hazard> hazards = find_hazards(case_of(text, {array_of(DType::f32, Shape({8}), both)}));
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_EQ(hazards[0].value, 1);
  // Partial products within range whatever the order: finite and nonzero in every one.
  const std::vector<double> within = {1e5, 1e5, 1e5, 1e5, 1e-5, 1e-5, 1e-5, 1e-5};
  EXPECT_TRUE(find_hazards(case_of(text, {array_of(DType::f32, Shape({8}), within)})).empty());
}

TEST(KilnFuzzHazards, SumsWhoseTermsMayOverflowAreHazards) {
  // seed 3, graph 2655: [9, -9, -1, 4, 2] . 1.7e308 is inf (OpenBLAS) or NaN (in order).
  const std::string text =
      "func @f(%0: f64[2,5], %1: f64[5,1]) -> (f64[2,1]) {\n"
      "  %2 = f64[2,1] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
      "  return %2\n"
      "}\n";
  std::vector<double> a = {4, 8, 9, 9, 1, 9, -9, -1, 4, 2};
  std::vector<Hazard> huge = find_hazards(case_of(
      text, {array_of(DType::f64, Shape({2, 5}), a), array_of(DType::f64, Shape({5, 1}), std::vector<double>(5, 1.7e308))}));
  ASSERT_EQ(huge.size(), 1u);
  EXPECT_EQ(huge[0].value, 2);
  EXPECT_TRUE(find_hazards(case_of(text, {array_of(DType::f64, Shape({2, 5}), a),
                                          array_of(DType::f64, Shape({5, 1}), std::vector<double>(5, 1.5))}))
                  .empty());
}

TEST(KilnFuzzHazards, NearTiesOverflowAndSingularitiesAreHazards) {
  FuzzCase tie = case_of(
      "func @f(%0: f32[1], %1: f32[1]) -> (bool[1]) {\n"
      "  %2 = f32[1] add(%0, %1)\n"
      "  %3 = bool[1] lt(%2, %1)\n"
      "  return %3\n"
      "}\n",
      {array_of(DType::f32, Shape({1}), {1e-9}), array_of(DType::f32, Shape({1}), {1})});
  EXPECT_FALSE(find_hazards(tie).empty());
  FuzzCase overflow = case_of(
      "func @f(%0: f32[1]) -> (f32[1]) {\n  %1 = f32[1] exp(%0)\n  %2 = f32[1] neg(%1)\n  return %2\n}\n",
      {array_of(DType::f32, Shape({1}), {100})});
  ASSERT_FALSE(find_hazards(overflow).empty());
  EXPECT_EQ(find_hazards(overflow)[0].value, 1);
  // (a * b) - b is 1e-12 with a rounding error of order 1e-16: its sign is
  // not to be trusted, nor log of it. (A difference of exact values is
  // correctly rounded and no hazard.)
  FuzzCase singular = case_of(
      "func @f(%0: f64[1], %1: f64[1]) -> (f64[1]) {\n"
      "  %2 = f64[1] mul(%0, %1)\n"
      "  %3 = f64[1] sub(%2, %1)\n"
      "  %4 = f64[1] log(%3)\n"
      "  return %4\n"
      "}\n",
      {array_of(DType::f64, Shape({1}), {1 + 1e-12}), array_of(DType::f64, Shape({1}), {1})});
  EXPECT_FALSE(find_hazards(singular).empty());
  // log1p's pole is at -1: tanh(-10.28) is -1 in f32 and -0.99999999976 in the reference (seed 11, graph 495).
  FuzzCase near_minus_one = case_of(
      "func @f(%0: f32[1]) -> (f32[1]) {\n  %1 = f32[1] tanh(%0)\n  %2 = f32[1] log1p(%1)\n  return %2\n}\n",
      {array_of(DType::f32, Shape({1}), {-10.2820797})});
  ASSERT_FALSE(find_hazards(near_minus_one).empty());
  EXPECT_EQ(find_hazards(near_minus_one)[0].value, 1);
}

// Between +0 and -0 a maximum may choose either: copysign of the chosen zero is a hazard (seed 93301, graph 623),
// of a nonzero maximum, or of a zero no maximum chose, none.
TEST(KilnFuzzHazards, TheSignOfAZeroAMaximumChoseIsAHazard) {
  auto copysign_of = [](const std::string& op, double first, double second) {
    return case_of(
        "func @f(%0: f32[1,2]) -> (f32[1,1]) {\n"
        "  %1 = f32[1,1] constant(5.5)\n"
        "  %2 = f32[1] " +
            op +
            "\n"
            "  %3 = f32[1,1] copysign(%1, %2)\n"
            "  return %3\n"
            "}\n",
        {array_of(DType::f32, Shape({1, 2}), {first, second})});
  };
  const std::string reduce_max = "reduce_max(%0) {axes=[1], keepdims=false}";
  const std::vector<Hazard> chosen = find_hazards(copysign_of(reduce_max, 0.0, -0.0));
  ASSERT_FALSE(chosen.empty());
  EXPECT_EQ(chosen[0].value, 2);
  EXPECT_TRUE(find_hazards(copysign_of(reduce_max, 0.5, -0.0)).empty());
  EXPECT_FALSE(find_hazards(copysign_of("reduce_min(%0) {axes=[1], keepdims=false}", -0.0, 0.0)).empty());
  EXPECT_TRUE(find_hazards(copysign_of("reduce_sum(%0) {axes=[1], keepdims=false}", -0.0, 0.0)).empty());
}

TEST(KilnFuzzHazards, RemovingHazardsReplacesThemByParameters) {
  FuzzCase fuzz_case = case_of(
      "func @f(%0: f32[2], %1: f32[2]) -> (f32[2]) {\n"
      "  %2 = f32[2] mul(%0, %1)\n"
      "  %3 = f32[2] floor(%2)\n"
      "  return %3\n"
      "}\n",
      {array_of(DType::f32, Shape({2}), {0.1, 0.5}), array_of(DType::f32, Shape({2}), {30, 3})});
  RandomSource random(1);
  EXPECT_EQ(remove_hazards(fuzz_case, random), 1);
  EXPECT_EQ(ir::print(fuzz_case.graph),
            "func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = f32[2] floor(%0)\n  return %1\n}\n");
  EXPECT_TRUE(find_hazards(fuzz_case).empty());
}

// Doubles x twice in a loop and carries floor(2x * 30): 0.025f doubled twice is 0.1f (0.10000000149 in float64),
// and 0.1f * 30 is 3.0000000447 in float64, 3 in f32: at the jump of floor in the second step only.
constexpr const char* doubling_loop = R"(func @f(%0: f32[], %1: f32[]) -> (f32[]) {
  %2 = i32[] constant(0)
  %3 = f32[] constant(0)
  %4 = i32[] while_loop(%2, %0, %3, %1) {carry_count=3, sequence_count=0, length=0, reverse=false} regions(
    func @condition(%0: i32[], %1: f32[], %2: f32[], %3: f32[]) -> (bool[]) {
      %4 = i32[] constant(2)
      %5 = bool[] lt(%0, %4)
      return %5
    }
    func @body(%0: i32[], %1: f32[], %2: f32[], %3: f32[]) -> (i32[], f32[], f32[]) {
      %4 = i32[] constant(1)
      %5 = i32[] add(%0, %4)
      %6 = f32[] add(%1, %1)
      %7 = f32[] mul(%6, %3)
      %8 = f32[] floor(%7)
      return %5, %6, %8
    }
  )
  %5 = f32[] result(%4) {index=2}
  return %5
}
)";

TEST(KilnFuzzHazards, HazardsInRegionsAreFoundAtEveryStep) {
  FuzzCase fuzz_case =
      case_of(doubling_loop, {array_of(DType::f32, Shape(), {0.025}), array_of(DType::f32, Shape(), {30})});
  std::vector<Hazard> hazards = find_hazards(fuzz_case);
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_EQ(hazards[0].value, 7);
  EXPECT_EQ(hazards[0].region_path, (std::vector<std::int64_t>{4, 1}));
  EXPECT_EQ(describe_place(hazards[0]), "%7 in region 1 of %4");
  // One step only: 2 * 0.025f = 0.05f, and 0.05f * 30 = 1.5000000224 is far from a jump.
  FuzzCase one_step =
      case_of(doubling_loop, {array_of(DType::f32, Shape(), {0.025}), array_of(DType::f32, Shape(), {30})});
  one_step.graph.node(4).regions[0].node(4).attributes.int_value = 1;
  EXPECT_TRUE(find_hazards(one_step).empty());
  // Replaced by a new parameter of the case, captured by the loop: floor reads it in the body.
  RandomSource random(1);
  EXPECT_EQ(remove_hazards(fuzz_case, random), 1);
  ASSERT_FALSE(ir::find_verifier_failure(fuzz_case.graph)) << describe(fuzz_case);
  EXPECT_EQ(ir::print(fuzz_case.graph), R"(func @f(%0: f32[], %1: f32[], %2: f32[]) -> (f32[]) {
  %3 = i32[] constant(0)
  %4 = f32[] constant(0)
  %5 = i32[] while_loop(%3, %0, %4, %1, %2) {carry_count=3, sequence_count=0, length=0, reverse=false} regions(
    func @condition(%0: i32[], %1: f32[], %2: f32[], %3: f32[], %4: f32[]) -> (bool[]) {
      %5 = i32[] constant(2)
      %6 = bool[] lt(%0, %5)
      return %6
    }
    func @body(%0: i32[], %1: f32[], %2: f32[], %3: f32[], %4: f32[]) -> (i32[], f32[], f32[]) {
      %5 = i32[] constant(1)
      %6 = i32[] add(%0, %5)
      %7 = f32[] add(%1, %1)
      %8 = f32[] floor(%4)
      return %6, %7, %8
    }
  )
  %6 = f32[] result(%5) {index=2}
  return %6
}
)");
  EXPECT_EQ(fuzz_case.inputs.size(), 3u);
  EXPECT_TRUE(find_hazards(fuzz_case).empty());
}

TEST(KilnFuzzHazards, OnlyTheBranchACondTakesIsJudged) {
  // floor(x * 30) at x = 0.1f in both branches; the index picks one, and the hazard is there.
  const std::string text = R"(func @f(%0: i32[], %1: f32[], %2: f32[]) -> (f32[]) {
  %3 = f32[] cond(%0, %1, %2) {carry_count=2, sequence_count=0, length=0, reverse=false} regions(
    func @branch_0(%0: f32[], %1: f32[]) -> (f32[]) {
      %2 = f32[] mul(%0, %1)
      %3 = f32[] floor(%2)
      return %3
    }
    func @branch_1(%0: f32[], %1: f32[]) -> (f32[]) {
      %2 = f32[] constant(1)
      %3 = f32[] mul(%0, %1)
      %4 = f32[] add(%3, %2)
      %5 = f32[] floor(%4)
      return %5
    }
  )
  return %3
}
)";
  for (int index : {-3, 0, 1, 5}) {
    runtime::Array branch = runtime::allocate_array(DType::i32, Shape());
    branch.mutable_data<std::int32_t>()[0] = index;
    std::vector<Hazard> hazards = find_hazards(
        case_of(text, {branch, array_of(DType::f32, Shape(), {0.1}), array_of(DType::f32, Shape(), {30})}));
    ASSERT_EQ(hazards.size(), 1u) << "index " << index;
    EXPECT_EQ(hazards[0].region_path, (std::vector<std::int64_t>{3, index <= 0 ? 0 : 1})) << "index " << index;
    EXPECT_EQ(hazards[0].value, index <= 0 ? 2 : 4) << "index " << index;
  }
}

TEST(KilnFuzzHazards, AScanElementsHazardIsItsSequences) {
  // floor of each row of x * 30 in a scan's body: the rows are the sequence's values, replaced outside the loop.
  const std::string text = R"(func @f(%0: f32[3,2], %1: f32[]) -> (f32[3,2]) {
  %2 = f32[3,2] mul(%0, %1)
  %3 = f32[3,2] scan_loop(%2) {carry_count=0, sequence_count=1, length=3, reverse=true} regions(
    func @step(%0: f32[2]) -> (f32[2]) {
      %1 = f32[2] floor(%0)
      return %1
    }
  )
  return %3
}
)";
  FuzzCase fuzz_case = case_of(
      text, {array_of(DType::f32, Shape({3, 2}), {0.5, 0.25, 1, 2, 0.1, 3}), array_of(DType::f32, Shape(), {30})});
  std::vector<Hazard> hazards = find_hazards(fuzz_case);
  ASSERT_EQ(hazards.size(), 1u);
  EXPECT_EQ(hazards[0].value, 2);
  EXPECT_TRUE(hazards[0].region_path.empty());
  RandomSource random(1);
  EXPECT_EQ(remove_hazards(fuzz_case, random), 1);
  EXPECT_TRUE(find_hazards(fuzz_case).empty());
  EXPECT_EQ(fuzz_case.graph.node(fuzz_case.graph.outputs[0]).op, ir::Op::scan_loop);
}

TEST(KilnFuzzEdits, ReshapingASourceRetypesEverythingDownstream) {
  FuzzCase fuzz_case = case_of(
      "func @f(%0: f32[4,6], %1: f32[6]) -> (f32[2,4,6], f32[2,3]) {\n"
      "  %2 = f32[4,6] add(%0, %1)\n"
      "  %3 = f32[2,4,6] broadcast_to(%2)\n"
      "  %4 = f32[2,3] slice(%2) {start=[3,5], step=[-2,-2]}\n"
      "  return %3, %4\n"
      "}\n",
      {array_of(DType::f32, Shape({4, 6}), std::vector<double>(24, 1.5)),
       array_of(DType::f32, Shape({6}), std::vector<double>(6, 2))});
  std::optional<FuzzCase> smaller = reshape_source(fuzz_case, 0, Shape({2, 6}));
  ASSERT_TRUE(smaller);
  EXPECT_EQ(ir::print(smaller->graph),
            "func @f(%0: f32[2,6], %1: f32[6]) -> (f32[2,2,6], f32[1,3]) {\n"
            "  %2 = f32[2,6] add(%0, %1)\n"
            "  %3 = f32[2,2,6] broadcast_to(%2)\n"
            "  %4 = f32[1,3] slice(%2) {start=[1,5], step=[-2,-2]}\n"
            "  return %3, %4\n"
            "}\n");
  EXPECT_EQ(smaller->inputs[0].shape, Shape({2, 6}));
  // The 6 must match %1's 6: no valid retyping.
  EXPECT_FALSE(reshape_source(fuzz_case, 0, Shape({4, 3})));
}

TEST(KilnFuzzEdits, MergeKeepsEachGraphAndItsInputs) {
  std::vector<FuzzCase> cases = {generate_graph(3, 0, {}), generate_graph(3, 1, {})};
  std::vector<std::size_t> owner;
  FuzzCase merged = merge(cases, "both", &owner);
  ASSERT_FALSE(ir::find_verifier_failure(merged.graph));
  EXPECT_EQ(merged.inputs.size(), cases[0].inputs.size() + cases[1].inputs.size());
  ASSERT_EQ(owner.size(), merged.graph.outputs.size());
  std::vector<reference::Value> together = reference::evaluate(merged.graph, merged.inputs);
  std::vector<reference::Value> first = reference::evaluate(cases[0].graph, cases[0].inputs);
  EXPECT_EQ(owner.front(), 0u);
  EXPECT_EQ(owner.back(), 1u);
  // Element by element, a NaN equal to a NaN (the generated graph may compute some).
  ASSERT_EQ(together[0].values.size(), first[0].values.size());
  for (std::size_t i = 0; i < first[0].values.size(); ++i) {
    const double merged_value = together[0].values[i], alone = first[0].values[i];
    EXPECT_TRUE(merged_value == alone || (std::isnan(merged_value) && std::isnan(alone))) << "element " << i;
  }
}

TEST(KilnFuzzShrinker, ShrinksToTheSmallestGraphThatStillFails) {
  // "Fails" while the graph computes a sin of a non-constant value with more
  // than one element: the minimum is one sin of a parameter [1,2].
  FuzzCase fuzz_case = case_of(
      "func @f(%0: f32[3,5], %1: f32[5]) -> (f32[3,5], f32[]) {\n"
      "  %2 = f32[3,5] add(%0, %1)\n"
      "  %3 = f32[3,5] exp(%2)\n"
      "  %4 = f32[3,5] sin(%3)\n"
      "  %5 = f32[3,5] mul(%4, %0)\n"
      "  %6 = f32[] reduce_sum(%5) {axes=[0,1], keepdims=false}\n"
      "  return %5, %6\n"
      "}\n",
      {array_of(DType::f32, Shape({3, 5}), std::vector<double>(15, 0.5)),
       array_of(DType::f32, Shape({5}), std::vector<double>(5, 0.25))});
  auto still_fails = [](const FuzzCase& candidate) {
    for (const ir::Node& node : candidate.graph.nodes) {
      if (node.op != ir::Op::sin) continue;
      const ir::Node& operand = candidate.graph.node(node.operands[0]);
      if (operand.op != ir::Op::constant && operand.type.shape.numel() > 1) return true;
    }
    return false;
  };
  ShrinkStatistics statistics;
  FuzzCase smallest = shrink(fuzz_case, still_fails, {}, &statistics);
  EXPECT_EQ(ir::print(smallest.graph),
            "func @f(%0: f32[1,2]) -> (f32[1,2]) {\n  %1 = f32[1,2] sin(%0)\n  return %1\n}\n");
  EXPECT_GT(statistics.accepted, 0);
  EXPECT_LE(statistics.attempts, 40);
}

TEST(KilnFuzzShrinker, ShrinksInsideRegionsButKeepsLoopsEnding) {
  // "Fails" while a while_loop carries a floor: the body's ops go but the counter's step (without which the loop
  // would not end: such candidates are never offered), and the parameters become constants.
  FuzzCase fuzz_case =
      case_of(doubling_loop, {array_of(DType::f32, Shape(), {0.5}), array_of(DType::f32, Shape(), {3})});
  auto still_fails = [](const FuzzCase& candidate) {
    for (const ir::Node& node : candidate.graph.nodes)
      if (node.op == ir::Op::while_loop)
        for (const ir::Node& inner : node.regions[1].nodes)
          if (inner.op == ir::Op::floor) return true;
    return false;
  };
  FuzzCase smallest = shrink(fuzz_case, still_fails);
  EXPECT_EQ(ir::print(smallest.graph), R"(func @f() -> (f32[]) {
  %0 = f32[] constant(0.5)
  %1 = f32[] constant(3)
  %2 = i32[] constant(0)
  %3 = f32[] constant(0)
  %4 = i32[] while_loop(%2, %0, %3, %1) {carry_count=3, sequence_count=0, length=0, reverse=false} regions(
    func @condition(%0: i32[], %1: f32[], %2: f32[], %3: f32[]) -> (bool[]) {
      %4 = i32[] constant(2)
      %5 = bool[] lt(%0, %4)
      return %5
    }
    func @body(%0: i32[], %1: f32[], %2: f32[], %3: f32[]) -> (i32[], f32[], f32[]) {
      %4 = i32[] constant(1)
      %5 = i32[] add(%0, %4)
      %6 = f32[] floor(%1)
      return %5, %1, %6
    }
  )
  %5 = f32[] result(%4) {index=2}
  return %5
}
)");
}

TEST(KilnFuzzShrinker, KeepsOneBranchOfACond) {
  // "Fails" while some cond's branch computes a sin: one branch, the sin of a constant, is left. (Shapes that
  // regions take stay: reshape_source does not retype regions.)
  const std::string text = R"(func @f(%0: i32[], %1: f32[2]) -> (f32[2]) {
  %2 = f32[2] cond(%0, %1) {carry_count=1, sequence_count=0, length=0, reverse=false} regions(
    func @branch_0(%0: f32[2]) -> (f32[2]) {
      %1 = f32[2] exp(%0)
      return %1
    }
    func @branch_1(%0: f32[2]) -> (f32[2]) {
      %1 = f32[2] exp(%0)
      %2 = f32[2] sin(%1)
      return %2
    }
  )
  return %2
}
)";
  FuzzCase fuzz_case =
      case_of(text, {runtime::allocate_array(DType::i32, Shape()), array_of(DType::f32, Shape({2}), {1, 2})});
  fuzz_case.inputs[0].mutable_data<std::int32_t>()[0] = 1;
  auto still_fails = [](const FuzzCase& candidate) {
    for (const ir::Node& node : candidate.graph.nodes)
      for (const ir::Graph& region : node.regions)
        for (const ir::Node& inner : region.nodes)
          if (inner.op == ir::Op::sin) return true;
    return false;
  };
  FuzzCase smallest = shrink(fuzz_case, still_fails);
  EXPECT_EQ(ir::print(smallest.graph), R"(func @f() -> (f32[2]) {
  %0 = i32[] constant(1)
  %1 = f32[2] constant(1)
  %2 = f32[2] cond(%0, %1) {carry_count=1, sequence_count=0, length=0, reverse=false} regions(
    func @branch_1(%0: f32[2]) -> (f32[2]) {
      %1 = f32[2] sin(%0)
      return %1
    }
  )
  return %2
}
)");
}

TEST(KilnFuzzShrinker, AValueReplacedByAParameterKeepsItsValue) {
  // "Fails" while sin reads a parameter holding more than 1: bypassing exp
  // gives 0.5 (passes), replacing exp by a parameter keeps e^0.5.
  FuzzCase fuzz_case = case_of(
      "func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = f32[2] exp(%0)\n  %2 = f32[2] sin(%1)\n  return %2\n}\n",
      {array_of(DType::f32, Shape({2}), {0.5, 0.5})});
  auto still_fails = [](const FuzzCase& candidate) {
    const ir::Graph& graph = candidate.graph;
    for (const ir::Node& node : graph.nodes)
      if (node.op == ir::Op::sin && graph.node(node.operands[0]).op == ir::Op::parameter)
        return element(candidate.inputs[static_cast<std::size_t>(node.operands[0])], 0) > 1;
    return false;
  };
  FuzzCase smallest = shrink(fuzz_case, still_fails);
  EXPECT_EQ(ir::print(smallest.graph),
            "func @f(%0: f32[1]) -> (f32[1]) {\n  %1 = f32[1] sin(%0)\n  return %1\n}\n");
  EXPECT_FLOAT_EQ(static_cast<float>(element(smallest.inputs[0], 0)), std::exp(0.5f));
}

}  // namespace
}  // namespace kiln::fuzz
