// Pass tests written as IR text: parse, run one pass, compare the printed
// result (the style of XLA's HLO pass tests).

#include "compiler/buffer_assignment.h"
#include "compiler/codegen/cpu/cpu_codegen.h"
#include "compiler/cse.h"
#include "compiler/dce.h"
#include "compiler/fusion.h"
#include "compiler/pipeline.h"
#include "compiler/simplify.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace kiln::compiler {
namespace {

// Runs `pass` on `before` and expects `after` (and the verifier to pass).
void expect_pass(bool (*pass)(ir::Graph&), const std::string& before, const std::string& after, bool changes = true) {
  ir::Graph graph = ir::parse(before);
  EXPECT_EQ(pass(graph), changes);
  ir::verify(graph);
  EXPECT_EQ(ir::print(graph), after);
}

// A pass, then dce to remove what it left without uses.
template <bool (*pass)(ir::Graph&)>
bool then_dce(ir::Graph& graph) {
  bool changed = pass(graph);
  dce(graph);
  return changed;
}
constexpr auto simplify_then_dce = then_dce<simplify>;

TEST(Simplify, ExactArithmeticIdentities) {
  expect_pass(simplify_then_dce,
              "func @f(%0: f32[4]) -> (f32[4]) {\n"
              "  %1 = f32[] constant(1)\n"
              "  %2 = f32[4] mul(%0, %1)\n"
              "  %3 = f32[] constant(-0)\n"
              "  %4 = f32[4] add(%2, %3)\n"
              "  %5 = f32[4] neg(%4)\n"
              "  %6 = f32[4] neg(%5)\n"
              "  return %6\n"
              "}\n",
              "func @f(%0: f32[4]) -> (f32[4]) {\n"
              "  return %0\n"
              "}\n");
}

TEST(Simplify, AddingPositiveZeroIsNotAnIdentity) {
  // -0.0 + 0.0 is +0.0: folding it away would change a result.
  std::string text =
      "func @f(%0: f32[4]) -> (f32[4]) {\n"
      "  %1 = f32[] constant(0)\n"
      "  %2 = f32[4] add(%0, %1)\n"
      "  return %2\n"
      "}\n";
  expect_pass(simplify_then_dce, text, text, false);
}

TEST(Simplify, BroadcastingIdentityKeepsTheShape) {
  // x * ones([3,4]) with x: [4] broadcasts: not an identity.
  std::string text =
      "func @f(%0: f32[4]) -> (f32[3,4]) {\n"
      "  %1 = f32[3,4] constant(1)\n"
      "  %2 = f32[3,4] mul(%0, %1)\n"
      "  return %2\n"
      "}\n";
  expect_pass(simplify_then_dce, text, text, false);
}

TEST(Simplify, FoldsConstantsWithTheStandardKernels) {
  expect_pass(simplify_then_dce,
              "func @f(%0: f32[2]) -> (f32[2]) {\n"
              "  %1 = f32[] constant(2)\n"
              "  %2 = f32[] constant(3)\n"
              "  %3 = f32[] mul(%1, %2)\n"
              "  %4 = f32[] sqrt(%3)\n"
              "  %5 = f32[2] broadcast_to(%4)\n"
              "  %6 = f32[2] add(%0, %5)\n"
              "  return %6\n"
              "}\n",
              "func @f(%0: f32[2]) -> (f32[2]) {\n"
              "  %1 = f32[2] constant(2.4494898319244385)\n"
              "  %2 = f32[2] add(%0, %1)\n"
              "  return %2\n"
              "}\n");
}

TEST(Simplify, ShapeChainsCollapse) {
  expect_pass(simplify_then_dce,
              "func @f(%0: f32[2,3]) -> (f32[2,3], f32[6]) {\n"
              "  %1 = f32[3,2] transpose(%0) {permutation=[1,0]}\n"
              "  %2 = f32[2,3] transpose(%1) {permutation=[1,0]}\n"
              "  %3 = f32[3,2] reshape(%0)\n"
              "  %4 = f32[6] reshape(%3)\n"
              "  %5 = f32[1,6] expand_dims(%4) {axis=0}\n"
              "  %6 = f32[6] squeeze(%5) {axes=[0]}\n"
              "  return %2, %6\n"
              "}\n",
              "func @f(%0: f32[2,3]) -> (f32[2,3], f32[6]) {\n"
              "  %1 = f32[6] reshape(%0)\n"
              "  %2 = f32[1,6] reshape(%1)\n"
              "  %3 = f32[6] reshape(%2)\n"
              "  return %0, %3\n"
              "}\n");
}

TEST(Simplify, MatmulTakesTransposesOfItsOperandsLastTwoAxes) {
  // A transpose of other axes ([1,0,2]) stays.
  expect_pass(simplify_then_dce,
              "func @f(%0: f32[3,2], %1: f32[4,5,3], %2: f32[5,4,2]) -> (f32[4,2,5], f32[4,3,2]) {\n"
              "  %3 = f32[2,3] transpose(%0) {permutation=[1,0]}\n"
              "  %4 = f32[4,3,5] transpose(%1) {permutation=[0,2,1]}\n"
              "  %5 = f32[4,2,5] matmul(%3, %4) {transpose_a=false, transpose_b=false}\n"
              "  %6 = f32[4,5,2] transpose(%2) {permutation=[1,0,2]}\n"
              "  %7 = f32[4,3,2] matmul(%4, %6) {transpose_a=false, transpose_b=false}\n"
              "  return %5, %7\n"
              "}\n",
              "func @f(%0: f32[3,2], %1: f32[4,5,3], %2: f32[5,4,2]) -> (f32[4,2,5], f32[4,3,2]) {\n"
              "  %3 = f32[4,2,5] matmul(%0, %1) {transpose_a=true, transpose_b=true}\n"
              "  %4 = f32[4,5,2] transpose(%2) {permutation=[1,0,2]}\n"
              "  %5 = f32[4,3,2] matmul(%1, %4) {transpose_a=true, transpose_b=false}\n"
              "  return %3, %5\n"
              "}\n");
}

TEST(Simplify, TransposeOfAProductIsAProductOfTheSwappedOperands) {
  // (A B)^T = B^T A^T: the flags swap places and flip. A product with a
  // second use keeps its transpose (the matmul would run twice).
  expect_pass(simplify_then_dce,
              "func @f(%0: f32[3,2], %1: f32[4,3], %2: f32[5,5]) -> (f32[4,2], f32[5,5], f32[5,5]) {\n"
              "  %3 = f32[2,4] matmul(%0, %1) {transpose_a=true, transpose_b=true}\n"
              "  %4 = f32[4,2] transpose(%3) {permutation=[1,0]}\n"
              "  %5 = f32[5,5] matmul(%2, %2) {transpose_a=false, transpose_b=false}\n"
              "  %6 = f32[5,5] transpose(%5) {permutation=[1,0]}\n"
              "  return %4, %5, %6\n"
              "}\n",
              "func @f(%0: f32[3,2], %1: f32[4,3], %2: f32[5,5]) -> (f32[4,2], f32[5,5], f32[5,5]) {\n"
              "  %3 = f32[4,2] matmul(%1, %0) {transpose_a=false, transpose_b=false}\n"
              "  %4 = f32[5,5] matmul(%2, %2) {transpose_a=false, transpose_b=false}\n"
              "  %5 = f32[5,5] transpose(%4) {permutation=[1,0]}\n"
              "  return %3, %4, %5\n"
              "}\n");
}

TEST(Simplify, AReductionOfATransposeReducesItsOperand) {
  // Sums over either axis of a transposed matrix; a max over the swapped last axes of a batch, the kept axes in
  // order. A transpose whose kept axes would come out in another order, and a keepdims result (whose size-1 axes
  // sit where the transpose has them), keep it.
  expect_pass(simplify_then_dce,
              "func @f(%0: f32[3,2], %1: f32[4,5,3]) -> (f32[3], f32[], f32[4,5], f32[3,5], f32[1,3]) {\n"
              "  %2 = f32[2,3] transpose(%0) {permutation=[1,0]}\n"
              "  %3 = f32[3] reduce_sum(%2) {axes=[0], keepdims=false}\n"
              "  %4 = f32[] reduce_mean(%2) {axes=[0,1], keepdims=false}\n"
              "  %5 = f32[4,3,5] transpose(%1) {permutation=[0,2,1]}\n"
              "  %6 = f32[4,5] reduce_max(%5) {axes=[1], keepdims=false}\n"
              "  %7 = f32[3,5,4] transpose(%1) {permutation=[2,1,0]}\n"
              "  %8 = f32[3,5] reduce_min(%7) {axes=[2], keepdims=false}\n"
              "  %9 = f32[1,3] reduce_prod(%2) {axes=[0], keepdims=true}\n"
              "  return %3, %4, %6, %8, %9\n"
              "}\n",
              "func @f(%0: f32[3,2], %1: f32[4,5,3]) -> (f32[3], f32[], f32[4,5], f32[3,5], f32[1,3]) {\n"
              "  %2 = f32[2,3] transpose(%0) {permutation=[1,0]}\n"
              "  %3 = f32[3] reduce_sum(%0) {axes=[1], keepdims=false}\n"
              "  %4 = f32[] reduce_mean(%0) {axes=[0,1], keepdims=false}\n"
              "  %5 = f32[4,5] reduce_max(%1) {axes=[2], keepdims=false}\n"
              "  %6 = f32[3,5,4] transpose(%1) {permutation=[2,1,0]}\n"
              "  %7 = f32[3,5] reduce_min(%6) {axes=[2], keepdims=false}\n"
              "  %8 = f32[1,3] reduce_prod(%2) {axes=[0], keepdims=true}\n"
              "  return %3, %4, %5, %7, %8\n"
              "}\n");
}

TEST(Cse, MergesIdenticalNodesButNotHostCalls) {
  expect_pass(
      [](ir::Graph& graph) {
        bool changed = cse(graph);
        dce(graph);
        return changed;
      },
      "func @f(%0: f32[4]) -> (f32[4], f32[4]) {\n"
      "  %1 = f32[4] sin(%0)\n"
      "  %2 = f32[4] sin(%0)\n"
      "  %3 = f32[4] add(%1, %2)\n"
      "  %4 = f32[4] host_call(%0) {callback=0}\n"
      "  %5 = f32[4] host_call(%0) {callback=0}\n"
      "  %6 = f32[4] add(%4, %5)\n"
      "  return %3, %6\n"
      "}\n",
      "func @f(%0: f32[4]) -> (f32[4], f32[4]) {\n"
      "  %1 = f32[4] sin(%0)\n"
      "  %2 = f32[4] add(%1, %1)\n"
      "  %3 = f32[4] host_call(%0) {callback=0}\n"
      "  %4 = f32[4] host_call(%0) {callback=0}\n"
      "  %5 = f32[4] add(%3, %4)\n"
      "  return %2, %5\n"
      "}\n");
}

TEST(Cse, DistinguishesZeroSigns) {
  std::string text =
      "func @f(%0: f32[4]) -> (f32[4], f32[4]) {\n"
      "  %1 = f32[] constant(0)\n"
      "  %2 = f32[] constant(-0)\n"
      "  %3 = f32[4] mul(%0, %1)\n"
      "  %4 = f32[4] mul(%0, %2)\n"
      "  return %3, %4\n"
      "}\n";
  expect_pass(cse, text, text, false);
}

TEST(Dce, RemovesUnusedNodesKeepsParameters) {
  expect_pass(dce,
              "func @f(%0: f32[4], %1: f32[4]) -> (f32[4]) {\n"
              "  %2 = f32[4] exp(%1)\n"
              "  %3 = f32[4] sin(%0)\n"
              "  return %3\n"
              "}\n",
              "func @f(%0: f32[4], %1: f32[4]) -> (f32[4]) {\n"
              "  %2 = f32[4] sin(%0)\n"
              "  return %2\n"
              "}\n");
}

FusionPlan plan_of(const std::string& text) { return fuse(ir::parse(text)); }

// The plan for `text` and its printed form (the `fused` stage), to show in failures.
struct PrintedPlan {
  FusionPlan plan;
  std::string printed;
};
PrintedPlan printed_plan_of(const std::string& text) {
  ir::Graph graph = ir::parse(text);
  FusionPlan plan = fuse(graph);
  std::string printed = print_plan(graph, plan);
  return {std::move(plan), std::move(printed)};
}

// The decision about `subject` for `reason` in the plan (a kernel's or a note), or null.
const FusionDecision* decision(const FusionPlan& plan, Reason reason, ir::ValueId subject) {
  for (const FusedKernel& kernel : plan.kernels)
    for (const FusionDecision& each : kernel.decisions)
      if (each.reason == reason && each.subject == subject) return &each;
  for (const FusionDecision& each : plan.not_fused)
    if (each.reason == reason && each.subject == subject) return &each;
  return nullptr;
}

// The kernel of `plan` computing `value`, or null.
const FusedKernel* kernel_of(const FusionPlan& plan, ir::ValueId value) {
  for (const FusedKernel& kernel : plan.kernels)
    if (std::find(kernel.members.begin(), kernel.members.end(), value) != kernel.members.end()) return &kernel;
  return nullptr;
}

TEST(Fusion, SoftmaxIsOneReductionKernelWithTwoPasses) {
  FusionPlan plan = plan_of(
      "func @softmax(%0: f32[8,16]) -> (f32[8,16]) {\n"
      "  %1 = f32[8,1] reduce_max(%0) {axes=[1], keepdims=true}\n"
      "  %2 = f32[8,16] sub(%0, %1)\n"
      "  %3 = f32[8,16] exp(%2)\n"
      "  %4 = f32[8,1] reduce_sum(%3) {axes=[1], keepdims=true}\n"
      "  %5 = f32[8,16] div(%3, %4)\n"
      "  return %5\n"
      "}\n");
  ASSERT_EQ(plan.kernels.size(), 1u);
  EXPECT_EQ(plan.kernels[0].kind, KernelKind::reduction);
  EXPECT_EQ(plan.kernels[0].reduced_axes, 1);
  EXPECT_EQ(plan.kernels[0].members.size(), 5u);
}

// A keepdims reduction's row-shaped consumers run in the reduction's kernel, one
// row at a time, so they must read the reduced value at their own row; a slice
// that reverses the rows reads other rows' values (kiln-fuzz seed 97, graph 991:
// the JIT returned the rows' maxima in the original order).
TEST(Fusion, ReductionReadAtOtherRowsIsNotFusedWithItsConsumers) {
  ir::Graph graph = ir::parse(
      "func @f(%0: f32[2,2]) -> (f32[2,1], f32[2,1]) {\n"
      "  %1 = f32[2,1] reduce_max(%0) {axes=[1], keepdims=true}\n"
      "  %2 = f32[2,1] slice(%1) {start=[1,0], step=[-1,3]}\n"
      "  %3 = f32[2,1] reduce_sum(%0) {axes=[1], keepdims=true}\n"
      "  %4 = f32[2,1] sqrt(%3)\n"
      "  return %2, %4\n"
      "}\n");
  FusionPlan plan = fuse(graph);
  std::string printed = print_plan(graph, plan);
  // The slice reads row 1 - c0 of the maxima; the row kernel has row c0's while it computes row c0.
  const FusionDecision* refused = decision(plan, Reason::read_elsewhere, 1);
  ASSERT_NE(refused, nullptr) << printed;
  EXPECT_EQ(refused->kernel, 2) << printed;
  EXPECT_EQ(refused->maps, (std::vector<IndexMap>{{{0, -1, 1}, {}}, {{0, 1, 0}, {}}})) << printed;
  EXPECT_NE(printed.find("not fused: %1 reduce_max into kernel of %2 slice: its consumers read it at [1 - c0, 0], "
                         "and the kernel has each of its values only at [c0, 0]"),
            std::string::npos)
      << printed;
  EXPECT_NE(decision(plan, Reason::row_reduction, 3), nullptr) << printed;  // read at its own row: fused
}

// An expensive producer read by two kernels is computed once: it joins the row kernel, which writes it for the
// other reduction (multi-output fusion), instead of a kernel of its own that both read. exp(sin(x)) is 40 flops per
// element, beyond what recomputing in the second kernel may cost (Scheduler::recompute_flops_budget).
TEST(Fusion, ExpensiveProducerOfTwoKernelsJoinsOneAndIsWrittenForTheOther) {
  ir::Graph graph = ir::parse(
      "func @f(%0: f32[8,16]) -> (f32[16], f32[8]) {\n"
      "  %1 = f32[8,16] sin(%0)\n"
      "  %2 = f32[8,16] exp(%1)\n"
      "  %3 = f32[16] reduce_sum(%2) {axes=[0], keepdims=false}\n"
      "  %4 = f32[8] reduce_sum(%2) {axes=[1], keepdims=false}\n"
      "  return %3, %4\n"
      "}\n");
  FusionPlan plan = fuse(graph);
  std::string printed = print_plan(graph, plan);
  ASSERT_EQ(plan.kernels.size(), 2u) << printed;
  const FusedKernel* rows = kernel_of(plan, 4);
  ASSERT_NE(rows, nullptr) << printed;
  EXPECT_EQ(rows->members, (std::vector<ir::ValueId>{1, 2, 4})) << printed;
  EXPECT_EQ(rows->outputs, (std::vector<ir::ValueId>{2, 4})) << printed;
  EXPECT_EQ(rows->row_outputs, (std::vector<ir::ValueId>{4})) << printed;
  ASSERT_NE(decision(plan, Reason::same_size, 2), nullptr) << printed;
  // The fused stage says why it is written: the standard kernel reads it from memory.
  EXPECT_EQ(decision(plan, Reason::same_size, 2)->text,
            "also written out (multi-output fusion); written: a kernel reads it from memory (a matmul's operand, a "
            "library kernel's input)")
      << printed;
  EXPECT_EQ(decision(plan, Reason::recomputed, 2), nullptr) << printed;
  // Without column kernels (fuse's default backend), the reduction over axis 0 is its standard kernel.
  const FusionDecision* library = decision(plan, Reason::library, 3);
  ASSERT_NE(library, nullptr) << printed;
  EXPECT_EQ(library->text, "the reduced axes are not the trailing ones") << printed;
  // With them (the CPU), the column kernel has nothing to compute once exp joined the row kernel: the reduction
  // of exp's buffer is the standard kernel, which reads it once too.
  FusionPlan cpu = fuse(graph, capabilities(Device::cpu()));
  printed = print_plan(graph, cpu);
  ASSERT_EQ(cpu.kernels.size(), 2u) << printed;
  EXPECT_EQ(cpu.kernels[0].members, (std::vector<ir::ValueId>{1, 2, 4})) << printed;
  // Here a column kernel would read it, and recomputing it there is what costs too much.
  EXPECT_EQ(decision(cpu, Reason::same_size, 2)->text,
            "also written out (multi-output fusion); written: recomputing it would cost more than 24 flops/element "
            "in each kernel but one")
      << printed;
  EXPECT_EQ(cpu.kernels[1].kind, KernelKind::library) << printed;
  ASSERT_NE(decision(cpu, Reason::library, 3), nullptr) << printed;
  EXPECT_EQ(decision(cpu, Reason::library, 3)->text,
            "a reduction over the axes before the last of a value in memory: the standard kernel reads it once")
      << printed;
}

// Rematerialization: exp(x - max(x)) read by the softmax's row kernel and by a column sum is recomputed in both
// from x (a cone of 21 flops per element reading one array of its size), not written by one for the other: the
// column kernel reads x where it would have read the exponentials, and nothing of x's size is written.
TEST(Fusion, ProducerConeReadingOneArrayIsRecomputedInEachKernel) {
  ir::Graph graph = ir::parse(
      "func @f(%0: f32[8,16]) -> (f32[8,16], f32[16]) {\n"
      "  %1 = f32[8,1] reduce_max(%0) {axes=[1], keepdims=true}\n"
      "  %2 = f32[8,16] broadcast_to(%1)\n"
      "  %3 = f32[8,16] sub(%0, %2)\n"
      "  %4 = f32[8,16] exp(%3)\n"
      "  %5 = f32[8,1] reduce_sum(%4) {axes=[1], keepdims=true}\n"
      "  %6 = f32[8,16] broadcast_to(%5)\n"
      "  %7 = f32[8,16] div(%4, %6)\n"
      "  %8 = f32[16] reduce_sum(%4) {axes=[0], keepdims=false}\n"
      "  return %7, %8\n"
      "}\n");
  FusionPlan plan = fuse(graph, capabilities(Device::cpu()));
  const std::string printed = print_plan(graph, plan);
  ASSERT_EQ(plan.kernels.size(), 2u) << printed;
  const FusionDecision* recomputed = decision(plan, Reason::recomputed, 4);
  ASSERT_NE(recomputed, nullptr) << printed;
  EXPECT_EQ(recomputed->values, (std::vector<ir::ValueId>{0})) << printed;
  EXPECT_EQ(recomputed->numbers, (std::vector<std::int64_t>{2, 21})) << printed;
  for (const FusedKernel& kernel : plan.kernels)
    for (ir::ValueId output : kernel.outputs)
      EXPECT_TRUE(output == 7 || graph.type(output).shape.numel() < 8 * 16) << printed;
  EXPECT_NE(printed.find("recomputed %4 exp in each of the 2 kernels that read it: 21 flop/element from %0 parameter"),
            std::string::npos)
      << printed;
}

// A reduction over trailing axes without keepdims: ops of the result's shape are computed once per row in the row
// kernel, which stores the last of them per row (no reshape to a row shape, no second kernel).
TEST(Fusion, OpsOfARowReductionWithoutKeepdimsRunInTheRowKernel) {
  ir::Graph graph = ir::parse(
      "func @f(%0: f32[4,6], %1: f32[4]) -> (f32[4]) {\n"
      "  %2 = f32[4] reduce_sum(%0) {axes=[1], keepdims=false}\n"
      "  %3 = f32[4] sqrt(%2)\n"
      "  %4 = f32[] constant(2)\n"
      "  %5 = f32[4] add(%3, %1)\n"
      "  %6 = f32[4] mul(%5, %4)\n"
      "  return %6\n"
      "}\n");
  FusionPlan plan = fuse(graph);
  std::string printed = print_plan(graph, plan);
  ASSERT_EQ(plan.kernels.size(), 1u) << printed;
  const FusedKernel& kernel = plan.kernels[0];
  EXPECT_EQ(kernel.kind, KernelKind::reduction) << printed;
  EXPECT_EQ(kernel.space, Shape({4, 6})) << printed;
  EXPECT_EQ(kernel.members, (std::vector<ir::ValueId>{2, 3, 4, 5, 6})) << printed;
  EXPECT_EQ(kernel.row_outputs, (std::vector<ir::ValueId>{6})) << printed;
  EXPECT_NE(decision(plan, Reason::row_reduction, 2), nullptr) << printed;
  // Stored at its row: [4] in the nest over [4, 6] is the map [c0].
  EXPECT_EQ(output_map(graph, kernel, 6), (IndexMap{{0, 1, 0}})) << printed;
}

// kiln's composites keep the reduced axes and squeeze at the end (reduce_std): ops after the squeeze join the row
// kernel too.
TEST(Fusion, OpsAfterASqueezeOfKeptRowsJoinTheRowKernel) {
  FusionPlan plan = plan_of(
      "func @f(%0: f32[4,6]) -> (f32[4]) {\n"
      "  %1 = f32[4,1] reduce_mean(%0) {axes=[1], keepdims=true}\n"
      "  %2 = f32[4,1] sqrt(%1)\n"
      "  %3 = f32[4] reshape(%2)\n"
      "  %4 = f32[] constant(1)\n"
      "  %5 = f32[4] add(%3, %4)\n"
      "  return %5\n"
      "}\n");
  ASSERT_EQ(plan.kernels.size(), 1u);
  EXPECT_EQ(plan.kernels[0].kind, KernelKind::reduction);
  EXPECT_EQ(plan.kernels[0].row_outputs, (std::vector<ir::ValueId>{5}));
}

// A row reduction without keepdims broadcast against its input is read one value per column (NumPy aligns at the
// right): that is another row's value, so the reduction keeps a kernel of its own.
TEST(Fusion, ARowResultReadPerColumnIsNotInItsRowKernel) {
  auto [plan, printed] = printed_plan_of(
      "func @f(%0: f32[4,4]) -> (f32[4,4]) {\n"
      "  %1 = f32[4] reduce_max(%0) {axes=[1], keepdims=false}\n"
      "  %2 = f32[4,4] sub(%0, %1)\n"
      "  return %2\n"
      "}\n");
  ASSERT_EQ(plan.kernels.size(), 2u) << printed;
  const FusionDecision* refused = decision(plan, Reason::read_elsewhere, 1);
  ASSERT_NE(refused, nullptr) << printed;
  EXPECT_EQ(refused->maps, (std::vector<IndexMap>{{{1, 1, 0}}, {{0, 1, 0}}})) << printed;
}

TEST(Fusion, BroadcastProducerIsNotRecomputedPerElement) {
  ir::Graph graph = ir::parse(
      "func @f(%0: f32[16], %1: f32[8,16]) -> (f32[8,16]) {\n"
      "  %2 = f32[16] exp(%0)\n"
      "  %3 = f32[8,16] mul(%1, %2)\n"
      "  return %3\n"
      "}\n");
  FusionPlan plan = fuse(graph);
  std::string printed = print_plan(graph, plan);
  EXPECT_EQ(plan.kernels.size(), 2u) << printed;
  EXPECT_NE(printed.find("it would be recomputed 8 times (20 flops/element)"), std::string::npos) << printed;
}

TEST(Fusion, RowValuesJoinTheRowKernel) {
  // rsqrt of a per-row value is computed once per row inside the kernel.
  FusionPlan plan = plan_of(
      "func @f(%0: f32[8,16]) -> (f32[8,16]) {\n"
      "  %1 = f32[8,1] reduce_mean(%0) {axes=[1], keepdims=true}\n"
      "  %2 = f32[] constant(1e-05)\n"
      "  %3 = f32[8,1] add(%1, %2)\n"
      "  %4 = f32[8,1] rsqrt(%3)\n"
      "  %5 = f32[8,16] mul(%0, %4)\n"
      "  return %5\n"
      "}\n");
  EXPECT_EQ(plan.kernels.size(), 1u);
}

TEST(Fusion, MatmulOperandsStayInMemory) {
  auto [plan, printed] = printed_plan_of(
      "func @f(%0: f32[8,16], %1: f32[16,4]) -> (f32[8,4]) {\n"
      "  %2 = f32[8,16] exp(%0)\n"
      "  %3 = f32[8,4] matmul(%2, %1) {transpose_a=false, transpose_b=false}\n"
      "  %4 = f32[8,4] relu(%3)\n"
      "  return %4\n"
      "}\n");
  ASSERT_EQ(plan.kernels.size(), 2u) << printed;
  EXPECT_EQ(plan.kernels[1].kind, KernelKind::gemm) << printed;
  EXPECT_NE(printed.find("the matmul reads its operands from memory"), std::string::npos) << printed;
}

// An epilogue reads the product at the element it computes: a consumer that
// moves elements (a transpose of a square product, a slice reversing an axis)
// keeps the product in memory, and one that moves none joins the epilogue.
TEST(Fusion, OnlyConsumersReadingTheProductInPlaceFormItsEpilogue) {
  auto plan_for = [](const std::string& consumer) {
    return printed_plan_of(
        "func @f(%0: f32[8,16], %1: f32[16,8], %2: f32[8,8]) -> (f32[8,8]) {\n"
        "  %3 = f32[8,8] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
        "  %4 = f32[8,8] " +
        consumer + "\n" +
        "  %5 = f32[8,8] add(%4, %2)\n"
        "  return %5\n"
        "}\n");
  };
  for (const std::string moving : {"transpose(%3) {permutation=[1,0]}", "slice(%3) {start=[0,7], step=[1,-1]}"}) {
    auto [plan, printed] = plan_for(moving);
    EXPECT_EQ(plan.kernels.size(), 2u) << printed;
    EXPECT_NE(printed.find("an epilogue reads only the element it computes"), std::string::npos) << printed;
  }
  for (const std::string in_place : {"relu(%3)", "slice(%3) {start=[0,0], step=[1,1]}"}) {
    auto [plan, printed] = plan_for(in_place);
    EXPECT_EQ(plan.kernels.size(), 1u) << printed;
  }
}

// An epilogue runs tile by tile, so it cannot read a reduction of the whole
// product: x == max(x) stays out of it (the maximum is still fused).
TEST(Fusion, AnEpilogueDoesNotReadItsOwnFullReduction) {
  auto [plan, printed] = printed_plan_of(
      "func @f(%0: f32[8,16], %1: f32[16,4]) -> (f32[8,4]) {\n"
      "  %2 = f32[8,4] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
      "  %3 = f32[1,1] reduce_max(%2) {axes=[0,1], keepdims=true}\n"
      "  %4 = bool[8,4] eq(%2, %3)\n"
      "  %5 = f32[8,4] cast(%4)\n"
      "  return %5\n"
      "}\n");
  ASSERT_EQ(plan.kernels.size(), 2u) << printed;
  EXPECT_EQ(plan.kernels[0].kind, KernelKind::gemm) << printed;
  EXPECT_NE(printed.find("complete only after the epilogue's last tile"), std::string::npos) << printed;
}

TEST(FuseAttention, MatmulRowKernelMatmulBecomeOneKernel) {
  ir::Graph graph = ir::parse(
      "func @f(%0: f32[2,8,4], %1: f32[2,6,4], %2: f32[2,6,3]) -> (f32[2,8,3]) {\n"
      "  %3 = f32[2,8,6] matmul(%0, %1) {transpose_a=false, transpose_b=true}\n"
      "  %4 = f32[2,8,1] reduce_max(%3) {axes=[2], keepdims=true}\n"
      "  %5 = f32[2,8,6] sub(%3, %4)\n"
      "  %6 = f32[2,8,6] exp(%5)\n"
      "  %7 = f32[2,8,1] reduce_sum(%6) {axes=[2], keepdims=true}\n"
      "  %8 = f32[2,8,6] div(%6, %7)\n"
      "  %9 = f32[2,8,3] matmul(%8, %2) {transpose_a=false, transpose_b=false}\n"
      "  return %9\n"
      "}\n");
  FusionPlan plan = fuse(graph, capabilities(Device::cpu()));
  std::string printed = print_plan(graph, plan);
  ASSERT_EQ(plan.kernels.size(), 1u) << printed;
  const FusedKernel& kernel = plan.kernels[0];
  EXPECT_EQ(kernel.kind, KernelKind::attention) << printed;
  EXPECT_EQ(kernel.members, (std::vector<ir::ValueId>{3, 4, 5, 6, 7, 8, 9})) << printed;
  EXPECT_EQ(kernel.inputs, (std::vector<ir::ValueId>{0, 1, 2})) << printed;
  EXPECT_EQ(kernel.outputs, (std::vector<ir::ValueId>{9})) << printed;
  EXPECT_EQ(kernel.space, Shape({2, 8, 6})) << printed;
  EXPECT_EQ(printed.find("library:"), std::string::npos) << printed;
  // The scores written to memory are the buffer assignment's to see: none are left.
  EXPECT_EQ(assign_buffers(graph, plan).arena_bytes, 0) << printed;
}

// The CPU's plan for `text`, printed.
PrintedPlan cpu_plan_of(const std::string& text) {
  ir::Graph graph = ir::parse(text);
  FusionPlan plan = fuse(graph, capabilities(Device::cpu()));
  std::string printed = print_plan(graph, plan);
  return {std::move(plan), std::move(printed)};
}

SpaceBox box(std::vector<std::int64_t> origin, Shape shape) { return {std::move(origin), std::move(shape)}; }

// Elementwise ops of a concat run in one loop kernel that reads the concat piecewise: its space runs as two boxes
// along axis 1, each reading one operand of each concat (the second concat is cut at the same place), and the
// [256] row and the [256,1] column are read at the whole space's coordinates in both.
TEST(ConcatPieces, ALoopKernelReadsConcatsPiecewiseInBoxes) {
  const auto [plan, printed] = cpu_plan_of(
      "func @f(%0: f32[256,128], %1: f32[256,128], %2: f32[256], %3: f32[256,1], %4: f32[256,128]) -> "
      "(f32[256,256]) {\n"
      "  %5 = f32[256,256] concat(%0, %1) {axis=1}\n"
      "  %6 = f32[256,256] relu(%5)\n"
      "  %7 = f32[] constant(2)\n"
      "  %8 = f32[256,256] mul(%6, %2)\n"
      "  %9 = f32[256,256] mul(%8, %3)\n"
      "  %10 = f32[256,256] concat(%4, %0) {axis=1}\n"
      "  %11 = f32[256,256] add(%9, %10)\n"
      "  %12 = f32[256,256] mul(%11, %7)\n"
      "  return %12\n"
      "}\n");
  ASSERT_EQ(plan.kernels.size(), 1u) << printed;
  const FusedKernel& kernel = plan.kernels[0];
  EXPECT_EQ(kernel.kind, KernelKind::loop) << printed;
  EXPECT_EQ(kernel.piecewise, (std::vector<ir::ValueId>{5, 10})) << printed;
  EXPECT_EQ(kernel.pieces, (std::vector<SpaceBox>{box({0, 0}, Shape{256, 128}), box({0, 128}, Shape{256, 128})}))
      << printed;
  EXPECT_EQ(kernel.inputs, (std::vector<ir::ValueId>{0, 1, 2, 3, 4})) << printed;
  const FusionDecision* read = decision(plan, Reason::read_piecewise, 5);
  ASSERT_NE(read, nullptr) << printed;
  EXPECT_EQ(read->numbers, (std::vector<std::int64_t>{1, 2, 2})) << printed;
  EXPECT_NE(printed.find("kernel 0 (loop over [256,256], run as 2 boxes)"), std::string::npos) << printed;
  EXPECT_NE(printed.find("reads %5 concat piecewise: its 2 operands where it has them along axis 1, the space run "
                         "as 2 boxes, each reading one operand; the concat is never written"),
            std::string::npos)
      << printed;
}

// Producers of the operands join the boxes where the concat is them, computed once per element; a reversed read
// (a slice of step -1) cuts where its coordinate passes from one operand to the other; concats cut at different
// places along one axis give a box per interval.
TEST(ConcatPieces, OperandsProducersJoinAndReversedReadsCutTheirBoxes) {
  const auto [plan, printed] = cpu_plan_of(
      "func @f(%0: f32[3,4], %1: f32[5,4], %2: f32[6,4], %3: f32[2,4]) -> (f32[8,4]) {\n"
      "  %4 = f32[3,4] exp(%0)\n"
      "  %5 = f32[8,4] concat(%4, %1) {axis=0}\n"
      "  %6 = f32[8,4] slice(%5) {start=[7,0], step=[-1,1]}\n"
      "  %7 = f32[8,4] concat(%2, %3) {axis=0}\n"
      "  %8 = f32[8,4] add(%6, %7)\n"
      "  return %8\n"
      "}\n");
  ASSERT_EQ(plan.kernels.size(), 1u) << printed;
  const FusedKernel& kernel = plan.kernels[0];
  // The reversed concat's coordinate is 7 - c0: operand %1 (rows 3 to 7) for c0 < 5, %4 after; %7 changes at 6.
  EXPECT_EQ(kernel.pieces,
            (std::vector<SpaceBox>{box({0, 0}, Shape{5, 4}), box({5, 0}, Shape{1, 4}), box({6, 0}, Shape{2, 4})}))
      << printed;
  const FusionDecision* joined = decision(plan, Reason::in_its_piece, 4);
  ASSERT_NE(joined, nullptr) << printed;
  EXPECT_NE(printed.find("fused %4 exp: an operand of a concat read piecewise, computed once per element in its "
                         "piece of the space"),
            std::string::npos)
      << printed;
}

// A concat that is returned, read by a row kernel or a matmul, or cut into too many boxes is written (its operands
// in place where their kernels can); without boxes in the backend (CUDA's today) every concat is.
TEST(ConcatPieces, ConcatsThatCannotBeReadPiecewiseAreWritten) {
  const std::string text =
      "func @f(%0: f32[4,3], %1: f32[4,5], %2: f32[4,1]) -> (f32[4,8], f32[4,8], f32[4,1]) {\n"
      "  %3 = f32[4,8] concat(%0, %1) {axis=1}\n"
      "  %4 = f32[4,8] exp(%3)\n"
      "  %5 = f32[4,8] concat(%1, %0) {axis=1}\n"
      "  %6 = f32[4,1] reduce_sum(%5) {axes=[1], keepdims=true}\n"
      "  return %3, %4, %6\n"
      "}\n";
  const auto [plan, printed] = cpu_plan_of(text);
  for (const FusedKernel& kernel : plan.kernels) EXPECT_TRUE(kernel.pieces.empty()) << printed;
  EXPECT_EQ(decision(plan, Reason::read_piecewise, 3), nullptr) << printed;  // returned
  EXPECT_EQ(decision(plan, Reason::read_piecewise, 5), nullptr) << printed;  // read by a row kernel
  std::string tiled = "func @f(%0: f32[4,2]) -> (f32[4,34]) {\n  %1 = f32[4,34] concat(%0";
  for (int copy = 1; copy < 17; ++copy) tiled += ", %0";
  tiled += ") {axis=1}\n  %2 = f32[4,34] exp(%1)\n  return %2\n}\n";
  const auto [many, many_printed] = cpu_plan_of(tiled);
  for (const FusedKernel& kernel : many.kernels) EXPECT_TRUE(kernel.pieces.empty()) << many_printed;
  ir::Graph graph = ir::parse(
      "func @f(%0: f32[4,3], %1: f32[4,5]) -> (f32[4,8]) {\n"
      "  %2 = f32[4,8] concat(%0, %1) {axis=1}\n"
      "  %3 = f32[4,8] exp(%2)\n"
      "  return %3\n"
      "}\n");
  const FusionPlan without = fuse(graph, BackendCapabilities{});
  for (const FusedKernel& kernel : without.kernels) EXPECT_TRUE(kernel.pieces.empty()) << print_plan(graph, without);
}

// The lowering passes on IR text: each prints what it adds to the program (pass.h's print), and the observer sees
// them in order.
TEST(LoweringPasses, FuseThenAssignBuffersThenGenerate) {
  Program program = program_for(ir::parse("func @f(%0: f32[8,16], %1: f32[16]) -> (f32[8,8], f32[8]) {\n"
                                          "  %2 = f32[8,16] add(%0, %1)\n"
                                          "  %3 = f32[8,1] reduce_max(%2) {axes=[1], keepdims=true}\n"
                                          "  %4 = f32[8,16] sub(%2, %3)\n"
                                          "  %5 = f32[8,16] exp(%4)\n"
                                          "  %6 = f32[8] reduce_sum(%5) {axes=[1], keepdims=false}\n"
                                          "  %7 = f32[8,8] matmul(%5, %0) {transpose_a=false, transpose_b=true}\n"
                                          "  return %7, %6\n"
                                          "}\n"),
                                Device::cpu());
  std::vector<std::pair<std::string, std::string>> seen;
  run_lowering(program, [&](std::string_view pass, const Program& after) { seen.emplace_back(pass, print(after)); });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].first, "fuse");
  // exp's values are written for the matmul, which reads its operands from memory.
  const std::string plan =
      "fusion plan for @f: 2 kernels\n"
      "kernel 0 (reduction over [8,16], reducing the last 1 axes): %2 add %3 reduce_max %4 sub %5 exp %6 reduce_sum\n"
      "  reads %0: f32[8,16], %1: f32[16]\n"
      "  writes %5: f32[8,16], %6: f32[8]\n"
      "  fused %5 exp: elementwise producer of the same size; also written out (multi-output fusion); written: a "
      "kernel reads it from memory (a matmul's operand, a library kernel's input)\n"
      "  fused %4 sub: elementwise producer of the same size\n"
      "  fused %3 reduce_max: another reduction over the same rows (one more pass over each row)\n"
      "  fused %2 add: elementwise producer of the same size\n"
      "kernel 1 (gemm over [8,8]): %7 matmul\n"
      "  reads %5: f32[8,16], %0: f32[8,16]\n"
      "  writes %7: f32[8,8]\n";
  EXPECT_EQ(seen[0].second, plan);
  EXPECT_EQ(seen[1].first, "assign-buffers");
  EXPECT_EQ(seen[1].second, plan + "arena: 512 bytes per call\n  %5 f32[8,16] at offset 0\n");
  EXPECT_EQ(seen[2].first, "generate");
  // The source as the `source` stage shows it: the prelude included by name.
  EXPECT_EQ(seen[2].second, compiler::cpu::source_for_reading(program.source));
  EXPECT_NE(seen[2].second.find("#include \"kiln-prelude.h\""), std::string::npos) << seen[2].second;
  EXPECT_NE(program.source.find("// ==== kernel 0: reduction over [8,16] ===="), std::string::npos) << program.source;
}

TEST(BufferAssignment, IntermediatesShareTheArenaByLiveness) {
  // %1 and %3 are written by loop kernels and read by library kernels, so
  // they live in the arena; their lifetimes do not overlap, so they share it.
  ir::Graph graph = ir::parse(
      "func @f(%0: f32[64,64]) -> (f32[64]) {\n"
      "  %1 = f32[64,64] exp(%0)\n"
      "  %2 = f32[64] reduce_sum(%1) {axes=[0], keepdims=false}\n"
      "  %3 = f32[64,64] mul(%0, %2)\n"
      "  %4 = f32[64] reduce_max(%3) {axes=[0], keepdims=false}\n"
      "  return %4\n"
      "}\n");
  FusionPlan plan = fuse(graph);
  BufferAssignment assignment = assign_buffers(graph, plan);
  std::string printed = print_plan(graph, plan) + print_assignment(graph, assignment);
  ASSERT_EQ(plan.kernels.size(), 4u) << printed;
  EXPECT_EQ(assignment.arena_offset[1], 0) << printed;
  EXPECT_EQ(assignment.arena_offset[3], 0) << printed;
  EXPECT_EQ(assignment.arena_bytes, 64 * 64 * 4) << printed;
  EXPECT_EQ(assignment.arena_offset[4], -1) << "outputs get their own buffers";
}

}  // namespace
}  // namespace kiln::compiler
