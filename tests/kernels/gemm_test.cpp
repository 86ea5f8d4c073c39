// kiln's own GEMM (kernels/cpu/gemm.h) against a float64 reference, and the contract of its epilogue.

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_invariant.h"
#include "kernels/cpu/gemm_short.h"

#include "runtime/parallel.h"
#include "support/test_support.h"
#include "support/tile_copy.h"

#include <gtest/gtest.h>
#include <kiln/memory.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::TileCopy;

struct Case {
  std::int64_t m, n, k;
  bool transpose_a, transpose_b;
  std::int64_t lda, ldb, ldc;  // stored leading dimensions
  std::vector<float> a, b;

  Case(std::int64_t m_, std::int64_t n_, std::int64_t k_, bool ta, bool tb, std::int64_t padding = 0)
      : m(m_), n(n_), k(k_), transpose_a(ta), transpose_b(tb) {
    lda = (ta ? m : k) + padding;
    ldb = (tb ? k : n) + padding;
    ldc = n + padding;
    a = testing::random_floats((ta ? k : m) * lda + 1, 1000 + static_cast<std::uint64_t>(m * 7 + k));
    b = testing::random_floats((tb ? n : k) * ldb + 1, 2000 + static_cast<std::uint64_t>(n * 7 + k));
  }
  float a_at(std::int64_t i, std::int64_t p) const { return transpose_a ? a[p * lda + i] : a[i * lda + p]; }
  float b_at(std::int64_t p, std::int64_t j) const { return transpose_b ? b[j * ldb + p] : b[p * ldb + j]; }

  // C in double precision, and sum |a||b| per element for the error bound.
  void reference(std::vector<double>& c, std::vector<double>& magnitude) const {
    c.assign(static_cast<std::size_t>(m * n), 0.0);
    magnitude.assign(static_cast<std::size_t>(m * n), 0.0);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0, absolute = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          const double product = static_cast<double>(a_at(i, p)) * static_cast<double>(b_at(p, j));
          sum += product;
          absolute += std::fabs(product);
        }
        c[static_cast<std::size_t>(i * n + j)] = sum;
        magnitude[static_cast<std::size_t>(i * n + j)] = absolute;
      }
  }

  // Runs sgemm into a C with padding filled with a sentinel; returns C (ldc-strided).
  std::vector<float> run(const GemmEpilogue& epilogue = {}) const {
    std::vector<float> c(static_cast<std::size_t>(std::max<std::int64_t>(m * ldc, 1)), sentinel);
    sgemm(m, n, k, a.data(), lda, transpose_a, b.data(), ldb, transpose_b, c.data(), ldc, epilogue);
    return c;
  }
  // The same through sgemm_through_openblas.
  std::vector<float> run_through_openblas(const GemmEpilogue& epilogue = {}) const {
    std::vector<float> c(static_cast<std::size_t>(std::max<std::int64_t>(m * ldc, 1)), sentinel);
    sgemm_through_openblas(m, n, k, a.data(), lda, transpose_a, b.data(), ldb, transpose_b, c.data(), ldc, epilogue);
    return c;
  }

  static constexpr float sentinel = -12345.0f;
};

std::string describe(const Case& test) {
  return "m=" + std::to_string(test.m) + " n=" + std::to_string(test.n) + " k=" + std::to_string(test.k) +
         " transpose_a=" + std::to_string(test.transpose_a) + " transpose_b=" + std::to_string(test.transpose_b) +
         " lda=" + std::to_string(test.lda) + " ldb=" + std::to_string(test.ldb) + " ldc=" + std::to_string(test.ldc);
}

// Checks C against the reference within float reassociation error, and that padding is untouched.
void expect_matches_reference(const Case& test, const std::vector<float>& c) {
  std::vector<double> expected, magnitude;
  test.reference(expected, magnitude);
  int failures = 0;
  for (std::int64_t i = 0; i < test.m && failures < 5; ++i) {
    for (std::int64_t j = 0; j < test.ldc && failures < 5; ++j) {
      const float value = c[static_cast<std::size_t>(i * test.ldc + j)];
      if (j >= test.n) {
        if (value != Case::sentinel) {
          ADD_FAILURE() << describe(test) << ": padding written at (" << i << ", " << j << ")";
          ++failures;
        }
        continue;
      }
      const double want = expected[static_cast<std::size_t>(i * test.n + j)];
      // Each of k terms rounds once in float (FMA), plus the adds of K blocks: a few k * eps * sum|ab|.
      const double tolerance = 4.0 * (static_cast<double>(test.k) + 2.0) * 6e-8 *
                                   magnitude[static_cast<std::size_t>(i * test.n + j)] + 1e-30;
      if (!(std::fabs(static_cast<double>(value) - want) <= tolerance)) {
        ADD_FAILURE() << describe(test) << ": C(" << i << ", " << j << ") = " << value << ", want " << want
                      << " +- " << tolerance;
        ++failures;
      }
    }
  }
}

using Shape = std::tuple<std::int64_t, std::int64_t, std::int64_t>;

class GemmShapeTest : public ::testing::TestWithParam<Shape> {};

TEST_P(GemmShapeTest, MatchesFloat64ReferenceForAllTransposes) {
  const auto [m, n, k] = GetParam();
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      const Case test(m, n, k, transpose_a, transpose_b);
      expect_matches_reference(test, test.run());
    }
  }
}

TEST_P(GemmShapeTest, HonorsLeadingDimensionsLargerThanRows) {
  const auto [m, n, k] = GetParam();
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      const Case test(m, n, k, transpose_a, transpose_b, /*padding=*/7);
      expect_matches_reference(test, test.run());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, GemmShapeTest,
                         ::testing::Values(Shape{1, 1, 1}, Shape{17, 33, 129}, Shape{128, 128, 128},
                                           Shape{1000, 37, 513}, Shape{15, 1, 300}, Shape{1, 70, 9},
                                           Shape{29, 65, 1}, Shape{130, 300, 257}));

// The same problem through several K blocks and column panels (and, with a 2 MiB floor on temporaries, more
// than one row panel when C goes to the epilogue only).
TEST(Gemm, LargeProblemWithSeveralPanelsMatchesReference) {
  const Case test(700, 1100, 800, false, false);
  const GemmPlan plan = plan_sgemm(test.m, test.n, test.k);
  EXPECT_GT(plan.column_panels, 1);
  EXPECT_GT(test.k, plan.depth_block);
  expect_matches_reference(test, test.run());
}

TEST(Gemm, ZeroDepthGivesZeros) {
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      const Case test(19, 45, 0, transpose_a, transpose_b, 3);
      const std::vector<float> c = test.run();
      for (std::int64_t i = 0; i < test.m; ++i)
        for (std::int64_t j = 0; j < test.n; ++j) ASSERT_EQ(c[static_cast<std::size_t>(i * test.ldc + j)], 0.0f);
    }
  }
}

TEST(Gemm, EmptyOutputDoesNothing) {
  for (const Shape& shape : {Shape{0, 5, 7}, Shape{5, 0, 7}, Shape{0, 0, 0}}) {
    const auto [m, n, k] = shape;
    EXPECT_EQ(plan_sgemm(m, n, k).block_count, 0);
    int calls = 0;
    GemmEpilogue epilogue;
    epilogue.context = &calls;
    epilogue.function = [](void* context, const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                           std::int64_t, std::int64_t) { ++*static_cast<int*>(context); };
    std::vector<float> a(64, 1.0f), b(64, 1.0f), c(64, Case::sentinel);
    sgemm(m, n, k, a.data(), std::max<std::int64_t>(k, 1), false, b.data(), std::max<std::int64_t>(n, 1), false,
          c.data(), std::max<std::int64_t>(n, 1), epilogue);
    EXPECT_EQ(calls, 0);
    for (float value : c) EXPECT_EQ(value, Case::sentinel);
  }
}

// An epilogue that records, per block, the blocks it saw and the sum and count of the elements of C; with a
// plan, it also checks each block's rows and columns against the plan's numbering.
struct Recorder {
  std::mutex mutex;
  std::vector<int> block_seen;
  std::vector<int> element_seen;  // m x n
  std::vector<double> block_sum;
  std::int64_t n = 0;
  bool bad_block = false;
  const GemmPlan* plan = nullptr;

  explicit Recorder(const GemmPlan& plan_to_check, bool check_geometry = false)
      : block_seen(static_cast<std::size_t>(plan_to_check.block_count), 0),
        element_seen(static_cast<std::size_t>(plan_to_check.m * plan_to_check.n), 0),
        block_sum(static_cast<std::size_t>(plan_to_check.block_count), 0.0),
        n(plan_to_check.n),
        plan(check_geometry ? &plan_to_check : nullptr) {}

  static void record(void* context, const float* tile, std::int64_t ld, std::int64_t row_begin, std::int64_t row_end,
                     std::int64_t column_begin, std::int64_t column_end, std::int64_t block) {
    auto& self = *static_cast<Recorder*>(context);
    double sum = 0;
    for (std::int64_t i = row_begin; i < row_end; ++i)
      for (std::int64_t j = column_begin; j < column_end; ++j)
        sum += static_cast<double>(tile[(i - row_begin) * ld + (j - column_begin)]);
    std::lock_guard lock(self.mutex);
    if (block < 0 || block >= static_cast<std::int64_t>(self.block_seen.size())) {
      self.bad_block = true;
      return;
    }
    if (self.plan) {
      const GemmPlan& plan = *self.plan;
      const std::int64_t strip = block % plan.row_strips, panel = block / plan.row_strips;
      if (row_begin != strip * plan.strip_rows || row_end != std::min(plan.m, (strip + 1) * plan.strip_rows) ||
          column_begin != panel * plan.panel_columns ||
          column_end != std::min(plan.n, (panel + 1) * plan.panel_columns))
        self.bad_block = true;
    }
    self.block_seen[static_cast<std::size_t>(block)] += 1;
    self.block_sum[static_cast<std::size_t>(block)] = sum;
    for (std::int64_t i = row_begin; i < row_end; ++i)
      for (std::int64_t j = column_begin; j < column_end; ++j) self.element_seen[static_cast<std::size_t>(i * self.n + j)] += 1;
  }
};

TEST(GemmEpilogue, SeesEveryElementOnceInNumberedBlocks) {
  for (bool write_c : {true, false}) {
    for (const Shape& shape : {Shape{1000, 1500, 300}, Shape{17, 33, 129}, Shape{1, 1, 1}, Shape{40, 20, 0}}) {
      const auto [m, n, k] = shape;
      const Case test(m, n, k, false, true);
      const GemmPlan plan = plan_sgemm(m, n, k);
      Recorder recorder(plan);
      const GemmEpilogue epilogue{&Recorder::record, &recorder};
      std::vector<float> c;
      if (write_c) {
        c = test.run(epilogue);
      } else {
        sgemm(m, n, k, test.a.data(), test.lda, false, test.b.data(), test.ldb, true, nullptr, 0, epilogue);
      }
      EXPECT_FALSE(recorder.bad_block);
      for (int seen : recorder.block_seen) ASSERT_EQ(seen, 1) << describe(test);
      for (int seen : recorder.element_seen) ASSERT_EQ(seen, 1) << describe(test);
      // The tiles hold C: the total matches the reference total.
      std::vector<double> expected, magnitude;
      test.reference(expected, magnitude);
      double want = 0, bound = 0, got = 0;
      for (std::size_t e = 0; e < expected.size(); ++e) {
        want += expected[e];
        bound += 4.0 * (static_cast<double>(k) + 2.0) * 6e-8 * magnitude[e];
      }
      for (double sum : recorder.block_sum) got += sum;
      EXPECT_NEAR(got, want, bound + 1e-9) << describe(test) << " write_c=" << write_c;
      if (write_c) expect_matches_reference(test, c);
    }
  }
}

TEST(GemmEpilogue, BlocksFollowThePlan) {
  struct Check {
    GemmPlan plan;
    bool ok = true;
    std::mutex mutex;
  } check;
  check.plan = plan_sgemm(1000, 1500, 300);
  GemmEpilogue epilogue;
  epilogue.context = &check;
  epilogue.function = [](void* context, const float*, std::int64_t, std::int64_t row_begin, std::int64_t row_end,
                         std::int64_t column_begin, std::int64_t column_end, std::int64_t block) {
    auto& self = *static_cast<Check*>(context);
    const std::int64_t strip = block % self.plan.row_strips, panel = block / self.plan.row_strips;
    const bool ok = row_begin == strip * self.plan.strip_rows &&
                    row_end == std::min(self.plan.m, (strip + 1) * self.plan.strip_rows) &&
                    column_begin == panel * self.plan.panel_columns &&
                    column_end == std::min(self.plan.n, (panel + 1) * self.plan.panel_columns);
    std::lock_guard lock(self.mutex);
    self.ok = self.ok && ok;
  };
  const Case test(1000, 1500, 300, false, false);
  sgemm(1000, 1500, 300, test.a.data(), test.lda, false, test.b.data(), test.ldb, false, nullptr, 0, epilogue);
  EXPECT_TRUE(check.ok);
}

// Without c, C lives in a panel buffer of a few row panels, or, whole-depth, in each thread's C strip; an
// epilogue that copies the tiles out must see exactly C, bitwise equal to the C that sgemm writes when given
// one (same blocking, same summation order), with one thread or two, and inside a pool job.
void expect_tiles_without_c_equal_the_written_c(std::int64_t m, std::int64_t n, std::int64_t k) {
  const int original = runtime::thread_count();
  for (bool transpose_a : {false, true}) {
    const Case test(m, n, k, transpose_a, false);
    TileCopy copy{std::vector<float>(static_cast<std::size_t>(m * n), Case::sentinel), n};
    const GemmEpilogue epilogue = copy.epilogue();
    const std::vector<float> written = test.run();
    expect_matches_reference(test, written);
    for (int threads : {1, 2}) {
      runtime::set_thread_count(threads);
      std::fill(copy.c.begin(), copy.c.end(), Case::sentinel);
      sgemm(m, n, k, test.a.data(), test.lda, transpose_a, test.b.data(), test.ldb, false, nullptr, 0, epilogue);
      EXPECT_EQ(std::memcmp(copy.c.data(), written.data(), sizeof(float) * copy.c.size()), 0)
          << describe(test) << ", " << threads << " thread(s)";
    }
    std::fill(copy.c.begin(), copy.c.end(), Case::sentinel);
    runtime::parallel_pieces(2, [&](std::int64_t piece, std::int64_t) {
      if (piece == 0)
        sgemm(m, n, k, test.a.data(), test.lda, transpose_a, test.b.data(), test.ldb, false, nullptr, 0, epilogue);
    });
    EXPECT_EQ(std::memcmp(copy.c.data(), written.data(), sizeof(float) * copy.c.size()), 0)
        << describe(test) << ", inside a pool job";
  }
  runtime::set_thread_count(original);
}

// A deep K: whole-depth panels would be narrow, so C-less calls keep row panels.
TEST(GemmEpilogue, TilesWithoutCEqualTheWrittenCInRowPanels) {
  const std::int64_t m = 300, n = 400, k = 2000;
  const GemmPlan plan = plan_sgemm(m, n, k);
  EXPECT_FALSE(plan.whole_depth);
  EXPECT_LT(plan.panel_row_strips, plan.row_strips);  // several row panels
  expect_tiles_without_c_equal_the_written_c(m, n, k);
}

// A shallower K: B's whole depth fits, and is packed once instead of once per row panel.
TEST(GemmEpilogue, TilesWithoutCEqualTheWrittenCWholeDepth) {
  const std::int64_t m = 1000, n = 1500, k = 300;
  EXPECT_TRUE(plan_sgemm(m, n, k).whole_depth);
  EXPECT_TRUE(plan_sgemm(1024, 1024, 512).whole_depth);  // shallow enough for kiln's loops in the JIT
  expect_tiles_without_c_equal_the_written_c(m, n, k);
}

// Inside an InvariantOperands scope naming B's memory (a loop's captured weight), sgemm packs B once and reads that
// packing in later calls: the products are bitwise those packed per call, on every path (C written, C-less row
// panels, C-less whole depth), with B transposed or not, padded, and through several K blocks and column panels.
TEST(GemmInvariantOperands, PackedOnceTheProductsAreBitwiseThoseOfPackingPerCall) {
  struct Shape3 {
    std::int64_t m, n, k;
  };
  for (const Shape3 shape :
       {Shape3{64, 1536, 512}, Shape3{300, 400, 2000}, Shape3{1000, 1500, 300}, Shape3{13, 37, 700}, Shape3{5, 3, 1}}) {
    for (const bool transpose_b : {false, true}) {
      const Case test(shape.m, shape.n, shape.k, false, transpose_b, 3);
      const std::vector<float> packed_per_call = test.run();
      TileCopy copy{std::vector<float>(packed_per_call.size(), Case::sentinel), test.ldc};
      const GemmEpilogue to_copy = copy.epilogue();
      const InvariantOperands scope({std::as_bytes(std::span(test.b))});
      for (int call = 0; call < 2; ++call) {  // the first call packs, the second reads the packing
        EXPECT_EQ(test.run(), packed_per_call) << describe(test) << ", call " << call;
        std::fill(copy.c.begin(), copy.c.end(), Case::sentinel);
        sgemm(test.m, test.n, test.k, test.a.data(), test.lda, false, test.b.data(), test.ldb, transpose_b, nullptr, 0,
              to_copy);
        EXPECT_EQ(copy.c, packed_per_call) << describe(test) << ", without C, call " << call;
      }
    }
  }
}

// A B outside the scope's memory, or only partly inside it, is packed per call as usual (its memory may change).
TEST(GemmInvariantOperands, OnlyOperandsWhollyInsideTheScopeAreKept) {
  const Case test(16, 40, 24, false, false);
  const std::vector<float> expected = test.run();
  const std::span<const float> b(test.b);
  const InvariantOperands outside({std::as_bytes(b.subspan(0, b.size() / 2))});
  EXPECT_FALSE(outside.contains(test.b.data(), test.b.size() * sizeof(float)));
  EXPECT_TRUE(outside.contains(test.b.data(), b.size() / 2 * sizeof(float)));
  EXPECT_EQ(test.run(), expected);
  EXPECT_EQ(InvariantOperands::current(), &outside);
  {
    const InvariantOperands inner({std::as_bytes(b)});
    EXPECT_EQ(InvariantOperands::current(), &inner);
  }
  EXPECT_EQ(InvariantOperands::current(), &outside);
}

// The summation order must not depend on the thread count: bitwise identical results.
TEST(Gemm, ResultsAreIdenticalForOneAndTwoThreads) {
  const int original = runtime::thread_count();
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      // Six K blocks: more than there are packed-B buffers, so buffers are reused while threads run ahead.
      const Case test(301, 517, 1500, transpose_a, transpose_b);
      runtime::set_thread_count(1);
      const std::vector<float> one = test.run();
      runtime::set_thread_count(2);
      const std::vector<float> two = test.run();
      EXPECT_EQ(std::memcmp(one.data(), two.data(), sizeof(float) * one.size()), 0) << describe(test);
    }
  }
  runtime::set_thread_count(original);
}

// Called from inside a pool job, parallel_pieces runs the pieces one after another in the caller: the
// pieces must not wait for each other, and the result must not change.
TEST(Gemm, RunsInsideAParallelJob) {
  const Case test(200, 300, 1100, false, false);
  const std::vector<float> expected = test.run();
  std::vector<float> nested;
  runtime::parallel_pieces(2, [&](std::int64_t piece, std::int64_t) {
    if (piece == 0) nested = test.run();
  });
  EXPECT_EQ(std::memcmp(nested.data(), expected.data(), sizeof(float) * expected.size()), 0);
}

// Without c, temporaries stay a small fraction of C for large problems.
TEST(Gemm, TemporariesStayBelowAFifthOfTheOutput) {
  const std::int64_t m = 2048, n = 2048, k = 64;
  const Case test(m, n, k, false, false);
  const GemmEpilogue epilogue{[](void*, const float*, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                 std::int64_t, std::int64_t) {},
                              nullptr};
  reset_peak_memory();
  const std::int64_t before = memory_statistics().bytes_in_use;
  sgemm(m, n, k, test.a.data(), test.lda, false, test.b.data(), test.ldb, false, nullptr, 0, epilogue);
  const std::int64_t peak = memory_statistics().peak_bytes_in_use - before;
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, m * n * 4 / 5);
}

// ---- products with few rows (gemm_short.h) --------------------------------------------------------------------

// A product of at most kShortRows rows reads B in place a group of rows at a time (or a transposed B a tile at a
// time) instead of through sgemm's shared packed blocks: every row must still have the bits of the same row of a
// taller product (the same K blocks, each summed in order), for every transpose, with C written or only passed to
// the epilogue, with one thread or two, and with B packed once for a loop (InvariantOperands).
TEST(GemmShort, RowsHaveTheBitsOfTheSameRowsOfATallerProduct) {
  const int original = runtime::thread_count();
  struct Size {
    std::int64_t n, k;
  };
  // One column tile; chunks of several panels with a last partial tile and two K blocks; three K blocks; no depth.
  for (const Size size : {Size{16, 1}, Size{1000, 300}, Size{2049, 700}, Size{37, 0}}) {
    for (const bool transpose_a : {false, true}) {
      for (const bool transpose_b : {false, true}) {
        const Case tall(40, size.n, size.k, transpose_a, transpose_b, 3);
        const std::vector<float> tall_c = tall.run();
        expect_matches_reference(tall, tall_c);
        for (const std::int64_t m : {1, 2, 5, 6, 7, 12, 15, 16}) {
          const std::string label = describe(tall) + ", first " + std::to_string(m) + " rows";
          const auto rows = static_cast<std::size_t>(m * tall.ldc);
          TileCopy copy{std::vector<float>(rows, Case::sentinel), tall.ldc};
          const GemmEpilogue to_copy = copy.epilogue();
          auto run = [&](float* c, const GemmEpilogue& epilogue) {
            sgemm(m, tall.n, tall.k, tall.a.data(), tall.lda, transpose_a, tall.b.data(), tall.ldb, transpose_b, c,
                  tall.ldc, epilogue);
          };
          for (const int threads : {1, 2}) {
            runtime::set_thread_count(threads);
            std::vector<float> c(rows, Case::sentinel);
            run(c.data(), {});
            EXPECT_EQ(std::memcmp(c.data(), tall_c.data(), sizeof(float) * rows), 0) << label << ", " << threads;
            std::fill(copy.c.begin(), copy.c.end(), Case::sentinel);
            run(nullptr, to_copy);
            EXPECT_EQ(std::memcmp(copy.c.data(), tall_c.data(), sizeof(float) * rows), 0)
                << label << ", without C, " << threads;
          }
          const InvariantOperands scope({std::as_bytes(std::span(tall.b))});
          for (int call = 0; call < 2; ++call) {  // the first call packs B, the second reads the packing
            std::fill(copy.c.begin(), copy.c.end(), Case::sentinel);
            run(nullptr, to_copy);
            EXPECT_EQ(std::memcmp(copy.c.data(), tall_c.data(), sizeof(float) * rows), 0)
                << label << ", B packed for a loop, call " << call;
          }
        }
      }
    }
  }
  runtime::set_thread_count(original);
  // Products so deep that A packed whole would take more than 16 MiB go through sgemm's own loops instead.
  EXPECT_TRUE(gemm_detail::takes_short_product(plan_sgemm(15, 4096, 4096)));
  EXPECT_FALSE(gemm_detail::takes_short_product(plan_sgemm(17, 4096, 4096)));
  EXPECT_FALSE(gemm_detail::takes_short_product(plan_sgemm(4, 16, std::int64_t{1} << 22)));
}

// ---- large products through OpenBLAS ------------------------------------------------------------------------

TEST(GemmThroughOpenBlas, IsPreferredForDeepProductsWithWideOutputsAndForNarrowProducts) {
  EXPECT_FALSE(prefers_openblas(8192, 8192, 512));   // shallow: the fused epilogue saves more
  EXPECT_FALSE(prefers_openblas(1024, 1024, 767));
  EXPECT_FALSE(prefers_openblas(64, 64, 1 << 20));   // deep but a small output: kiln's loops were 1.1x faster
  EXPECT_FALSE(prefers_openblas(255, 256, 1024));
  EXPECT_TRUE(prefers_openblas(256, 256, 1024));  // the fused loops' narrow panels: 0.75-0.83x
  EXPECT_TRUE(prefers_openblas(768, 768, 768));
  EXPECT_TRUE(prefers_openblas(1024, 1024, 1024));  // seed-1024
  EXPECT_TRUE(prefers_openblas(256, 256, 1 << 16));
  EXPECT_TRUE(prefers_openblas(2048, 2048, 2048));  // `make demo`
  EXPECT_TRUE(prefers_openblas(8192, 8192, 8192));  // the seed article's size
  // Narrow products at any depth: sgemm's packing of the wide operand outweighs its few products.
  EXPECT_TRUE(prefers_openblas(2048, 1, 2048));  // a matrix times a vector
  EXPECT_TRUE(prefers_openblas(16, 2048, 2048));
  EXPECT_TRUE(prefers_openblas(2048, 16, 64));
  // Except with fewer than 16 rows, where sgemm reads B in place (gemm_short.h).
  EXPECT_FALSE(prefers_openblas(4, 2048, 2048));
  EXPECT_FALSE(prefers_openblas(15, 4096, 4096));
  EXPECT_FALSE(prefers_openblas(1, 2048, 2048));
  EXPECT_FALSE(prefers_openblas(2048, 17, 512));
  EXPECT_FALSE(prefers_openblas(32, 2048, 512));  // at par there
}

// The same contract as sgemm: C within float reassociation of the float64 reference, padding untouched, and
// every block of the plan passed to the epilogue once with its rows and columns, whether C is written in one
// call or, without c, a panel of rows at a time (one strip, five strips, the default: one panel here).
TEST(GemmThroughOpenBlas, MatchesTheReferenceAndPassesEveryBlockOnce) {
  for (const Shape& shape : {Shape{1000, 1500, 300}, Shape{17, 33, 129}, Shape{40, 20, 0}, Shape{1, 1, 1}}) {
    for (bool transpose_a : {false, true}) {
      for (bool transpose_b : {false, true}) {
        const auto [m, n, k] = shape;
        const Case test(m, n, k, transpose_a, transpose_b, /*padding=*/3);
        const GemmPlan plan = plan_sgemm(m, n, k);
        Recorder written(plan, /*check_geometry=*/true);
        const std::vector<float> c = test.run_through_openblas({&Recorder::record, &written});
        expect_matches_reference(test, c);
        EXPECT_FALSE(written.bad_block) << describe(test);
        for (int seen : written.block_seen) ASSERT_EQ(seen, 1) << describe(test);
        for (int seen : written.element_seen) ASSERT_EQ(seen, 1) << describe(test);
        for (std::int64_t panel_rows : {plan.strip_rows, 5 * plan.strip_rows, std::int64_t{0}}) {
          Recorder panels(plan, /*check_geometry=*/true);
          sgemm_through_openblas(m, n, k, test.a.data(), test.lda, transpose_a, test.b.data(), test.ldb, transpose_b,
                                 nullptr, 0, {&Recorder::record, &panels}, panel_rows);
          const std::string where = describe(test) + " panel_rows=" + std::to_string(panel_rows);
          EXPECT_FALSE(panels.bad_block) << where;
          for (int seen : panels.block_seen) ASSERT_EQ(seen, 1) << where;
          for (int seen : panels.element_seen) ASSERT_EQ(seen, 1) << where;
          // Each block holds the same products as the written C's (OpenBLAS may sum a panel's rows with another
          // kernel than the whole C's: within reassociation, not bitwise).
          for (std::size_t block = 0; block < panels.block_sum.size(); ++block)
            EXPECT_NEAR(panels.block_sum[block], written.block_sum[block],
                        1e-5 * (std::fabs(written.block_sum[block]) + static_cast<double>(k) + 1.0))
                << where << " block " << block;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::kernels::cpu
