// The attention driver (kernels/cpu/attention.h) against a float64 reference: both products, every transpose,
// shared operands, odd and zero sizes, several K blocks, and results that do not depend on the thread count.

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_microkernel.h"
#include "kernels/cpu/gemm_short.h"

#include "runtime/parallel.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

constexpr double kEpsilon = 0x1p-24;

// The row function under test: p = s / 2 + (row % 7) / 8 -- exact in f32 up to the halving, and it shows a
// row numbered wrongly across the batch. `context` points to n, the row length.
void halve_and_mark(void* context, std::int64_t row_begin, std::int64_t row_end, const float* scores, void* strip,
                    std::int64_t ld, void*) {
  const std::int64_t n = *static_cast<const std::int64_t*>(context);
  float* probabilities = static_cast<float*>(strip);
  for (std::int64_t row = row_begin; row < row_end; ++row)
    for (std::int64_t j = 0; j < n; ++j)
      probabilities[(row - row_begin) * ld + j] =
          scores[(row - row_begin) * ld + j] * 0.5f + static_cast<float>(row % 7) * 0.125f;
}

struct Case {
  std::int64_t batch, m, n, k, d;
  bool transpose_a, transpose_b, transpose_c;
  bool shared_b = false, shared_c = false;  // one matrix for every batch item
  std::vector<float> a, b, c;

  Case(std::int64_t batch_, std::int64_t m_, std::int64_t n_, std::int64_t k_, std::int64_t d_, bool ta = false,
       bool tb = false, bool tc = false, bool sb = false, bool sc = false)
      : batch(batch_),
        m(m_),
        n(n_),
        k(k_),
        d(d_),
        transpose_a(ta),
        transpose_b(tb),
        transpose_c(tc),
        shared_b(sb),
        shared_c(sc) {
    a = testing::random_floats(batch * m * k, 11 + static_cast<std::uint64_t>(m + k));
    b = testing::random_floats((shared_b ? 1 : batch) * k * n, 12 + static_cast<std::uint64_t>(n + k));
    c = testing::random_floats((shared_c ? 1 : batch) * n * d, 13 + static_cast<std::uint64_t>(n + d));
  }

  AttentionProblem problem(float* out) const {
    AttentionProblem problem;
    problem.batch = batch;
    problem.m = m;
    problem.n = n;
    problem.k = k;
    problem.d = d;
    problem.a = a.data();
    problem.a_batch_stride = m * k;
    problem.transpose_a = transpose_a;
    problem.b = b.data();
    problem.b_batch_stride = shared_b ? 0 : k * n;
    problem.transpose_b = transpose_b;
    problem.c = c.data();
    problem.c_batch_stride = shared_c ? 0 : n * d;
    problem.transpose_c = transpose_c;
    problem.out = out;
    return problem;
  }

  std::vector<float> run() const {
    std::vector<float> out(static_cast<std::size_t>(batch * m * d), std::nanf(""));
    std::int64_t row_length = n;
    attention(problem(out.data()), halve_and_mark, &row_length);
    return out;
  }

  double a_at(std::int64_t item, std::int64_t i, std::int64_t p) const {
    const float* x = a.data() + item * m * k;
    return transpose_a ? x[p * m + i] : x[i * k + p];
  }
  double b_at(std::int64_t item, std::int64_t p, std::int64_t j) const {
    const float* x = b.data() + (shared_b ? 0 : item * k * n);
    return transpose_b ? x[j * k + p] : x[p * n + j];
  }
  double c_at(std::int64_t item, std::int64_t j, std::int64_t q) const {
    const float* x = c.data() + (shared_c ? 0 : item * n * d);
    return transpose_c ? x[q * n + j] : x[j * d + q];
  }

  // Checks `out` element by element against the float64 result, within a bound on f32 rounding of both
  // products (gamma_k times the sum of |terms| for the scores, carried through the row function and the
  // second product).
  void expect_matches_reference(const std::vector<float>& out, const std::string& label) const {
    int failures = 0;
    for (std::int64_t item = 0; item < batch; ++item)
      for (std::int64_t i = 0; i < m; ++i) {
        std::vector<double> p(static_cast<std::size_t>(n)), p_error(static_cast<std::size_t>(n));
        for (std::int64_t j = 0; j < n; ++j) {
          double s = 0, magnitude = 0;
          for (std::int64_t t = 0; t < k; ++t) {
            s += a_at(item, i, t) * b_at(item, t, j);
            magnitude += std::fabs(a_at(item, i, t) * b_at(item, t, j));
          }
          const double mark = static_cast<double>((item * m + i) % 7) * 0.125;
          p[static_cast<std::size_t>(j)] = s * 0.5 + mark;
          p_error[static_cast<std::size_t>(j)] =
              (static_cast<double>(k) + 2) * kEpsilon * magnitude + 2 * kEpsilon * (std::fabs(s) + mark);
        }
        for (std::int64_t q = 0; q < d; ++q) {
          double expected = 0, bound = 0;
          for (std::int64_t j = 0; j < n; ++j) {
            const double term = p[static_cast<std::size_t>(j)] * c_at(item, j, q);
            expected += term;
            bound += (static_cast<double>(n) + 2) * kEpsilon * std::fabs(term) +
                     p_error[static_cast<std::size_t>(j)] * std::fabs(c_at(item, j, q));
          }
          const float actual = out[static_cast<std::size_t>((item * m + i) * d + q)];
          if (!(std::fabs(actual - expected) <= bound + 1e-30) && failures++ < 5)
            ADD_FAILURE() << label << ": out[" << item << ", " << i << ", " << q << "] = " << actual << ", expected "
                          << expected << " +- " << bound;
        }
      }
  }

  std::string describe() const {
    return "batch " + std::to_string(batch) + ", m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
           std::to_string(k) + ", d " + std::to_string(d) + ", transposes " + std::to_string(transpose_a) +
           std::to_string(transpose_b) + std::to_string(transpose_c) + (shared_b ? ", shared b" : "") +
           (shared_c ? ", shared c" : "");
  }
};

TEST(Attention, MatchesFloat64ReferenceForEveryTranspose) {
  // Odd sizes: m not a multiple of the 14-row strip, n and d not multiples of the 32-column micro-panel.
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool tc : {false, true}) {
        const Case test(3, 37, 45, 19, 35, ta, tb, tc);
        test.expect_matches_reference(test.run(), test.describe());
      }
}

TEST(Attention, SeveralDepthBlocksInBothProducts) {
  // k = 300 and n = 600: two K blocks of the first product and of the second.
  const Case test(2, 30, 600, 300, 40, false, true, false);
  test.expect_matches_reference(test.run(), test.describe());
}

TEST(Attention, OperandsSharedByTheBatch) {
  const Case test(3, 29, 45, 16, 20, false, true, false, true, true);
  test.expect_matches_reference(test.run(), test.describe());
}

TEST(Attention, OneItemSplitIntoUnitsOfStrips) {
  // One item with many strips: the threads share it in groups of strips, each packing B and C itself.
  const Case test(1, 200, 70, 24, 33);
  test.expect_matches_reference(test.run(), test.describe());
}

// An item of more than kAttentionFewRows rows and at most kShortRows (a few strips) with B and C of its own reads
// them once for all its rows, a micro-panel or a K block at a time: the same sums as packing them whole, which a B and
// C shared by the batch still are (with one item, the same matrices either way), for every transpose, through several
// K blocks of both products, in one strip, in a whole strip and a part of one, and in the most rows read so.
TEST(Attention, FewStripItemsReadOnceWithTheSameSums) {
  // Enough items that each thread takes whole items (all their strips at once), each item's B and C a copy of the
  // shared ones.
  const std::int64_t batch = 4 * runtime::thread_count() + 1;
  for (const std::int64_t m : {kAttentionFewRows + 1, std::int64_t{gemm_detail::kMr},
                               std::int64_t{gemm_detail::kMr} + 1, gemm_detail::kShortRows})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool tc : {false, true}) {
          const Case shared(batch, m, 600, 300, 40, ta, tb, tc, true, true);
          Case own(batch, m, 600, 300, 40, ta, tb, tc);
          own.a = shared.a;
          own.b.clear();
          own.c.clear();
          for (std::int64_t item = 0; item < batch; ++item) {
            own.b.insert(own.b.end(), shared.b.begin(), shared.b.end());
            own.c.insert(own.c.end(), shared.c.begin(), shared.c.end());
          }
          const std::vector<float> read_once = own.run();
          own.expect_matches_reference(read_once, own.describe());
          const std::vector<float> packed_whole = shared.run();
          EXPECT_EQ(std::memcmp(read_once.data(), packed_whole.data(), sizeof(float) * packed_whole.size()), 0)
              << own.describe();
        }
  // One item, its strips shared out among the threads.
  const Case item(1, gemm_detail::kShortRows, 300, 70, 35, false, true, false);
  item.expect_matches_reference(item.run(), item.describe());
  // Several items, threads taking them in turn.
  const Case items(7, 2, 45, 19, 35, false, true, false);
  items.expect_matches_reference(items.run(), items.describe());
}

// Items of a few rows (a decoder's step: a query per head, or the queries sharing a key-value head) are
// matrix-vector products read in place: dot products along stored rows, or stored rows scaled and added. Sizes
// around their steps: depths below, at and past a vector with a partial one left, key counts not a multiple of the
// four rows a dot pass takes, outputs of a whole register block (8 vectors), single vectors and a partial one.
TEST(Attention, FewRowItemsAreMatrixVectorProducts) {
  const std::int64_t lanes = gemm_detail::kLanes;
  for (const std::int64_t m : {std::int64_t{1}, std::int64_t{2}, kAttentionFewRows})
    for (const std::int64_t k : {std::int64_t{1}, lanes - 1, lanes, 2 * lanes + 3})
      for (const std::int64_t n : {std::int64_t{1}, std::int64_t{6}, 3 * lanes + 5})
        for (const std::int64_t d : {std::int64_t{3}, 8 * lanes + lanes + 5})
          for (bool ta : {false, true})
            for (bool tb : {false, true})
              for (bool tc : {false, true}) {
                const Case test(2, m, n, k, d, ta, tb, tc);
                test.expect_matches_reference(test.run(), test.describe());
              }
}

// Each row of such an item has the bits it has alone, through the chunks in which the rows share the keys and values
// (several of both products here), whatever the threads or the sharing of the operands.
TEST(Attention, FewRowItemsGiveEachRowItsSumsAlone) {
  for (bool tb : {false, true})
    for (bool tc : {false, true}) {
      const Case rows(1, kAttentionFewRows, 2 * gemm_detail::kKcTarget + 7, 64, 40, true, tb, tc);
      const std::vector<float> together = rows.run();
      rows.expect_matches_reference(together, rows.describe());
      // Row i alone: item i of a batch of one-row items (the row function marks row i alike) sharing the keys and
      // values.
      Case alone(kAttentionFewRows, 1, rows.n, rows.k, rows.d, false, tb, tc, true, true);
      for (std::int64_t i = 0; i < rows.m; ++i)
        for (std::int64_t p = 0; p < rows.k; ++p)
          alone.a[static_cast<std::size_t>(i * rows.k + p)] = static_cast<float>(rows.a_at(0, i, p));
      alone.b = rows.b;
      alone.c = rows.c;
      EXPECT_EQ(std::memcmp(together.data(), alone.run().data(), sizeof(float) * together.size()), 0)
          << rows.describe();
      const int original = runtime::thread_count();
      runtime::set_thread_count(1);
      const std::vector<float> one_thread = rows.run();
      runtime::set_thread_count(original);
      EXPECT_EQ(std::memcmp(together.data(), one_thread.data(), sizeof(float) * together.size()), 0);
    }
}

TEST(Attention, ZeroSizes) {
  for (const Case& test : {Case(2, 5, 0, 8, 6), Case(2, 5, 9, 0, 6), Case(2, 5, 9, 8, 0), Case(2, 0, 9, 8, 6),
                           Case(0, 5, 9, 8, 6), Case(2, 1, 0, 8, 6), Case(2, 1, 9, 0, 6), Case(2, 1, 9, 8, 0)})
    test.expect_matches_reference(test.run(), test.describe());
}

// Every strip is computed in one fixed order: bitwise the same with one thread, two, or inside a pool job
// (where parallel_pieces runs the pieces one after another).
TEST(Attention, ResultsDoNotDependOnThreads) {
  const int original = runtime::thread_count();
  const Case test(5, 61, 300, 270, 40, true, false, true);
  runtime::set_thread_count(1);
  const std::vector<float> one = test.run();
  runtime::set_thread_count(2);
  const std::vector<float> two = test.run();
  std::vector<float> nested;
  runtime::parallel_pieces(2, [&](std::int64_t piece, std::int64_t) {
    if (piece == 0) nested = test.run();
  });
  runtime::set_thread_count(original);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), sizeof(float) * one.size()), 0);
  EXPECT_EQ(std::memcmp(one.data(), nested.data(), sizeof(float) * one.size()), 0);
  test.expect_matches_reference(one, test.describe());
}

}  // namespace
}  // namespace kiln::kernels::cpu
