// sgemm_gathered (kernels/cpu/gemm.h): A gathered part by part while it is packed gives bitwise the product of
// sgemm on the same A written out, with or without C, for one and two threads; rows outside a part's bounds read
// zeros (a convolution's padding).

#include "kernels/cpu/gemm.h"

#include "kernels/cpu/gemm_packing.h"
#include "runtime/parallel.h"
#include "support/test_support.h"
#include "support/tile_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using testing::TileCopy;

// A convolution's windows as gathered rows: an NHWC image, a window of size x size taps with `stride` and
// `padding` on both spatial axes; each tap is one part (its channels), the taps row by row.
struct Windows {
  std::int64_t batch, height, width, channels, size, stride, padding;
  std::int64_t out_height, out_width;
  std::vector<float> image;
  std::vector<GatheredPart> parts;
  GatheredRows rows;

  Windows(std::int64_t batch_, std::int64_t height_, std::int64_t width_, std::int64_t channels_, std::int64_t size_,
          std::int64_t stride_, std::int64_t padding_)
      : batch(batch_),
        height(height_),
        width(width_),
        channels(channels_),
        size(size_),
        stride(stride_),
        padding(padding_),
        out_height((height + 2 * padding - size) / stride + 1),
        out_width((width + 2 * padding - size) / stride + 1),
        image(testing::random_floats(batch * height * width * channels, 77 + static_cast<std::uint64_t>(channels))) {
    for (std::int64_t tap_row = 0; tap_row < size; ++tap_row)
      for (std::int64_t tap_column = 0; tap_column < size; ++tap_column) parts.push_back(tap(tap_row, tap_column));
    rows.axes = 3;
    rows.extents[0] = batch;
    rows.extents[1] = out_height;
    rows.extents[2] = out_width;
    rows.part_count = static_cast<int>(parts.size());
    rows.parts = parts.data();
  }

  std::int64_t m() const { return batch * out_height * out_width; }
  std::int64_t k() const { return size * size * channels; }

  // Output (n, y, x) reads the image at row y * stride + tap_row - padding, column x * stride + tap_column - padding.
  GatheredPart tap(std::int64_t tap_row, std::int64_t tap_column) const {
    GatheredPart part;
    part.source = image.data();
    part.width = channels;
    part.offset = ((tap_row - padding) * width + (tap_column - padding)) * channels;
    part.strides[0] = height * width * channels;
    part.strides[1] = stride * width * channels;
    part.strides[2] = stride * channels;
    part.upper[0] = batch;
    bounds(tap_row - padding, height, out_height, part.lower[1], part.upper[1]);
    bounds(tap_column - padding, width, out_width, part.lower[2], part.upper[2]);
    return part;
  }
  // The output coordinates [lower, upper) whose tap (coordinate * stride + offset) is inside [0, extent).
  void bounds(std::int64_t offset, std::int64_t extent, std::int64_t outputs, std::int64_t& lower,
              std::int64_t& upper) const {
    lower = 0;
    while (lower < outputs && lower * stride + offset < 0) ++lower;
    upper = lower;
    while (upper < outputs && upper * stride + offset < extent) ++upper;
  }

  // im2col written out, straight from the image (not from the parts).
  std::vector<float> written() const {
    std::vector<float> a(static_cast<std::size_t>(m() * k()), 0.0f);
    for (std::int64_t n = 0; n < batch; ++n)
      for (std::int64_t y = 0; y < out_height; ++y)
        for (std::int64_t x = 0; x < out_width; ++x)
          for (std::int64_t tap_row = 0; tap_row < size; ++tap_row)
            for (std::int64_t tap_column = 0; tap_column < size; ++tap_column) {
              const std::int64_t source_row = y * stride + tap_row - padding;
              const std::int64_t source_column = x * stride + tap_column - padding;
              if (source_row < 0 || source_row >= height || source_column < 0 || source_column >= width) continue;
              const std::int64_t row = (n * out_height + y) * out_width + x;
              const std::int64_t column = (tap_row * size + tap_column) * channels;
              for (std::int64_t c = 0; c < channels; ++c)
                a[static_cast<std::size_t>(row * k() + column + c)] =
                    image[static_cast<std::size_t>(((n * height + source_row) * width + source_column) * channels + c)];
            }
    return a;
  }

  std::string describe(std::int64_t n) const {
    return "batch " + std::to_string(batch) + ", " + std::to_string(height) + "x" + std::to_string(width) + "x" +
           std::to_string(channels) + " image, " + std::to_string(size) + "x" + std::to_string(size) +
           " window, stride " + std::to_string(stride) + ", padding " + std::to_string(padding) + ", " +
           std::to_string(n) + " outputs";
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// The written-out windows as GatheredRows of one part: a plain m x k matrix, every row inside.
GatheredRows as_one_part(const std::vector<float>& a, std::int64_t m, std::int64_t k, GatheredPart& part) {
  part = GatheredPart{};
  part.source = a.data();
  part.width = k;
  part.strides[0] = k;
  part.upper[0] = m;
  GatheredRows rows;
  rows.axes = 1;
  rows.extents[0] = m;
  rows.part_count = 1;
  rows.parts = &part;
  return rows;
}

// sgemm_gathered against sgemm on the written-out windows, writing C and through the epilogue alone: bitwise,
// except without C where the windows are read in place in whole-depth order (deeper K blocks: in_place_depth_block).
// There it is checked bitwise against the written-out matrix read in place as one part -- the same blocking, only
// the windows' runs differ -- and against sgemm within the rounding of a float sum of k products.
void expect_same_as_written(const Windows& windows, std::int64_t n) {
  const std::int64_t m = windows.m(), k = windows.k();
  const std::vector<float> a = windows.written();
  const std::vector<float> b = testing::random_floats(k * n, 5 + static_cast<std::uint64_t>(n));
  std::vector<float> expected(static_cast<std::size_t>(m * n), -1.0f);
  sgemm(m, n, k, a.data(), k, false, b.data(), n, false, expected.data(), n, {});
  std::vector<float> expected_without_c = expected;
  const bool deeper_blocks = gemm_detail::reads_gathered_in_place(windows.rows) && plan_sgemm(m, n, k).whole_depth;
  if (deeper_blocks) {
    GatheredPart part;
    const GatheredRows matrix = as_one_part(a, m, k, part);
    TileCopy copy{std::vector<float>(static_cast<std::size_t>(m * n), -1.0f), n};
    sgemm_gathered(m, n, k, matrix, b.data(), n, false, nullptr, 0, copy.epilogue());
    expected_without_c = copy.c;
    for (std::int64_t i = 0; i < m; i += 7)
      for (std::int64_t j = 0; j < n; ++j) {
        double magnitude = 0;
        for (std::int64_t p = 0; p < k; ++p)
          magnitude += std::fabs(static_cast<double>(a[static_cast<std::size_t>(i * k + p)]) *
                                 b[static_cast<std::size_t>(p * n + j)]);
        const std::size_t at = static_cast<std::size_t>(i * n + j);
        ASSERT_NEAR(expected_without_c[at], expected[at], 2 * (static_cast<double>(k) + 2) * 6e-8 * magnitude)
            << windows.describe(n) << " at (" << i << ", " << j << ")";
      }
  }
  const int original = runtime::thread_count();
  for (int threads : {1, 2}) {
    runtime::set_thread_count(threads);
    std::vector<float> c(static_cast<std::size_t>(m * n), -1.0f);
    sgemm_gathered(m, n, k, windows.rows, b.data(), n, false, c.data(), n, {});
    EXPECT_TRUE(same_bits(c, expected)) << windows.describe(n) << ", C written, " << threads << " thread(s)";
    TileCopy copy{std::vector<float>(static_cast<std::size_t>(m * n), -1.0f), n};
    sgemm_gathered(m, n, k, windows.rows, b.data(), n, false, nullptr, 0, copy.epilogue());
    EXPECT_TRUE(same_bits(copy.c, expected_without_c))
        << windows.describe(n) << ", epilogue only" << (deeper_blocks ? " (deeper K blocks)" : "") << ", " << threads
        << " thread(s)";
  }
  runtime::set_thread_count(original);
}

// Parts at least kMinInPlaceWidth (32) wide are read in place where the microkernel allows it (AVX2, NEON, SSE),
// narrower ones copied into the strip: the cases below take both.
TEST(GemmGathered, SamePaddingStrideOne) {
  expect_same_as_written(Windows(2, 9, 11, 5, 3, 1, 1), 7);
  expect_same_as_written(Windows(2, 9, 11, 32, 3, 1, 1), 37);
}

TEST(GemmGathered, StridedWithPaddingOnBothSides) {
  expect_same_as_written(Windows(3, 10, 7, 8, 3, 2, 2), 33);
  expect_same_as_written(Windows(3, 10, 7, 33, 3, 2, 2), 33);
}

TEST(GemmGathered, NoPaddingAndAWindowOfOne) {
  expect_same_as_written(Windows(1, 13, 6, 16, 2, 1, 0), 40);
  expect_same_as_written(Windows(2, 5, 5, 24, 1, 1, 0), 17);
}

// Several K blocks, whose edges fall inside parts (100 channels per tap, 900 columns in blocks of 300), and more
// rows than one panel holds without C (whole-depth and row-panel orders), copied and read in place.
TEST(GemmGathered, PartsSpanningKBlocksAndManyRows) {
  expect_same_as_written(Windows(2, 12, 13, 100, 3, 1, 1), 70);
  expect_same_as_written(Windows(4, 40, 30, 16, 3, 1, 1), 520);
  // Read in place, whole-depth without C: 576 columns in two blocks of 288 (with C, three of 192).
  const Windows wide(2, 30, 41, 64, 3, 1, 1);
  ASSERT_TRUE(plan_sgemm(wide.m(), 64, wide.k()).whole_depth);
  expect_same_as_written(wide, 64);
  // An image net's first layer, smaller: 7x7 taps of 3 channels, stride 2, whole-depth. Parts too narrow to read
  // in place through row pointers: the strips are copied, a filter row (21 floats) at a time in the interior, or,
  // on AVX-512, read where they lie by the strided microkernel (gemm_strided.h), rows 6 floats apart.
  const Windows stem(2, 64, 80, 3, 7, 2, 3);
  ASSERT_TRUE(plan_sgemm(stem.m(), 64, stem.k()).whole_depth);
  expect_same_as_written(stem, 64);
}

// Lines wide enough for 14-row strips inside the padding (the strided microkernel's, on AVX-512) beside strips
// that meet it or wrap to the next line; a last micro-panel of 13 columns; 5 channels, a filter row's taps one run.
TEST(GemmGathered, InteriorStripsOfLongLinesAndAPartialPanel) {
  expect_same_as_written(Windows(2, 20, 33, 5, 3, 1, 1), 45);
  expect_same_as_written(Windows(1, 9, 47, 2, 5, 2, 2), 13);
}

// At most kNarrowColumns columns (a vector: 8 on AVX2), a vector of B's row per step along K instead of the
// microkernel's tile, in the microkernel's order: bitwise sgemm on the written windows, the same with one thread and
// two, every block once, within float rounding of the float64 product.
TEST(GemmGathered, NarrowProductsMatchTheReferenceAndDoNotDependOnThreads) {
  const Windows windows(3, 17, 13, 37, 3, 1, 1);  // 333 columns: K blocks with tails, parts straddling them
  const std::int64_t m = windows.m(), k = windows.k();
  const std::vector<float> a = windows.written();
  for (const std::int64_t n : {std::int64_t{1}, std::int64_t{2}, std::int64_t{5}, gemm_detail::kNarrowColumns}) {
    for (const bool transpose_b : {false, true}) {
      const std::vector<float> b = testing::random_floats(k * n, 40 + static_cast<std::uint64_t>(n));
      const int original = runtime::thread_count();
      std::vector<std::vector<float>> results;
      for (int threads : {1, 2}) {
        runtime::set_thread_count(threads);
        std::vector<float> c(static_cast<std::size_t>(m * n), -1.0f);
        sgemm_gathered(m, n, k, windows.rows, b.data(), transpose_b ? k : n, transpose_b, c.data(), n, {});
        results.push_back(c);
        TileCopy copy{std::vector<float>(static_cast<std::size_t>(m * n), -1.0f), n};
        sgemm_gathered(m, n, k, windows.rows, b.data(), transpose_b ? k : n, transpose_b, nullptr, 0, copy.epilogue());
        EXPECT_TRUE(same_bits(copy.c, c)) << windows.describe(n) << ", epilogue only, " << threads << " thread(s)";
      }
      runtime::set_thread_count(original);
      EXPECT_TRUE(same_bits(results[0], results[1])) << windows.describe(n);
      std::vector<float> written(static_cast<std::size_t>(m * n), -1.0f);
      sgemm(m, n, k, a.data(), k, false, b.data(), transpose_b ? k : n, transpose_b, written.data(), n, {});
      EXPECT_TRUE(same_bits(results[0], written)) << windows.describe(n) << ", against sgemm on the written windows";
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double want = 0, magnitude = 0;
          for (std::int64_t p = 0; p < k; ++p) {
            const double weight =
                transpose_b ? b[static_cast<std::size_t>(j * k + p)] : b[static_cast<std::size_t>(p * n + j)];
            const double term = static_cast<double>(a[static_cast<std::size_t>(i * k + p)]) * weight;
            want += term;
            magnitude += std::fabs(term);
          }
          const float got = results[0][static_cast<std::size_t>(i * n + j)];
          ASSERT_NEAR(got, want, 4.0 * (static_cast<double>(k) + 2.0) * 6e-8 * magnitude + 1e-30)
              << windows.describe(n) << " at (" << i << ", " << j << ")";
        }
    }
  }
}

// The windows' transpose times a matrix (a convolution's filter gradient: A^T dY, A the windows): bitwise sgemm
// with the written-out windows and transpose_a, with C and through the epilogue alone, one and two threads. The
// shapes take strips of A^T that straddle two taps (5 and 37 channels against kMr), a tail strip, K blocks that cut
// a line of positions, padding on both sides and a stride, B stored either way, and n from 1 to more than a panel.
TEST(GemmGathered, TheWindowsTransposedTimesAMatrixAreSgemmsOnTheWrittenWindows) {
  struct Case {
    Windows windows;
    std::int64_t n;
  };
  const Case cases[] = {
      {Windows(2, 9, 11, 5, 3, 1, 1), 7},  {Windows(3, 10, 7, 37, 3, 2, 2), 33},
      {Windows(1, 13, 6, 16, 2, 1, 0), 1}, {Windows(2, 30, 41, 64, 3, 1, 1), 64},
      {Windows(1, 3, 3, 4, 2, 1, 3), 300}, {Windows(2, 12, 9, 3, 3, 1, 1), 32}};  // an RGB image: runs of 3 channels
  const int original = runtime::thread_count();
  for (const Case& each : cases) {
    const Windows& windows = each.windows;
    const std::int64_t m = windows.k(), k = windows.m(), n = each.n;  // C = A^T B: A is k x m
    const std::vector<float> a = windows.written();
    for (const bool transpose_b : {false, true}) {
      const std::vector<float> b = testing::random_floats(k * n, 21 + static_cast<std::uint64_t>(n));
      const std::int64_t ldb = transpose_b ? k : n;
      std::vector<float> expected(static_cast<std::size_t>(m * n), -1.0f);
      sgemm(m, n, k, a.data(), m, true, b.data(), ldb, transpose_b, expected.data(), n, {});
      TileCopy expected_tiles{std::vector<float>(static_cast<std::size_t>(m * n), -1.0f), n};
      sgemm(m, n, k, a.data(), m, true, b.data(), ldb, transpose_b, nullptr, 0, expected_tiles.epilogue());
      for (int threads : {1, 2}) {
        runtime::set_thread_count(threads);
        const std::string label =
            windows.describe(n) + (transpose_b ? ", B transposed, " : ", ") + std::to_string(threads) + " thread(s)";
        std::vector<float> c(static_cast<std::size_t>(m * n), -1.0f);
        sgemm_gathered_transposed(m, n, k, windows.rows, b.data(), ldb, transpose_b, c.data(), n, {});
        EXPECT_TRUE(same_bits(c, expected)) << label << ", C written";
        TileCopy copy{std::vector<float>(static_cast<std::size_t>(m * n), -1.0f), n};
        sgemm_gathered_transposed(m, n, k, windows.rows, b.data(), ldb, transpose_b, nullptr, 0, copy.epilogue());
        EXPECT_TRUE(same_bits(copy.c, expected_tiles.c)) << label << ", epilogue only";
      }
    }
  }
  runtime::set_thread_count(original);
}

// One column (a convolution to one channel's filter gradient): the gathered rows scaled by B's elements and added
// where they lie, in chunks of rows summed apart, so deep products are sgemm's to rounding (not bitwise), and the
// same whatever the thread count; B read with its stride or transposed; the epilogue sees sgemm's blocks.
TEST(GemmGathered, AOneColumnProductAddsTheScaledRowsWhereTheyLie) {
  // k > 512 rows (several chunks), k <= 512, and k > 256 * 512 (chunks of more rows, at most 256 of them).
  for (const Windows& windows :
       {Windows(2, 40, 37, 6, 3, 1, 1), Windows(3, 9, 11, 128, 3, 2, 1), Windows(8, 131, 129, 1, 3, 1, 1)}) {
    const std::int64_t m = windows.k(), k = windows.m();  // C = A^T b: A is k x m
    const std::vector<float> a = windows.written();
    const std::vector<float> b = testing::random_floats(k * 3, 31);  // B's column: every third element
    std::vector<double> sums(static_cast<std::size_t>(m), 0.0);      // the reference, in double
    for (std::int64_t r = 0; r < k; ++r)
      for (std::int64_t j = 0; j < m; ++j)
        sums[static_cast<std::size_t>(j)] +=
            double{a[static_cast<std::size_t>(r * m + j)]} * double{b[static_cast<std::size_t>(r * 3)]};
    const std::vector<float> expected(sums.begin(), sums.end());
    std::vector<float> b_transposed(static_cast<std::size_t>(k));
    for (std::int64_t r = 0; r < k; ++r) b_transposed[static_cast<std::size_t>(r)] = b[static_cast<std::size_t>(r * 3)];
    const int original = runtime::thread_count();
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2}) {
      runtime::set_thread_count(threads);
      const std::string label = windows.describe(1) + ", " + std::to_string(threads) + " thread(s)";
      std::vector<float> c(static_cast<std::size_t>(2 * m), -1.0f);  // every other element: ldc 2
      sgemm_gathered_transposed(m, 1, k, windows.rows, b.data(), 3, false, c.data(), 2, {});
      std::vector<float> column(static_cast<std::size_t>(m));
      for (std::int64_t j = 0; j < m; ++j) {
        column[static_cast<std::size_t>(j)] = c[static_cast<std::size_t>(2 * j)];
        EXPECT_EQ(c[static_cast<std::size_t>(2 * j + 1)], -1.0f) << label;
        EXPECT_NEAR(column[static_cast<std::size_t>(j)], expected[static_cast<std::size_t>(j)],
                    1e-4f * (1.0f + std::fabs(expected[static_cast<std::size_t>(j)])))
            << label << ", column " << j;
      }
      std::vector<float> transposed(static_cast<std::size_t>(m), -1.0f);
      sgemm_gathered_transposed(m, 1, k, windows.rows, b_transposed.data(), k, true, transposed.data(), 1, {});
      EXPECT_TRUE(same_bits(transposed, column)) << label << ", B transposed";
      TileCopy copy{std::vector<float>(static_cast<std::size_t>(m), -1.0f), 1};
      sgemm_gathered_transposed(m, 1, k, windows.rows, b.data(), 3, false, nullptr, 0, copy.epilogue());
      EXPECT_TRUE(same_bits(copy.c, column)) << label << ", epilogue only";
      results.push_back(column);
    }
    EXPECT_TRUE(same_bits(results[0], results[1])) << windows.describe(1) << ": 1 and 2 threads";
    runtime::set_thread_count(original);
  }
}

// Parts whose bounds disagree with the memory they read: the middle tap reads zeros from output column 35 on, where
// its neighbours read the image at the same addresses. Its filter row has no edges (Group::edges), so the strips at
// the padding (the last of each line, 28-41) are copied part by part, not read through the line's memory; the
// product is still the one of A written out from the parts themselves.
TEST(GemmGathered, PartsThatDisagreeOnTheirEdgesAreCopied) {
  Windows windows(1, 6, 42, 3, 3, 1, 1);
  windows.parts[4].upper[2] = 35;
  const std::int64_t m = windows.m(), k = windows.k(), n = 16;
  std::vector<float> a(static_cast<std::size_t>(m * k), 0.0f);
  for (std::int64_t row = 0; row < m; ++row) {
    const std::int64_t coordinates[3] = {row / (6 * 42), row / 42 % 6, row % 42};
    std::int64_t column = 0;
    for (const GatheredPart& part : windows.parts) {
      bool inside = true;
      std::int64_t offset = part.offset;
      for (int t = 0; t < 3; ++t) {
        inside &= part.lower[t] <= coordinates[t] && coordinates[t] < part.upper[t];
        offset += coordinates[t] * part.strides[t];
      }
      for (std::int64_t j = 0; inside && j < part.width; ++j)
        a[static_cast<std::size_t>(row * k + column + j)] = part.source[offset + j];
      column += part.width;
    }
  }
  const std::vector<float> b = testing::random_floats(k * n, 13);
  std::vector<float> expected(static_cast<std::size_t>(m * n)), c(static_cast<std::size_t>(m * n));
  sgemm(m, n, k, a.data(), k, false, b.data(), n, false, expected.data(), n, {});
  sgemm_gathered(m, n, k, windows.rows, b.data(), n, false, c.data(), n, {});
  EXPECT_TRUE(same_bits(c, expected));
}

TEST(GemmGathered, RowsOutsideEveryPartReadZeros) {
  // A padding wider than the window: the outer outputs see only zeros.
  Windows windows(1, 3, 3, 4, 2, 1, 3);
  const std::int64_t n = 5;
  std::vector<float> c(static_cast<std::size_t>(windows.m() * n), -1.0f);
  const std::vector<float> b = testing::random_floats(windows.k() * n, 9);
  sgemm_gathered(windows.m(), n, windows.k(), windows.rows, b.data(), n, false, c.data(), n, {});
  for (std::int64_t j = 0; j < n; ++j) EXPECT_EQ(c[static_cast<std::size_t>(j)], 0.0f);
  expect_same_as_written(windows, n);
  expect_same_as_written(Windows(1, 3, 3, 32, 2, 1, 3), 21);
}

// gathered_runs reads a filter row's taps as one run where they are adjacent in memory in every row of the strip,
// and as separate runs where a row meets the padding at one tap but not the next.
TEST(GemmGathered, AdjacentTapsAreReadAsOneRun) {
  const Windows windows(1, 6, 10, 32, 3, 1, 1);  // 6 rows of 10 outputs; a filter row is 3 taps of 32 channels
  const std::int64_t filter_row = 3 * windows.channels;
  auto pixel = [&](std::int64_t y, std::int64_t x) {
    return windows.image.data() + (y * windows.width + x) * windows.channels;
  };
  gemm_detail::ARun runs[gemm_detail::kMaxRuns];

  // Outputs (2, 2..7): their windows are inside the image, so each filter row is one run; the middle filter row
  // (K block [96, 192)) of output (2, x) starts at pixel (2, x - 1).
  ASSERT_EQ(gemm_detail::gathered_runs(windows.rows, 2 * windows.width + 2, 6, filter_row, filter_row, runs), 1);
  EXPECT_EQ(runs[0].depth, filter_row);
  for (int r = 0; r < 6; ++r) EXPECT_EQ(runs[0].rows[r], pixel(2, 1 + r)) << "row " << r;

  // Outputs (2, 0..5): output (2, 0)'s first tap is on the padding and its second is not, so the first tap is a
  // run of its own (zeros in row 0) and the other two are one.
  ASSERT_EQ(gemm_detail::gathered_runs(windows.rows, 2 * windows.width, 6, filter_row, filter_row, runs), 2);
  EXPECT_EQ(runs[0].depth, windows.channels);
  EXPECT_EQ(runs[1].depth, 2 * windows.channels);
  for (int r = 1; r < 6; ++r) EXPECT_EQ(runs[0].rows[r], pixel(2, r - 1)) << "row " << r;
  for (int r = 0; r < 6; ++r) EXPECT_EQ(runs[1].rows[r], pixel(2, r)) << "row " << r;
  for (std::int64_t c = 0; c < windows.channels; ++c) EXPECT_EQ(runs[0].rows[0][c], 0.0f);

  // Outputs (0, 1..6): the first filter row lies on the padding above the image for all of them: zeros, one run.
  ASSERT_EQ(gemm_detail::gathered_runs(windows.rows, 1, 6, 0, filter_row, runs), 1);
  EXPECT_EQ(runs[0].depth, filter_row);
  for (int r = 0; r < 6; ++r)
    for (std::int64_t c = 0; c < filter_row; ++c) ASSERT_EQ(runs[0].rows[r][c], 0.0f) << "row " << r;

  // Outputs (2, 8), (2, 9), (3, 0..3): the strip wraps to the next image row, whose pixels do not continue the
  // previous row's; rows at either edge meet the padding. Read run by run, the runs give the written-out rows.
  const std::vector<float> written = windows.written();
  const std::int64_t first_row = 2 * windows.width + 8;
  const int run_count = gemm_detail::gathered_runs(windows.rows, first_row, 6, 0, windows.k(), runs);
  EXPECT_GT(run_count, 3);
  std::int64_t column = 0;
  for (int i = 0; i < run_count; ++i) {
    for (int r = 0; r < 6; ++r)
      for (std::int64_t j = 0; j < runs[i].depth; ++j)
        ASSERT_EQ(runs[i].rows[r][j], written[static_cast<std::size_t>((first_row + r) * windows.k() + column + j)])
            << "run " << i << ", row " << r << ", column " << column + j;
    column += runs[i].depth;
  }
  EXPECT_EQ(column, windows.k());
}

// The runs of rows [row_begin, row_begin + rows) and K block [depth_begin, depth_begin + depth), read out, against
// the written-out windows.
void expect_runs_read(const Windows& windows, const std::vector<float>& written, const gemm_detail::ARun* runs,
                      int run_count, std::int64_t row_begin, std::int64_t rows, std::int64_t depth_begin,
                      std::int64_t depth) {
  std::int64_t column = depth_begin;
  for (int i = 0; i < run_count; ++i) {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < runs[i].depth; ++j)
        ASSERT_EQ(runs[i].rows[r][j], written[static_cast<std::size_t>((row_begin + r) * windows.k() + column + j)])
            << windows.describe(0) << ": rows from " << row_begin << ", run " << i << ", row " << r << ", column "
            << column + j;
    column += runs[i].depth;
  }
  EXPECT_EQ(column, depth_begin + depth) << windows.describe(0) << ": rows from " << row_begin;
}

// What runs hold, row by row (each row's columns of the block in order).
std::vector<std::vector<float>> read_runs(const gemm_detail::ARun* runs, int run_count, std::int64_t rows) {
  std::vector<std::vector<float>> values(static_cast<std::size_t>(rows));
  for (int i = 0; i < run_count; ++i)
    for (std::int64_t r = 0; r < rows; ++r)
      values[static_cast<std::size_t>(r)].insert(values[static_cast<std::size_t>(r)].end(), runs[i].rows[r],
                                                 runs[i].rows[r] + runs[i].depth);
  return values;
}

// With a convolution's GatheredInterior, strips away from the padding take their runs, or their copy, from the first
// row's offset; the rest walk the parts. Every strip start (not only multiples of kMr), in K blocks that cut parts,
// reads the written-out windows either way (runs only where parts are wide enough to be read in place).
TEST(GemmGathered, InteriorStripsReadTheSameRows) {
  for (const Windows& windows :
       {Windows(2, 9, 11, 32, 3, 1, 1), Windows(3, 10, 7, 33, 3, 2, 2), Windows(1, 13, 6, 40, 2, 1, 0),
        Windows(2, 12, 13, 100, 3, 1, 1), Windows(2, 9, 11, 5, 3, 1, 1), Windows(1, 30, 40, 3, 7, 2, 3)}) {
    const gemm_detail::GatheredInterior interior = gemm_detail::find_interior(windows.rows);
    ASSERT_TRUE(interior.usable) << windows.describe(0);
    const std::vector<float> written = windows.written();
    const std::int64_t k = windows.k(), block = std::min<std::int64_t>(k, gemm_detail::kKcMax);
    const bool wide = gemm_detail::reads_gathered_in_place(windows.rows);
    gemm_detail::ARun runs[gemm_detail::kMaxRuns];
    std::vector<float> strip(static_cast<std::size_t>(gemm_detail::kMr * gemm_detail::kKcMax));
    for (std::int64_t row_begin = 0; row_begin < windows.m(); ++row_begin) {
      // Strips of 1 to 6 rows: short ones fit in the interior of narrow images too.
      const std::int64_t rows = std::min<std::int64_t>(1 + row_begin % 6, windows.m() - row_begin);
      for (const std::int64_t depth_begin : {std::int64_t{0}, k - block, k / 3}) {
        const std::int64_t depth = std::min(block, k - depth_begin);
        if (wide) {
          const int run_count =
              gemm_detail::gathered_runs(windows.rows, interior, row_begin, rows, depth_begin, depth, runs);
          expect_runs_read(windows, written, runs, run_count, row_begin, rows, depth_begin, depth);
        }
        gemm_detail::gather_a_strip(windows.rows, interior, row_begin, rows, depth_begin, depth, strip.data());
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t j = 0; j < depth; ++j)
            ASSERT_EQ(strip[static_cast<std::size_t>(r * gemm_detail::kKcMax + j)],
                      written[static_cast<std::size_t>((row_begin + r) * k + depth_begin + j)])
                << windows.describe(0) << ": strip from " << row_begin << ", row " << r << ", column "
                << depth_begin + j;
      }
    }
  }
  // The taps in reverse order (the first part no longer has the tightest bounds): no two parts are adjacent, and
  // the interior's runs still read what the walk through the parts reads.
  Windows reversed(2, 9, 31, 32, 3, 2, 1);
  std::reverse(reversed.parts.begin(), reversed.parts.end());
  const gemm_detail::GatheredInterior reversed_interior = gemm_detail::find_interior(reversed.rows);
  EXPECT_EQ(reversed_interior.groups.size(), 9u);
  for (std::int64_t row_begin = 0; row_begin < reversed.m(); ++row_begin) {
    const std::int64_t rows = std::min<std::int64_t>(6, reversed.m() - row_begin);
    gemm_detail::ARun walked[gemm_detail::kMaxRuns], found[gemm_detail::kMaxRuns];
    const int walked_count = gemm_detail::gathered_runs(reversed.rows, row_begin, rows, 0, reversed.k(), walked);
    const int found_count =
        gemm_detail::gathered_runs(reversed.rows, reversed_interior, row_begin, rows, 0, reversed.k(), found);
    ASSERT_EQ(read_runs(walked, walked_count, rows), read_runs(found, found_count, rows)) << "rows from " << row_begin;
  }

  const Windows windows(1, 6, 10, 32, 3, 1, 1);
  const gemm_detail::GatheredInterior interior = gemm_detail::find_interior(windows.rows);
  ASSERT_EQ(interior.groups.size(), 3u);  // a group per filter row
  gemm_detail::ARun runs[gemm_detail::kMaxRuns];
  EXPECT_EQ(gemm_detail::interior_runs(windows.rows, interior, 2 * windows.width, 6, 0, windows.k(), runs), -1);
  ASSERT_EQ(gemm_detail::gathered_runs(windows.rows, interior, 2 * windows.width + 2, 6, 0, windows.k(), runs), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(runs[i].depth, 3 * windows.channels);
    for (int r = 0; r < 6; ++r)  // filter row i of output (2, 2 + r) starts at pixel (1 + i, 1 + r)
      EXPECT_EQ(runs[i].rows[r], windows.image.data() + ((1 + i) * windows.width + 1 + r) * windows.channels);
  }
}

// Parts that do not share a source and strides (a concat of two arrays, say) have no interior: every strip walks.
TEST(GemmGathered, PartsOfDifferentLayoutsHaveNoInterior) {
  Windows windows(1, 6, 10, 32, 3, 1, 1);
  windows.parts[4].strides[2] *= 2;
  EXPECT_FALSE(gemm_detail::find_interior(windows.rows).usable);
  std::vector<float> other(windows.image);
  windows.parts[4] = windows.tap(1, 1);
  windows.parts[4].source = other.data();
  EXPECT_FALSE(gemm_detail::find_interior(windows.rows).usable);
}

}  // namespace
}  // namespace kiln::kernels::cpu
