// A loop's step (compiler/loop_step.h) and the driver generated around it (compiler/loop_layout.h,
// codegen/cpu/loop_driver.h), checked as text on a small while_loop: the condition fused after the body, each
// carry's buffers, the kernels called in order, the flag read before the carries move on.

#include "compiler/loop_step.h"
#include "compiler/codegen/cpu/loop_driver.h"
#include "compiler/loop_layout.h"
#include "compiler/pipeline.h"
#include "ir/parser.h"
#include "ir/printer.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

// x -> (x, 0); while i < 3: (x * s, i + 1).
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
  return %3, %4
}
)";

TEST(LoopStep, AWhileLoopsConditionFollowsItsBodyOnTheNewCarries) {
  const ir::Graph graph = ir::parse(while_text);
  EXPECT_EQ(ir::print(loop_step(graph, 3)),
            R"(func @doubling.loop_3(%0: f32[3], %1: i32[], %2: f32[]) -> (f32[3], i32[], bool[]) {
  %3 = f32[3] mul(%0, %2)
  %4 = i32[] constant(1)
  %5 = i32[] add(%1, %4)
  %6 = i32[] constant(3)
  %7 = bool[] lt(%5, %6)
  return %3, %5, %7
}
)");
}

TEST(LoopStep, TheDriverCallsTheStepsKernelsAndUpdatesElementwiseCarriesInPlace) {
  const ir::Graph graph = ir::parse(while_text);
  Program program = program_for(loop_step(graph, 3), Device::cpu());
  optimize(program);
  run_lowering(program);
  std::string why_not;
  const std::optional<LoopLayout> layout =
      layout_loop(graph, 3, program.graph, *program.plan, *program.assignment, why_not);
  ASSERT_TRUE(layout) << why_not;
  EXPECT_EQ(describe(*layout),
            "  carry 0 f32[3]: updated in place: kernel 0 reads it element by element and is the last to read it\n"
            "  carry 1 i32[]: updated in place: kernel 1 reads it element by element and is the last to read it\n"
            "  condition 2 bool[]: written by a kernel\n");
  EXPECT_EQ(cpu::loop_driver_source(*layout, "%3 while_loop of @doubling"), R"(
// ==== the loop: %3 while_loop of @doubling ====
// kiln_loop runs the kernels above in order once per iteration, as long as the
// condition the last of them computes holds (the host has checked it before the first).
// The carries move on by pointer: each is read where the iteration before wrote it.
extern "C" __attribute__((visibility("default"))) void kiln_kernel_0(const kiln_runtime*, void* const*);
extern "C" __attribute__((visibility("default"))) void kiln_kernel_1(const kiln_runtime*, void* const*);
extern "C" __attribute__((visibility("default"))) void kiln_loop(const kiln_runtime* runtime, void* const* buffers) {
  char* const workspace = static_cast<char*>(buffers[7]);
  char* const arena = workspace;  // the step's arena (0 bytes), then the driver's own scratch
  // carry 0, f32[3]: updated in place: kernel 0 reads it element by element and is the last to read it
  char* carry_0 = static_cast<char*>(buffers[0]);  // where this iteration reads it: first the operand (never written)
  char* const carry_0_first = static_cast<char*>(buffers[3]);
  // carry 1, i32[]: updated in place: kernel 1 reads it element by element and is the last to read it
  char* carry_1 = static_cast<char*>(buffers[1]);  // where this iteration reads it: first the operand (never written)
  char* const carry_1_first = static_cast<char*>(buffers[5]);
  char* const captured_0 = static_cast<char*>(buffers[2]);
  kiln_runtime for_the_step = *runtime;  // its `step` tells row kernels which way to walk
  for (int64_t count = 0;; ++count) {
    for_the_step.step = count;
    char* const slot_0 = carry_0_first;  // in place once the first step has run
    char* const slot_1 = carry_1_first;  // in place once the first step has run
    char* const slot_2 = workspace + 0;  // the condition
    {
      void* const kernel_buffers[] = {carry_0, captured_0, slot_0};
      kiln_kernel_0(&for_the_step, kernel_buffers);
    }
    {
      void* const kernel_buffers[] = {carry_1, slot_1, slot_2};
      kiln_kernel_1(&for_the_step, kernel_buffers);
    }
    if (runtime->failed(&for_the_step) != 0) return;  // an index out of range: kiln raises it
    const bool go_on = *reinterpret_cast<const uint8_t*>(slot_2) != 0;
    carry_0 = slot_0;
    carry_1 = slot_1;
    if (!go_on) break;
  }
  int64_t* const where = static_cast<int64_t*>(buffers[8]);  // per carry: 0 as it came in, 1 its first buffer, 2 its second
  where[0] = carry_0 == carry_0_first ? 1 : 0;
  where[1] = carry_1 == carry_1_first ? 1 : 0;
}
)");
}

}  // namespace
}  // namespace kiln::compiler
