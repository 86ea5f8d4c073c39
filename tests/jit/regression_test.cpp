// Regression tests from kiln-fuzz (tools/kiln-fuzz): each graph is a
// shrunk failing case, run on the standard executor, the JIT and the float64
// reference (testing::expect_graph_agreement). The comment says what was
// wrong and where the seed that found it came from; `kiln-fuzz --replay` on
// the IR text reproduces it with the printed inputs.

#include "support/differential.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::expect_agreement;
using testing::expect_graph_agreement;
using testing::random_tensor;
using testing::random_uniform;

// A reduction over axes of size 1 with keepdims=true (its result has its
// operand's type) was computed but never stored: the output held whatever
// the buffer held before. (seed 1, graph 0; seed 10, graphs 37, 74, 488)
TEST(JitRegression, ReductionOverUnitAxesWithKeepdims) {
  expect_graph_agreement("reduce over size-1 axes, keepdims",
                         "func @unit_reductions(%0: f32[3,1], %1: f32[1], %2: i64[1,1], %3: bool[1]) -> "
                         "(f32[3,1], f32[1], i64[1,1], bool[1]) {\n"
                         "  %4 = f32[3,1] reduce_sum(%0) {axes=[1], keepdims=true}\n"
                         "  %5 = f32[1] reduce_min(%1) {axes=[0], keepdims=true}\n"
                         "  %6 = i64[1,1] reduce_prod(%2) {axes=[0,1], keepdims=true}\n"
                         "  %7 = bool[1] reduce_max(%3) {axes=[0], keepdims=true}\n"
                         "  return %4, %5, %6, %7\n"
                         "}\n",
                         {random_tensor(DType::f32, {3, 1}, 1), random_tensor(DType::f32, {1}, 2),
                          random_tensor(DType::i64, {1, 1}, 3), random_tensor(DType::boolean, {1}, 4)});
}

// A reshape (not only adding or removing size-1 axes) of a broadcast input
// failed to compile: "reshape: a reshape of a computed value cannot be
// fused". (seed 1, graph 111; seed 10, graphs 40, 173, 198, 421, 442)
TEST(JitRegression, ReshapeOfBroadcastCompiles) {
  expect_graph_agreement("reshape of a broadcast",
                         "func @reshape_of_broadcast(%0: i64[2]) -> (i64[2,4]) {\n"
                         "  %1 = i64[2,2,2] broadcast_to(%0)\n"
                         "  %2 = i64[2,4] reshape(%1)\n"
                         "  return %2\n"
                         "}\n",
                         {random_tensor(DType::i64, {2}, 5)});
}

// A -0.0 constant lost its sign in generated code (splat computes
// vec{} + value, and 0.0 + -0.0 is +0.0), so x / -0.0 gave +inf for x > 0.
// (seed 10, graph 489)
TEST(JitRegression, NegativeZeroConstantKeepsItsSign) {
  expect_graph_agreement("x / -0",
                         "func @divide_by_negative_zero(%0: f64[4], %1: f32[5]) -> (f64[4], f32[5]) {\n"
                         "  %2 = f64[4] constant(-0)\n"
                         "  %3 = f64[4] div(%0, %2)\n"
                         "  %4 = f32[] constant(-0)\n"
                         "  %5 = f32[5] div(%1, %4)\n"
                         "  return %3, %5\n"
                         "}\n",
                         {random_tensor(DType::f64, {4}, 6), random_tensor(DType::f32, {5}, 7)});
}

// An f64 value computed from an inexact f32 one was held to the f64 chain
// tolerance (1e-12) instead of f32's (1e-5): reference::graph_tolerance
// (fixed there). (seed 1, graph 48)
TEST(JitRegression, F64CastOfF32MatmulUsesTheF32Tolerance) {
  expect_graph_agreement("f64 cast of an f32 matmul",
                         "func @cast_of_matmul(%0: f32[1,7], %1: f32[7,2]) -> (f64[1,2]) {\n"
                         "  %2 = f32[1,2] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
                         "  %3 = f64[1,2] cast(%2)\n"
                         "  return %3\n"
                         "}\n",
                         {random_tensor(DType::f32, {1, 7}, 8), random_tensor(DType::f32, {7, 2}, 9)});
}

// The step of a slice axis with one element may be any nonzero int64; the
// reference evaluator and the standard slice kernel multiplied it by the
// stride (signed overflow, undefined behaviour; found by the reference
// fuzzer under UBSan, fixed in both). The JIT's index maps
// (kernel_emitter.cpp, operand_map) multiply it too.
TEST(JitRegression, SliceWithHugeStepOnOneElementAxes) {
  expect_graph_agreement("slice with a huge step",
                         "func @huge_steps(%0: f32[3,4]) -> (f32[1,4], f32[1,2], f32[1,2]) {\n"
                         "  %1 = f32[1,4] slice(%0) {start=[1,0], step=[9223372036854775807,1]}\n"
                         "  %2 = f32[1,2] slice(%0) {start=[2,3], step=[-9223372036854775807,-2]}\n"
                         "  %3 = f32[1,2] sin(%2)\n"
                         "  return %1, %2, %3\n"
                         "}\n",
                         {random_tensor(DType::f32, {3, 4}, 10)});
}

// A slice returned as an output and also read, transposed, by an elementwise
// consumer crashed the fusion pass (SIGSEGV in Fuser::place). (Found while
// writing the test above; shrunk by kiln-fuzz --replay.)
TEST(JitRegression, SliceReturnedAndReadTransposed) {
  expect_graph_agreement("slice returned and transposed",
                         "func @slice_then_transpose(%0: f32[3,4]) -> (f32[2,4], f32[4,2]) {\n"
                         "  %1 = f32[2,4] slice(%0) {start=[1,0], step=[1,1]}\n"
                         "  %2 = f32[4,2] transpose(%1) {permutation=[1,0]}\n"
                         "  %3 = f32[4,2] sin(%2)\n"
                         "  return %1, %3\n"
                         "}\n",
                         {random_tensor(DType::f32, {3, 4}, 11)});
}

// A reduction without keepdims, compared back against its input, was fused
// as if each row read its own sum: element [i,j,k] saw sum[i,j] where NumPy
// broadcasting gives sum[j,k]. Now it stays a kernel of its own (and with
// keepdims, or expand_dims, it still fuses). (seed 2, graph 2353)
TEST(JitRegression, ReductionWithoutKeepdimsBroadcastBackIsNotReadPerRow) {
  Tensor x = random_tensor(DType::f32, {3, 3, 3}, 5);
  expect_graph_agreement("sum without keepdims broadcast back",
                         "func @broadcast_back(%0: f32[3,3,3]) -> (f32[3,3,3]) {\n"
                         "  %1 = f32[3,3] reduce_sum(%0) {axes=[2], keepdims=false}\n"
                         "  %2 = f32[3,3,3] sub(%0, %1)\n"
                         "  return %2\n"
                         "}\n",
                         {x});
  expect_graph_agreement("sum without keepdims, expand_dims, broadcast back",
                         "func @rows(%0: f32[3,3,3]) -> (f32[3,3,3]) {\n"
                         "  %1 = f32[3,3] reduce_sum(%0) {axes=[2], keepdims=false}\n"
                         "  %2 = f32[3,3,1] expand_dims(%1) {axis=2}\n"
                         "  %3 = f32[3,3,3] sub(%0, %2)\n"
                         "  return %3\n"
                         "}\n",
                         {x});
}

// A per-row output whose shape drops the kept size-1 axes (f32[] squeezed
// from a sum over [1,1]) failed to compile: "output f32[] does not match the
// kernel's space [1,1]". (seed 2, graph 5644)
TEST(JitRegression, SqueezedResultOfAOneRowReductionCompiles) {
  expect_graph_agreement("squeeze of a one-row reduction",
                         "func @one_row(%0: f32[1,1], %1: f32[1,4]) -> (f32[], f32[]) {\n"
                         "  %2 = f32[1] reduce_sum(%0) {axes=[1], keepdims=false}\n"
                         "  %3 = f32[] squeeze(%2) {axes=[0]}\n"
                         "  %4 = f32[1] reduce_max(%1) {axes=[1], keepdims=false}\n"
                         "  %5 = f32[] squeeze(%4) {axes=[0]}\n"
                         "  return %3, %5\n"
                         "}\n",
                         {random_tensor(DType::f32, {1, 1}, 6), random_tensor(DType::f32, {1, 4}, 7)});
}

// A GEMM kernel whose product is empty (a dimension of 0) has no blocks, and
// its fused reduction read partials[0] of an empty array: garbage instead of
// the identity (-inf for max, 0 for sum). (seed 2, graph 7726)
TEST(JitRegression, ReductionOfAnEmptyMatmulIsTheIdentity) {
  expect_graph_agreement("max and sum of an empty product",
                         "func @empty_product(%0: f32[1,7], %1: f32[0,7]) -> (f32[], f32[]) {\n"
                         "  %2 = f32[1,0] matmul(%0, %1) {transpose_a=false, transpose_b=true}\n"
                         "  %3 = f32[] reduce_max(%2) {axes=[0,1], keepdims=false}\n"
                         "  %4 = f32[1,0] sin(%2)\n"
                         "  %5 = f32[] reduce_sum(%4) {axes=[0,1], keepdims=false}\n"
                         "  return %3, %5\n"
                         "}\n",
                         {random_tensor(DType::f32, {1, 7}, 8), random_tensor(DType::f32, {0, 7}, 9)});
}

// kiln-fuzz (seed 7, graph 624): a gemm epilogue that casts the f32 product to f64 and reduces it kept its
// partial results in floats, and the module did not compile.
TEST(JitRegression, GemmEpilogueReducingInAnotherDtype) {
  const std::vector<Tensor> inputs{random_tensor(DType::f32, {5, 7}, 10), random_tensor(DType::f32, {3, 7}, 11)};
  expect_graph_agreement("f64 mean of an f32 product",
                         "func @f64_mean(%0: f32[5,7], %1: f32[3,7]) -> (f64[1,1]) {\n"
                         "  %2 = f32[5,3] matmul(%0, %1) {transpose_a=false, transpose_b=true}\n"
                         "  %3 = f64[5,3] cast(%2)\n"
                         "  %4 = f64[1,1] reduce_mean(%3) {axes=[0,1], keepdims=true}\n"
                         "  return %4\n"
                         "}\n",
                         inputs);
  expect_graph_agreement("i32 sum of an f32 product",
                         "func @i32_sum(%0: f32[5,7], %1: f32[3,7]) -> (i32[]) {\n"
                         "  %2 = f32[5,3] matmul(%0, %1) {transpose_a=false, transpose_b=true}\n"
                         "  %3 = f32[5,3] mul(%2, %2)\n"
                         "  %4 = i32[5,3] cast(%3)\n"
                         "  %5 = i32[] reduce_sum(%4) {axes=[0,1], keepdims=false}\n"
                         "  return %5\n"
                         "}\n",
                         inputs);
}

// kiln-fuzz (CUDA seed 62, graph 262): a transpose of a square product has
// the product's shape, so it joined the matmul's epilogue, which reads the
// product element it computes: the result was the product untransposed (CPU
// JIT, once the module compiled) or garbage (CUDA). A slice that reverses an
// axis moves elements the same way. Both now read the product from memory.
// (The product has a second use here: a transpose that is its only use
// becomes a matmul of the swapped operands, as in the next test.)
TEST(JitRegression, TransposedOrReversedSquareProductIsNotAnEpilogue) {
  const std::vector<Tensor> inputs{random_tensor(DType::f32, {6, 5}, 12), random_tensor(DType::f32, {5, 6}, 13),
                                   random_tensor(DType::f32, {6, 6}, 14)};
  expect_graph_agreement("transpose of a square product",
                         "func @transposed(%0: f32[6,5], %1: f32[5,6], %2: f32[6,6]) -> (f32[6,6], f32[]) {\n"
                         "  %3 = f32[6,6] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
                         "  %4 = f32[6,6] transpose(%3) {permutation=[1,0]}\n"
                         "  %5 = f32[6,6] add(%4, %2)\n"
                         "  %6 = f32[] reduce_sum(%3) {axes=[0,1], keepdims=false}\n"
                         "  return %5, %6\n"
                         "}\n",
                         inputs);
  expect_graph_agreement("reversed rows of a square product",
                         "func @reversed(%0: f32[6,5], %1: f32[5,6], %2: f32[6,6]) -> (f32[6,6]) {\n"
                         "  %3 = f32[6,6] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
                         "  %4 = f32[6,6] slice(%3) {start=[5,0], step=[-1,1]}\n"
                         "  %5 = f32[6,6] mul(%4, %2)\n"
                         "  return %5\n"
                         "}\n",
                         inputs);
}

// kiln-fuzz (seed 2, graph 1402, with the epilogue motif): a slice that
// reverses a size-1 axis moves nothing, so it may be the epilogue; returned,
// its instance is the product's tile, and the generators took it for the
// product itself, which sgemm/cuBLAS writes: the CPU module named a row
// pointer it never declared, and CUDA left the output unwritten.
TEST(JitRegression, ProductReturnedThroughASliceThatMovesNothing) {
  expect_graph_agreement("reversed size-1 axis of a product",
                         "func @unit_reversal(%0: f32[1,9], %1: f32[9,1], %2: f32[4,9]) -> (f32[1,1], f32[4,1]) {\n"
                         "  %3 = f32[1,1] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
                         "  %4 = f32[1,1] slice(%3) {start=[0,0], step=[-1,1]}\n"
                         "  %5 = f32[4,1] matmul(%2, %1) {transpose_a=false, transpose_b=false}\n"
                         "  %6 = f32[4,1] slice(%5) {start=[0,0], step=[1,-1]}\n"
                         "  return %4, %6\n"
                         "}\n",
                         {random_tensor(DType::f32, {1, 9}, 18), random_tensor(DType::f32, {9, 1}, 19),
                          random_tensor(DType::f32, {4, 9}, 20)});
}

// kiln-fuzz (seed 2, graph 6543): a product compared with its own maximum
// (a one-hot of the largest element) joined the product's epilogue, which
// cannot read a reduction of the whole product before its last tile: the
// module did not compile (the function fell back to the standard executor).
TEST(JitRegression, EpilogueReadingAReductionOfTheWholeProductCompiles) {
  expect_graph_agreement("one-hot of the product's maximum",
                         "func @one_hot(%0: f32[8,8], %1: f32[4,8]) -> (f32[8,4]) {\n"
                         "  %2 = f32[8,4] matmul(%0, %1) {transpose_a=false, transpose_b=true}\n"
                         "  %3 = f32[1,1] reduce_max(%2) {axes=[0,1], keepdims=true}\n"
                         "  %4 = bool[8,4] eq(%2, %3)\n"
                         "  %5 = f32[8,4] cast(%4)\n"
                         "  return %5\n"
                         "}\n",
                         {random_tensor(DType::f32, {8, 8}, 21), random_tensor(DType::f32, {4, 8}, 22)});
}

// kiln-fuzz (seed 88, graph 880): a reduction of a value that is the same in
// every element it reduces (a constant, a broadcast scalar) added the value once
// per element, one rounding each: the mean of 12,400 copies of 0.1f came out
// 1.3e-4 off. A sum is now v * n, rounded once; an empty one is still 0.
TEST(JitRegression, ReductionOfAValueTheSameInEveryElement) {
  expect_graph_agreement(
      "reductions of a row-invariant value",
      "func @invariant(%0: f32[], %1: i32[], %2: f64[1]) -> "
      "(f32[1,1,1], f32[], f32[4], i32[], f64[], f32[3], f32[4]) {\n"
      "  %3 = f32[4,100,31] constant(0.1)\n"
      "  %4 = f32[1,1,1] reduce_mean(%3) {axes=[0,1,2], keepdims=true}\n"
      "  %5 = f32[4,100,31] broadcast_to(%0)\n"
      "  %6 = f32[] reduce_sum(%5) {axes=[0,1,2], keepdims=false}\n"
      "  %7 = f32[4] reduce_max(%5) {axes=[1,2], keepdims=false}\n"
      "  %8 = i32[4,100,31] broadcast_to(%1)\n"
      "  %9 = i32[] reduce_sum(%8) {axes=[0,1,2], keepdims=false}\n"
      "  %10 = f64[3000,7] broadcast_to(%2)\n"
      "  %11 = f64[] reduce_sum(%10) {axes=[0,1], keepdims=false}\n"
      "  %12 = f32[0,3] broadcast_to(%0)\n"
      "  %13 = f32[3] reduce_sum(%12) {axes=[0], keepdims=false}\n"
      "  %14 = f32[4] reduce_min(%5) {axes=[1,2], keepdims=false}\n"
      "  return %4, %6, %7, %9, %11, %13, %14\n"
      "}\n",
      {random_tensor(DType::f32, {}, 23), random_tensor(DType::i32, {}, 24), random_tensor(DType::f64, {1}, 25)});
}

// kiln-fuzz (seed 97, graph 991): a slice reversing the rows of a keepdims
// reduction joined the reduction's row kernel, where each row sees only its own
// reduced value: the JIT returned the maxima in the original order. Now such a
// consumer reads the reduction from memory; one reading its own row still fuses.
TEST(JitRegression, ReversedRowsOfAKeepdimsReduction) {
  expect_graph_agreement("reversed rows of keepdims reductions",
                         "func @reversed(%0: f32[7,9]) -> (f32[7,1], f32[7,1], f32[7,1]) {\n"
                         "  %1 = f32[7,1] reduce_max(%0) {axes=[1], keepdims=true}\n"
                         "  %2 = f32[7,1] slice(%1) {start=[6,0], step=[-1,3]}\n"
                         "  %3 = f32[7,1] reduce_sum(%0) {axes=[1], keepdims=true}\n"
                         "  %4 = f32[7,1] slice(%3) {start=[6,0], step=[-1,1]}\n"
                         "  %5 = f32[7,1] exp(%4)\n"
                         "  %6 = f32[7,1] sqrt(%1)\n"
                         "  return %2, %5, %6\n"
                         "}\n",
                         {random_tensor(DType::f32, {7, 9}, 26)});
}

// simplify's transpose(matmul(a, b)) -> matmul(b, a) with the flags swapped
// and flipped, for each combination of flags and a batched product.
TEST(JitRegression, TransposeOfAProductIsTheProductOfTheSwappedOperands) {
  for (const char* flags : {"transpose_a=false, transpose_b=false", "transpose_a=true, transpose_b=false",
                            "transpose_a=false, transpose_b=true", "transpose_a=true, transpose_b=true"}) {
    bool transpose_a = std::string(flags).find("transpose_a=true") != std::string::npos;
    bool transpose_b = std::string(flags).find("transpose_b=true") != std::string::npos;
    std::string a = transpose_a ? "f32[2,5,6]" : "f32[2,6,5]", b = transpose_b ? "f32[2,4,5]" : "f32[2,5,4]";
    Shape a_shape = transpose_a ? Shape({2, 5, 6}) : Shape({2, 6, 5});
    Shape b_shape = transpose_b ? Shape({2, 4, 5}) : Shape({2, 5, 4});
    expect_graph_agreement(std::string("transposed product, ") + flags,
                           "func @transposed(%0: " + a + ", %1: " + b + ", %2: f32[2,4,6]) -> (f32[2,4,6]) {\n" +
                               "  %3 = f32[2,6,4] matmul(%0, %1) {" + flags + "}\n" +
                               "  %4 = f32[2,4,6] transpose(%3) {permutation=[0,2,1]}\n"
                               "  %5 = f32[2,4,6] add(%4, %2)\n"
                               "  return %5\n"
                               "}\n",
                           {random_tensor(DType::f32, a_shape, 15), random_tensor(DType::f32, b_shape, 16),
                            random_tensor(DType::f32, {2, 4, 6}, 17)});
  }
}

// The sum of two products of one shape (x w + h u, as in a recurrent cell's gates) became one gemm kernel
// whose epilogue read the first product's tile for both: it returned 2 x w. Found by a view test
// (tests/jit/view_test.cpp), not by kiln-fuzz; kiln-fuzz now generates such sums. The second product is now
// a kernel of its own.
TEST(JitRegression, SumOfTwoProductsIsNotOneGemmKernel) {
  expect_graph_agreement("x w + h u",
                         "func @gates(%0: f32[9,20], %1: f32[20,12], %2: f32[9,7], %3: f32[7,12]) -> (f32[9,12]) {\n"
                         "  %4 = f32[9,12] matmul(%0, %1) {transpose_a=false, transpose_b=false}\n"
                         "  %5 = f32[9,12] matmul(%2, %3) {transpose_a=false, transpose_b=false}\n"
                         "  %6 = f32[9,12] add(%4, %5)\n"
                         "  %7 = f32[9,12] tanh(%6)\n"
                         "  return %7\n"
                         "}\n",
                         {random_tensor(DType::f32, {9, 20}, 30), random_tensor(DType::f32, {20, 12}, 31),
                          random_tensor(DType::f32, {9, 7}, 32), random_tensor(DType::f32, {7, 12}, 33)});
}

// The scaled scores of an attention pattern, recomputed in the row kernel and in a loop kernel that returns
// their negation, made that loop kernel read the first product, which the attention kernel never writes: it
// read freed memory (kiln-fuzz --seed 232, graph 354, a crash). Attention fusion (and column fusion) now ask
// the plan whether another kernel reads the value they stop writing.
TEST(JitRegression, AValueRecomputedFromTheScoresKeepsThemInMemory) {
  expect_graph_agreement(
      "scores read by a recomputing kernel",
      "func @scores(%0: f32[2,3,5,8], %1: f32[2,3,16,8], %2: f32[2,3,16,4]) -> (f32[2,3,5,16], f32[2,3,5,4]) {\n"
      "  %3 = f32[2,3,5,16] matmul(%0, %1) {transpose_a=false, transpose_b=true}\n"
      "  %4 = f32[] constant(0.25)\n"
      "  %5 = f32[2,3,5,16] mul(%3, %4)\n"
      "  %6 = f32[2,3,5,1] reduce_sum(%5) {axes=[3], keepdims=true}\n"
      "  %7 = f32[2,3,5,16] div(%5, %6)\n"
      "  %8 = f32[2,3,5,4] matmul(%7, %2) {transpose_a=false, transpose_b=false}\n"
      "  %9 = f32[2,3,5,16] neg(%5)\n"
      "  return %9, %8\n"
      "}\n",
      {random_uniform(DType::f32, {2, 3, 5, 8}, 0.5, 1.5, 40), random_uniform(DType::f32, {2, 3, 16, 8}, 0.5, 1.5, 41),
       random_tensor(DType::f32, {2, 3, 16, 4}, 42)});
}

// A row's maximum broadcast back along the row and returned is a row value stored at every element: the reduction
// kernel wrote it once per row (its instance is the reduction's), leaving the rest of the output unwritten
// (kiln-fuzz --seed 20261206, graph 3200). Across rows in lanes, over one row and over every element too.
TEST(JitRegression, ARowValueBroadcastAlongTheRowIsStoredAtEveryElement) {
  for (const Shape& shape : {Shape({3, 5}), Shape({1, 40}), Shape({300, 7}), Shape({2, 40000})}) {
    auto body = [](Tensor x) {
      return std::vector<Tensor>{broadcast_to(reduce_max(x, {1}, true), x.shape()),
                                 broadcast_to(reduce_sum(x, {1}, true), x.shape()) + 0.0f, reduce_min(x, {1})};
    };
    expect_agreement("row values broadcast " + shape.to_string(), body, random_tensor(DType::f32, shape, 50));
  }
  auto whole = [](Tensor x) { return broadcast_to(reduce_max(x, {0}, true), x.shape()); };
  expect_agreement("a whole reduction broadcast", whole, random_tensor(DType::f32, {2}, 51));
}

// Found by kiln-fuzz --gradients (seed 2), in the forward graphs derivatives make.

// A column kernel's per-column value that no reduction feeds (sign(x), broadcast over the reduced rows and also
// written out) was computed after the first pass, which had already read it: garbage sums (graph 48).
TEST(JitRegression, APerColumnValueIsComputedBeforeThePassesReadIt) {
  expect_graph_agreement("per-column value before the passes",
                         "func @per_column(%0: f64[2]) -> (f64[], f64[2]) {\n"
                         "  %1 = f64[1,1,2,1] constant(-0.5467866938035093)\n"
                         "  %2 = f64[2] sign(%0)\n"
                         "  %3 = f64[1,1,2,2] mul(%2, %1)\n"
                         "  %4 = f64[2] reduce_sum(%3) {axes=[0,1,2], keepdims=false}\n"
                         "  %5 = f64[] reduce_sum(%3) {axes=[0,1,2,3], keepdims=false}\n"
                         "  return %5, %4\n"
                         "}\n",
                         {random_tensor(DType::f64, {2}, 60)});
}

// A column kernel read another kernel's reduce_min result per column and wrote it out again (a reshape of it, also
// an output): its per-column value was spelled as the op that made it, `reduce_min()` with nothing to reduce, and
// the module did not compile (graph 5434, the derivative graph of a reduce_min's expand_dims).
TEST(JitRegression, AColumnKernelLoadsAPerColumnInputWhateverMadeIt) {
  expect_graph_agreement(
      "per-column input written out again",
      "func @column_input(%0: f32[1,1,2,2], %1: f32[1,1,1,1,2], %2: f32[1,1,2,2]) -> (f64[], f64[], f32[1,1,2,2]) {\n"
      "  %3 = f32[1,1,1,2] reduce_min(%0) {axes=[0,1,2], keepdims=true}\n"
      "  %4 = f32[1,1,1,1,2] reshape(%3)\n"
      "  %5 = f32[1,1,1,1,2] maximum(%4, %4)\n"
      "  %6 = f32[1,1,1,1,2] mul(%5, %1)\n"
      "  %7 = f32[] reduce_sum(%6) {axes=[0,1,2,3,4], keepdims=false}\n"
      "  %8 = f64[] cast(%7)\n"
      "  %9 = bool[1,1,2,2] eq(%0, %3)\n"
      "  %10 = f32[1,1,2,2] cast(%9)\n"
      "  %11 = f32[1,1,1,2] reduce_sum(%10) {axes=[0,1,2], keepdims=true}\n"
      "  %12 = bool[1,1,1,1,2] eq(%4, %4)\n"
      "  %13 = f32[1,1,1,1,2] cast(%12)\n"
      "  %14 = f32[] constant(0.5)\n"
      "  %15 = f32[1,1,1,1,2] mul(%13, %14)\n"
      "  %16 = bool[1,1,1,1,2] gt(%4, %4)\n"
      "  %17 = f32[1,1,1,1,2] cast(%16)\n"
      "  %18 = f32[1,1,1,1,2] add(%17, %15)\n"
      "  %19 = f32[1,1,1,1,2] mul(%1, %18)\n"
      "  %20 = f32[1,1,1,1,2] add(%19, %19)\n"
      "  %21 = f32[1,1,1,2] reshape(%20)\n"
      "  %22 = f32[1,1,1,2] div(%21, %11)\n"
      "  %23 = f32[1,1,2,2] broadcast_to(%22)\n"
      "  %24 = f32[1,1,2,2] mul(%23, %10)\n"
      "  %25 = f32[1,1,2,2] mul(%2, %10)\n"
      "  %26 = f32[1,1,1,2] reduce_sum(%25) {axes=[0,1,2], keepdims=true}\n"
      "  %27 = f32[1,1,1,2] div(%26, %11)\n"
      "  %28 = f32[1,1,1,1,2] reshape(%27)\n"
      "  %29 = f32[1,1,1,1,2] mul(%28, %18)\n"
      "  %30 = f32[1,1,1,1,2] add(%29, %29)\n"
      "  %31 = f32[1,1,1,1,2] mul(%30, %1)\n"
      "  %32 = f32[] reduce_sum(%31) {axes=[0,1,2,3,4], keepdims=false}\n"
      "  %33 = f64[] cast(%32)\n"
      "  return %8, %33, %24\n"
      "}\n",
      {random_tensor(DType::f32, {1, 1, 2, 2}, 61), random_tensor(DType::f32, {1, 1, 1, 1, 2}, 62),
       random_tensor(DType::f32, {1, 1, 2, 2}, 63)});
}

// A constant read by an attention kernel's row code and by another matmul joined the attention kernel as a second
// output, which the attention kernel never writes: the other product read garbage, inf or 6.7e36 (graph 164).
TEST(JitRegression, AnAttentionKernelWritesNothingButItsProduct) {
  expect_graph_agreement("value of the row code read by another matmul",
                         "func @attention_output() -> (f32[4,1], f32[4,4]) {\n"
                         "  %0 = f32[4,8] constant(8.086976051330566)\n"
                         "  %1 = f32[4,8] constant(-0.2689395248889923)\n"
                         "  %2 = f32[4,8] constant(-1.0625606775283813)\n"
                         "  %3 = f32[8,4] constant(-8)\n"
                         "  %4 = f32[4,1] constant(-3)\n"
                         "  %5 = f32[4,4] constant(-0.10302605479955673)\n"
                         "  %6 = f32[4,4] matmul(%1, %3) {transpose_a=false, transpose_b=false}\n"
                         "  %7 = f32[4,1] matmul(%6, %4) {transpose_a=false, transpose_b=false}\n"
                         "  %8 = f32[4,8] matmul(%5, %2) {transpose_a=false, transpose_b=false}\n"
                         "  %9 = f32[4,1] reduce_sum(%0) {axes=[1], keepdims=true}\n"
                         "  %10 = f32[4,8] mul(%9, %1)\n"
                         "  %11 = f32[4,8] add(%8, %10)\n"
                         "  %12 = f32[4,4] matmul(%11, %3) {transpose_a=false, transpose_b=false}\n"
                         "  return %7, %12\n"
                         "}\n",
                         {});
}

// A column kernel over an empty space ([2, 0], its columns empty) did not compile ("'r' was not declared"): with no
// elements there are no strides, and the passes' planner took every value for a per-column one (graph 147).
TEST(JitRegression, AKernelWhoseOutputsAreEmptyCompiles) {
  expect_graph_agreement("column passes over empty columns",
                         "func @empty_columns(%0: f32[2,0]) -> (f32[], f32[2,0]) {\n"
                         "  %1 = f32[2,0] exp(%0)\n"
                         "  %2 = f32[0] reduce_min(%1) {axes=[0], keepdims=false}\n"
                         "  %3 = f32[1,0] reshape(%2)\n"
                         "  %4 = bool[2,0] eq(%1, %3)\n"
                         "  %5 = f32[2,0] cast(%4)\n"
                         "  %6 = f32[0] reduce_sum(%5) {axes=[0], keepdims=false}\n"
                         "  %7 = f32[] reduce_sum(%6) {axes=[0], keepdims=false}\n"
                         "  return %7, %1\n"
                         "}\n",
                         {random_tensor(DType::f32, {2, 0}, 61)});
}

// Found by kiln-fuzz (seed 3, graph 2112): an iota divided by a column sum, per column, computed before the passes
// as the call iota(), which nothing defines (the C++ compiler refused the kernel).
TEST(JitRegression, APerColumnCoordinateIsComputedBeforeThePasses) {
  expect_graph_agreement("per-column iota before the passes",
                         "func @per_column_iota() -> (f32[2], f32[2]) {\n"
                         "  %0 = f32[2,2] constant(-1.3827626705169678)\n"
                         "  %1 = f32[2] iota() {axis=0}\n"
                         "  %2 = f32[2] reduce_sum(%0) {axes=[0], keepdims=false}\n"
                         "  %3 = f32[2] iota() {axis=0}\n"
                         "  %4 = f32[2] div(%3, %2)\n"
                         "  return %1, %4\n"
                         "}\n",
                         {});
}

// kiln-fuzz (control-flow fuzzing, seed 22): a zero-size operand padded by concats to a row of constants is read
// in place with a window of the row; its load did not move along the row, so the row kernel computed it once per
// row, outside the loop that defines the window's position (the generated C++ did not compile).
TEST(JitRegression, PaddingOfAZeroSizeValueReadInPlaceAcrossARow) {
  expect_graph_agreement("zero-size value padded by two concats", R"(func @f(%0: f32[2,0]) -> (f32[3,1]) {
  %1 = f32[2,1] constant(9)
  %2 = f32[2,1] concat(%1, %0) {axis=1}
  %3 = f32[1,1] constant(9)
  %4 = f32[3,1] concat(%2, %3) {axis=0}
  %5 = f32[3,1] exp(%4)
  return %5
}
)",
                         {zeros({2, 0})});
}

}  // namespace
}  // namespace kiln
