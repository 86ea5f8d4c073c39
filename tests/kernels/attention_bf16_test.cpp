// The bf16 attention driver (kernels/cpu/attention_bf16.cpp, AMX tiles) against the unfused computation it
// replaces: gemm_bf16's scores, the same row function over them, and gemm_bf16's product of the bf16
// probabilities, rounded once. The driver promises the same sums in the same order, so the two agree to the bit,
// on sizes that fill no tile, every transpose, operands shared by the batch, zero sizes and one or two threads.

#include "kernels/cpu/attention.h"

#include "core/half_precision_bits.h"
#include "kernels/cpu/gemm_bf16.h"
#include "runtime/parallel.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::random_bf16_bits;

std::uint16_t round_bf16(float x) { return half_bits::bf16_from_f32(std::bit_cast<std::uint32_t>(x)); }

// p = bf16(s / 4 + (row % 5) / 8): a row numbered wrongly across the batch shows, and so do scores that were
// rounded before the row function saw them (s / 4 keeps bits a bf16 s would not have).
void quarter_and_mark(void* context, std::int64_t row_begin, std::int64_t row_end, const float* scores, void* strip,
                      std::int64_t ld, void*) {
  const std::int64_t n = *static_cast<const std::int64_t*>(context);
  auto* probabilities = static_cast<std::uint16_t*>(strip);
  for (std::int64_t row = row_begin; row < row_end; ++row)
    for (std::int64_t j = 0; j < n; ++j)
      probabilities[(row - row_begin) * ld + j] =
          round_bf16(scores[(row - row_begin) * ld + j] * 0.25f + static_cast<float>(row % 5) * 0.125f);
}

struct Case {
  std::int64_t batch, m, n, k, d;
  bool transpose_a = false, transpose_b = false, transpose_c = false;
  bool shared_b = false, shared_c = false;
  std::vector<std::uint16_t> a, b, c;

  Case(std::int64_t batch_, std::int64_t m_, std::int64_t n_, std::int64_t k_, std::int64_t d_)
      : batch(batch_), m(m_), n(n_), k(k_), d(d_) {}
  Case& transposes(bool ta, bool tb, bool tc) {
    transpose_a = ta;
    transpose_b = tb;
    transpose_c = tc;
    return *this;
  }
  Case& shared(bool sb, bool sc) {
    shared_b = sb;
    shared_c = sc;
    return *this;
  }
  Case& fill() {
    a = random_bf16_bits(batch * m * k, 21 + static_cast<std::uint64_t>(m + k));
    b = random_bf16_bits((shared_b ? 1 : batch) * k * n, 22 + static_cast<std::uint64_t>(n + k));
    c = random_bf16_bits((shared_c ? 1 : batch) * n * d, 23 + static_cast<std::uint64_t>(n + d));
    return *this;
  }

  std::vector<std::uint16_t> fused() const {
    AttentionProblem problem;
    problem.batch = batch;
    problem.m = m;
    problem.n = n;
    problem.k = k;
    problem.d = d;
    problem.bf16 = true;
    problem.a = a.data();
    problem.a_batch_stride = m * k;
    problem.transpose_a = transpose_a;
    problem.b = b.data();
    problem.b_batch_stride = shared_b ? 0 : k * n;
    problem.transpose_b = transpose_b;
    problem.c = c.data();
    problem.c_batch_stride = shared_c ? 0 : n * d;
    problem.transpose_c = transpose_c;
    std::vector<std::uint16_t> out(static_cast<std::size_t>(batch * m * d), 0x7FC1);  // a NaN where nothing wrote
    problem.out = out.data();
    std::int64_t row_length = n;
    attention(problem, quarter_and_mark, &row_length);
    return out;
  }

  // The same computation unfused, through gemm_bf16 as the standard executor's bf16 matmuls run it.
  std::vector<std::uint16_t> unfused() const {
    std::vector<std::uint16_t> out(static_cast<std::size_t>(batch * m * d));
    for (std::int64_t item = 0; item < batch; ++item) {
      std::vector<float> scores(static_cast<std::size_t>(m * n), 0.0f);
      gemm_bf16(m, n, k, a.data() + item * m * k, transpose_a ? m : k, transpose_a,
                b.data() + (shared_b ? 0 : item * k * n), transpose_b ? k : n, transpose_b, scores.data(), n);
      if (k == 0) std::fill(scores.begin(), scores.end(), 0.0f);
      std::vector<std::uint16_t> probabilities(static_cast<std::size_t>(m * n));
      std::int64_t row_length = n;
      quarter_and_mark(&row_length, item * m, item * m + m, scores.data(), probabilities.data(), n, nullptr);
      std::vector<float> sums(static_cast<std::size_t>(m * d), 0.0f);
      gemm_bf16(m, d, n, probabilities.data(), n, false, c.data() + (shared_c ? 0 : item * n * d), transpose_c ? n : d,
                transpose_c, sums.data(), d);
      if (n == 0) std::fill(sums.begin(), sums.end(), 0.0f);
      for (std::int64_t i = 0; i < m * d; ++i)
        out[static_cast<std::size_t>(item * m * d + i)] = round_bf16(sums[static_cast<std::size_t>(i)]);
    }
    return out;
  }

  std::string describe() const {
    return "batch " + std::to_string(batch) + ", m " + std::to_string(m) + ", n " + std::to_string(n) + ", k " +
           std::to_string(k) + ", d " + std::to_string(d) + ", transposes " + std::to_string(transpose_a) +
           std::to_string(transpose_b) + std::to_string(transpose_c) + (shared_b ? ", shared b" : "") +
           (shared_c ? ", shared c" : "");
  }
};

void expect_bitwise(const Case& test) {
  const std::vector<std::uint16_t> fused = test.fused(), unfused = test.unfused();
  int failures = 0;
  for (std::size_t i = 0; i < fused.size(); ++i)
    if (fused[i] != unfused[i] && failures++ < 5)
      ADD_FAILURE() << test.describe() << ": out[" << i << "] = 0x" << std::hex << fused[i] << ", unfused 0x"
                    << unfused[i] << std::dec;
}

TEST(AttentionBf16, AgreesToTheBitWithTheUnfusedProducts) {
  if (!has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or the kernel refused the tile state)";
  const int original = runtime::thread_count();
  for (const int threads : {1, 2}) {
    runtime::set_thread_count(threads);
    // Odd sizes (no tile filled exactly), every transpose.
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool tc : {false, true}) expect_bitwise(Case(3, 45, 50, 20, 24).transposes(ta, tb, tc).fill());
    // One of everything; a single strip row; k past one chunk and odd; n over many chunks at a 1024 multiple
    // (the probabilities' strip then ld = 1056 apart); several strips of one item shared by the threads.
    expect_bitwise(Case(1, 1, 1, 1, 1).fill());
    expect_bitwise(Case(2, 33, 97, 67, 65).fill());
    expect_bitwise(Case(2, 40, 1024, 64, 64).transposes(false, true, false).fill());
    expect_bitwise(Case(1, 200, 70, 32, 33).fill());
    expect_bitwise(Case(3, 29, 45, 16, 20).transposes(false, true, false).shared(true, true).fill());
  }
  runtime::set_thread_count(original);
}

TEST(AttentionBf16, ZeroSizes) {
  if (!has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 on this CPU (or the kernel refused the tile state)";
  for (Case test :
       {Case(2, 5, 0, 8, 6), Case(2, 5, 9, 0, 6), Case(2, 5, 9, 8, 0), Case(2, 0, 9, 8, 6), Case(0, 5, 9, 8, 6)})
    expect_bitwise(test.fill());
}

}  // namespace
}  // namespace kiln::kernels::cpu
