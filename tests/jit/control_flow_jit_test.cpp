// Control flow compiled by the JIT: each control node's regions compiled as functions of their own, the node run by
// the executable; results against the standard executor and the float64 reference (support/differential.h).

#include "support/differential.h"
#include "support/recurrent_gradients.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::random_tensor;
using testing::random_uniform;

Tensor scalar(std::int32_t value) { return from_vector(std::vector<std::int32_t>{value}, Shape()); }

TEST(ControlFlowJit, CondOfFusedBranchesAgrees) {
  const Tensor x = random_tensor(DType::f32, {33, 17}, 1), y = random_tensor(DType::f32, {17}, 2);
  const auto body = [](const Tensor& a, const Tensor& b) {
    const Tensor scaled = a * 1.5 + b;
    return cond(
        reduce_sum(a) > 0.0,
        [&]() {
          return std::tuple<Tensor, Tensor>{tanh(scaled) * b, reduce_sum(scaled, {1})};
        },
        [&]() {
          return std::tuple<Tensor, Tensor>{exp(-scaled) - b, reduce_max(scaled, {1})};
        });
  };
  const testing::DifferentialResult positive = expect_agreement("cond, true branch", body, abs(x), y);
  expect_agreement("cond, false branch", body, -abs(x), y);
  EXPECT_EQ(positive.jit.fallbacks, 0);
  EXPECT_NE(positive.fused.find("cond"), std::string::npos) << positive.fused;
}

TEST(ControlFlowJit, WhileLoopWithACounterAndACapturedTensor) {
  const Tensor x = random_uniform(DType::f32, {64}, 0.5, 1.5, 3);
  const Tensor weight = random_uniform(DType::f32, {64}, 0.9, 1.1, 4);
  // The weight is an argument here (the differential check gives the reference the arguments only); the branch
  // and loop regions still capture it from the enclosing function.
  const auto body = [](const Tensor& start, const Tensor& steps, const Tensor& weight) {
    auto [value, count] =
        while_loop([&](const std::pair<Tensor, Tensor>& state) { return state.second < steps; },
                   [&](const std::pair<Tensor, Tensor>& state) {
                     return std::pair<Tensor, Tensor>{sqrt(state.first * weight) + 0.25, state.second + 1};
                   },
                   std::pair<Tensor, Tensor>{start * 2.0, zeros(Shape(), DType::i32)});
    return std::tuple<Tensor, Tensor>{value + 1.0, count};
  };
  for (std::int32_t steps : {0, 1, 7})
    expect_agreement("while_loop of " + std::to_string(steps), body, x, scalar(steps), weight);
}

TEST(ControlFlowJit, ScanOfARecurrentCell) {
  // h' = tanh(x W + h U + b), the outputs every h: a small RNN over 9 steps.
  const Tensor xs = random_tensor(DType::f32, {9, 4, 6}, 5);
  const Tensor w = random_tensor(DType::f32, {6, 8}, 6) * 0.3, u = random_tensor(DType::f32, {8, 8}, 7) * 0.3;
  const Tensor b = random_tensor(DType::f32, {8}, 8);
  const auto body = [](const Tensor& sequence, const Tensor& h0, const Tensor& w, const Tensor& u, const Tensor& b) {
    auto [last, outputs] = scan(
        [&](const Tensor& h, const Tensor& x) {
          const Tensor next = tanh(matmul(x, w) + matmul(h, u) + b);
          return std::pair<Tensor, Tensor>{next, next};
        },
        h0, sequence);
    return std::tuple<Tensor, Tensor>{last, outputs};
  };
  expect_agreement("rnn scan", body, xs, random_tensor(DType::f32, {4, 8}, 9), w, u, b);
}

TEST(ControlFlowJit, ForiLoopsNestedWithABranch) {
  const Tensor x = random_tensor(DType::f64, {5, 3}, 10);
  const auto body = [](const Tensor& v) {
    return fori_loop(
        0, 5,
        [&](const Tensor& i, const Tensor& total) {
          return fori_loop(
              zeros(Shape(), DType::i32), i,
              [&](const Tensor& j, const Tensor& inner) {
                return cond((i + j) % 2 == 0, [&]() { return inner + v * 0.5; }, [&]() { return inner * 0.75 - v; });
              },
              total);
        },
        v * 1.0);
  };
  expect_agreement("nested fori_loop", body, x);
}

TEST(ControlFlowJit, AResultReturnedAsItCameInOutlivesTheArena) {
  // The loop runs no step, so its result is its operand: a temporary of the call's arena, which the kernels after
  // it reuse. The executable must hand it on as a value of its own.
  const Tensor x = random_tensor(DType::f32, {256}, 11);
  const auto body = [](const Tensor& v) {
    const Tensor temporary = exp(v) * 2.0 + 1.0;
    const Tensor looped = while_loop([](const Tensor& t) { return reduce_sum(t) < -1.0; },
                                     [](const Tensor& t) { return t * 2.0; }, temporary);
    const Tensor later = sin(v) * 3.0 - reduce_sum(v);
    return std::tuple<Tensor, Tensor>{looped * later, later + 1.0};
  };
  expect_agreement("identity loop", body, x);
}

TEST(ControlFlowJit, WorkOnCapturesAloneMovesOutOfTheLoop) {
  // exp(w) * 0.5 and the transposed product of the captures are the same at every step: computed once, before
  // the loops; the step keeps only what reads the carry.
  const Tensor x = random_tensor(DType::f32, {6, 8}, 13), w = random_tensor(DType::f32, {8, 8}, 14);
  const auto body = [](const Tensor& v, const Tensor& weight) {
    const Tensor scanned = std::get<0>(scan(
        [&](const Tensor& carry, const Tensor& row) {
          const Tensor scale = exp(weight) * 0.5;
          const Tensor mixed = matmul(weight, scale, {.transpose_a = true});
          const Tensor next = tanh(matmul(reshape(carry, {1, 8}), mixed) + row);
          return std::pair<Tensor, Tensor>{reshape(next, {8}), next};
        },
        reduce_mean(v, {0}), v));
    return fori_loop(
        0, 3, [&](const Tensor&, const Tensor& carry) { return carry * reduce_sum(weight * weight) * 0.01; }, scanned);
  };
  const testing::DifferentialResult result = expect_agreement("invariants", body, x, w);
  auto jit = function(body, {.jit_compile = true});
  const std::string optimized = jit.get_compiler_ir(Stage::optimized, x, w);
  // The exp and the product are in the enclosing function, before the scan_loop; the step has one matmul.
  const std::size_t loop = optimized.find("scan_loop(");
  ASSERT_NE(loop, std::string::npos) << optimized;
  EXPECT_LT(optimized.find(" exp("), loop) << optimized;
  EXPECT_LT(optimized.find("transpose_a=true"), loop) << optimized;
  const std::string step = optimized.substr(loop);
  EXPECT_EQ(step.find(" exp("), std::string::npos) << optimized;
  EXPECT_EQ(step.find("transpose_a=true"), std::string::npos) << optimized;
  EXPECT_LT(optimized.rfind("reduce_sum("), optimized.rfind("scan_loop(")) << optimized;
}

// A scan's reverse-mode derivative adds a second forward scan that also stacks the carries: merge-loops folds the
// first into it, so the compiled training step runs the forward loop once. The weights are captures whose packing
// the loop keeps (kernels/cpu/gemm_invariant.h), also where the backward step reads them transposed.
TEST(ControlFlowJit, TheGradientOfAScanRunsItsForwardLoopOnce) {
  const Tensor h0 = random_tensor(DType::f32, {16, 40}, 21), xs = random_tensor(DType::f32, {7, 16, 40}, 22);
  const Tensor w = random_tensor(DType::f32, {40, 40}, 23) * 0.2, u = random_tensor(DType::f32, {40, 40}, 24) * 0.2;
  const auto body = [](const Tensor& h, const Tensor& sequence, const Tensor& input_weight,
                       const Tensor& state_weight) {
    return testing::recurrent_loss_and_gradients(h, sequence, input_weight, state_weight);
  };
  expect_agreement("scan gradients", body, h0, xs, w, u);
  auto jit = function(body, {.jit_compile = true});
  const std::string traced = jit.get_compiler_ir(Stage::traced, h0, xs, w, u);
  const std::string optimized = jit.get_compiler_ir(Stage::optimized, h0, xs, w, u);
  const auto count = [](const std::string& text, const std::string& what) {
    std::size_t found = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++found;
    return found;
  };
  EXPECT_EQ(count(traced, "scan_loop("), 3u) << traced;        // forward, forward stacking carries, backward
  EXPECT_EQ(count(optimized, "scan_loop("), 2u) << optimized;  // forward once, backward
}

// kiln-fuzz (seed 41, graph 379): moving a chain of invariant values (a cast and two sums of it) out of an inner
// loop rewired the region before the chain's later links were copied out, so the copy took a region parameter
// for a value of the enclosing graph (a crash).
TEST(ControlFlowJit, AChainOfInvariantsMovesOutOfANestedLoopWhole) {
  testing::expect_graph_agreement("nested scans", R"(func @fuzz_41_379() -> (i32[2,3,5,1,4]) {
  %0 = i32[3,5,1,4] constant(2)
  %1 = f32[1] constant(-1.344940423965454)
  %2 = f32[3,3] constant(-0.05426304414868355)
  %3 = i32[5,1] constant(-4)
  %4 = i32[5,1] scan_loop(%3, %0, %1, %2) {carry_count=1, sequence_count=0, length=2, reverse=true} regions(
    func @step(%0: i32[5,1], %1: i32[3,5,1,4], %2: f32[1], %3: f32[3,3]) -> (i32[5,1], i32[3,3,3], i32[3,5,1,4]) {
      %4 = i32[3,3] constant(-6)
      %5 = i32[5,1] scan_loop(%0, %1, %4, %4, %2, %3) {carry_count=2, sequence_count=1, length=3, reverse=true} regions(
        func @step(%0: i32[5,1], %1: i32[3,5,1,4], %2: i32[3], %3: i32[3,3], %4: f32[1], %5: f32[3,3]) -> (i32[5,1], i32[3,5,1,4], i32[3,3]) {
          %6 = i32[3,3] cast(%5)
          %7 = i32[] reduce_sum(%6) {axes=[0,1], keepdims=false}
          %8 = i32[5,1] bitwise_xor(%0, %7)
          %9 = i32[] reduce_sum(%6) {axes=[0,1], keepdims=false}
          %10 = i32[] constant(3)
          %11 = i32[3,5,1,4] mul(%1, %10)
          %12 = i32[3,5,1,4] add(%11, %9)
          return %8, %12, %6
        }
      )
      %6 = i32[3,3,3] result(%5) {index=2}
      return %0, %6, %1
    }
  )
  %5 = i32[2,3,5,1,4] result(%4) {index=2}
  return %5
}
)",
                                  {});
}

TEST(ControlFlowJit, BranchesOfHalfPrecisionValues) {
  const Tensor x = cast(random_tensor(DType::f32, {40}, 12), DType::bf16);
  const auto body = [](const Tensor& v) {
    return cond(
        reduce_sum(cast(v, DType::f32)) > 0.0, [&]() { return nn::gelu(v); }, [&]() { return v * v; });
  };
  auto standard = function(body);
  auto jit = function(body, {.jit_compile = true, .on_compile_failure = Fallback::none});
  EXPECT_EQ(standard(x).to_vector<float>(), jit(x).to_vector<float>());
}

}  // namespace
}  // namespace kiln
