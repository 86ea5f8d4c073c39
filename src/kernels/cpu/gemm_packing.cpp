#include "kernels/cpu/gemm_packing.h"

#include "kernels/cpu/gemm_microkernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace kiln::kernels::cpu::gemm_detail {
namespace {

// One micro-panel of a transposed B: op(B)[kk, j] = B[j, kk], so each stored row (contiguous in K) becomes a
// column of the micro-panel. kLanes x kLanes blocks are transposed in registers; K tails go element by element.
void pack_transposed_b(const float* source, std::int64_t ldb, std::int64_t depth, std::int64_t columns, float* target) {
  std::int64_t kk = 0;
  for (; kk + kLanes <= depth; kk += kLanes) {
    for (int j0 = 0; j0 < kNr; j0 += kLanes) {
      Vector rows[kLanes];
      for (int j = 0; j < kLanes; ++j)
        rows[j] = j0 + j < columns ? load_vector(source + (j0 + j) * ldb + kk) : Vector{};
      transpose_block(rows);
      for (int t = 0; t < kLanes; ++t) store_vector(target + (kk + t) * kNr + j0, rows[t]);
    }
  }
  for (; kk < depth; ++kk) {
    for (std::int64_t j = 0; j < kNr; ++j) target[kk * kNr + j] = j < columns ? source[j * ldb + kk] : 0.0f;
  }
}

// A run of a gathered row: short (a convolution's channels, often 64 floats), so copied inline rather than by a
// call to memcpy, which took more time than the copying (7% of a 3x3 convolution against 2%). A run of at least a
// vector ends with a vector that overlaps the one before instead of element by element (a filter row of 3-channel
// taps is 21 floats: 2 vectors and 5 single floats on AVX2).
[[gnu::always_inline]] inline void copy_run(float* target, const float* source, std::int64_t count) {
  if (count < kLanes) {
    for (std::int64_t j = 0; j < count; ++j) target[j] = source[j];
    return;
  }
  std::int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) store_vector(target + j, load_vector(source + j));
  if (j < count) store_vector(target + count - kLanes, load_vector(source + count - kLanes));
}

}  // namespace

// A plain copy, and cheap in sgemm: its source lines were prefetched while the previous strip ran.
void pack_a_strip(const float* a, std::int64_t lda, bool transpose_a, std::int64_t row_begin, std::int64_t rows,
                  std::int64_t depth_begin, std::int64_t depth, float* strip) {
  if (depth <= 0) return;  // nothing to copy, and `a` may be null (an empty operand)
  if (!transpose_a) {
    const float* source = a + row_begin * lda + depth_begin;
    for (std::int64_t r = 0; r < rows; ++r)
      std::memcpy(strip + r * kKcMax, source + r * lda, sizeof(float) * static_cast<std::size_t>(depth));
    return;
  }
  const float* source = a + depth_begin * lda + row_begin;
  if (rows == kMr) {
    for (std::int64_t kk = 0; kk < depth; ++kk) std::memcpy(strip + kk * kMr, source + kk * lda, sizeof(float) * kMr);
  } else {
    for (std::int64_t kk = 0; kk < depth; ++kk)
      for (std::int64_t r = 0; r < rows; ++r) strip[kk * kMr + r] = source[kk * lda + r];
  }
}

namespace {

// What a row outside a part's bounds reads in place: zeros, as long as any run.
alignas(64) constexpr float kZeros[kKcMax] = {};

// lower <= value < upper (never when upper <= lower), as one comparison without a branch: rows at the edges make
// a branch on each bound unpredictable.
inline bool within(std::int64_t value, std::int64_t lower, std::int64_t upper) {
  return static_cast<std::uint64_t>(value - lower) <
         static_cast<std::uint64_t>(std::max<std::int64_t>(upper - lower, 0));
}

// Row `row`'s coordinates along a's axes (row-major in a.extents).
void row_coordinates(const GatheredRows& a, std::int64_t row, std::int64_t* coordinates) {
  for (std::int64_t rest = row, t = a.axes - 1; t >= 0; --t) {
    coordinates[t] = rest % a.extents[t];
    rest /= a.extents[t];
  }
}

// Calls visit(r, length, run, column, count, source, stride) for each segment of rows [r, r + length) of the strip
// at row_begin and each part that overlaps K block [depth_begin, depth_begin + depth): in row r + i the part's
// `count` columns from `column` (relative to the block) start at source + i * stride, or are zeros where source is
// null (the rows fall outside the part's bounds). A segment is a stretch of rows along the last axis on the same
// side of the part's bounds. `run` numbers the overlapping parts from 0; returns how many there are. Parts outer,
// rows inner: from one row to the next only the last coordinate moves (until it wraps), so a segment costs a bounds
// check and an add, not a pass over every axis -- this runs once per strip and K block, and a pass per row and
// part took 7% of a 3x3 convolution.
template <class Visit>
int for_each_gathered_segment(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows,
                              std::int64_t depth_begin, std::int64_t depth, Visit visit) {
  std::int64_t first_coordinates[kGatherMaxAxes] = {};
  row_coordinates(a, row_begin, first_coordinates);
  const int last = a.axes - 1;  // the axis that moves from row to row; -1: A has one row
  const std::int64_t depth_end = depth_begin + depth;
  int run = 0;
  std::int64_t first = 0;  // the part's first column in A
  for (int p = 0; p < a.part_count && first < depth_end; first += a.parts[p].width, ++p) {
    const GatheredPart& part = a.parts[p];
    const std::int64_t begin = std::max(first, depth_begin), end = std::min(first + part.width, depth_end);
    if (begin >= end) continue;
    std::int64_t coordinates[kGatherMaxAxes];
    for (int t = 0; t < kGatherMaxAxes; ++t) coordinates[t] = first_coordinates[t];  // moves, not a call to memcpy
    // Whether the row is inside the bounds along every axis but the last, and its offset along them.
    bool inside_before_last = true;
    std::int64_t offset_before_last = 0;
    auto place = [&] {
      inside_before_last = true;
      offset_before_last = part.offset + (begin - first);
      for (int t = 0; t < last; ++t) {
        inside_before_last &= within(coordinates[t], part.lower[t], part.upper[t]);
        offset_before_last += coordinates[t] * part.strides[t];
      }
    };
    place();
    const float* const source = part.source;
    if (last < 0) {
      visit(std::int64_t{0}, rows, run, begin - depth_begin, end - begin, source + offset_before_last, std::int64_t{0});
      ++run;
      continue;
    }
    // The last axis's numbers in locals: `visit` stores 64-bit integers, which could alias the part's, and they
    // would be loaded again for every segment.
    const std::int64_t last_lower = part.lower[last], last_upper = part.upper[last];
    const std::int64_t last_stride = part.strides[last], last_extent = a.extents[last];
    for (std::int64_t r = 0; r < rows;) {
      const std::int64_t coordinate = coordinates[last];
      // To the end of the strip or of the row along the last axis, and to the next bound crossed on it.
      std::int64_t length = std::min(rows - r, last_extent - coordinate);
      if (coordinate < last_lower)
        length = std::min(length, last_lower - coordinate);
      else if (coordinate < last_upper)
        length = std::min(length, last_upper - coordinate);
      const bool inside = inside_before_last && within(coordinate, last_lower, last_upper);
      visit(r, length, run, begin - depth_begin, end - begin,
            inside ? source + offset_before_last + coordinate * last_stride : nullptr, last_stride);
      r += length;
      if ((coordinates[last] += length) == last_extent) {
        for (int t = last; t >= 0 && coordinates[t] == a.extents[t]; --t) {
          coordinates[t] = 0;
          if (t > 0) ++coordinates[t - 1];
        }
        place();
      }
    }
    ++run;
  }
  return run;
}

// for_each_gathered_segment row by row: visit(r, run, column, count, source).
template <class Visit>
int for_each_gathered_run(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows, std::int64_t depth_begin,
                          std::int64_t depth, Visit visit) {
  return for_each_gathered_segment(a, row_begin, rows, depth_begin, depth,
                                   [&](std::int64_t r, std::int64_t length, int run, std::int64_t column,
                                       std::int64_t count, const float* source, std::int64_t stride) {
                                     for (std::int64_t i = 0; i < length; ++i)
                                       visit(r + i, run, column, count, source ? source + i * stride : nullptr);
                                   });
}

// Rows [0, length) of a segment into a k-major strip: `count` floats of each, kMr apart in `target`, `stride`
// apart in `source` (or zeros where it is null). A count known when compiled for the common narrow ones (an RGB
// image's 3 channels per tap): a first convolution's filter gradient packs 65536 such rows per strip.
template <int Count>
void copy_segment(float* target, const float* source, std::int64_t length, std::int64_t stride) {
  for (std::int64_t i = 0; i < length; ++i)
    for (int j = 0; j < Count; ++j) target[i * kMr + j] = source[i * stride + j];
}

void copy_segment(float* target, const float* source, std::int64_t length, std::int64_t stride, std::int64_t count) {
  switch (count) {
    case 1:
      return copy_segment<1>(target, source, length, stride);
    case 2:
      return copy_segment<2>(target, source, length, stride);
    case 3:
      return copy_segment<3>(target, source, length, stride);
    case 4:
      return copy_segment<4>(target, source, length, stride);
    default:
      for (std::int64_t i = 0; i < length; ++i) copy_run(target + i * kMr, source + i * stride, count);
  }
}

}  // namespace

void gather_a_strip(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows, std::int64_t depth_begin,
                    std::int64_t depth, float* strip) {
  if (depth <= 0) return;
  for_each_gathered_run(a, row_begin, rows, depth_begin, depth,
                        [&](std::int64_t r, int, std::int64_t column, std::int64_t count, const float* source) {
                          float* target = strip + r * kKcMax + column;  // row r holds the block's columns
                          if (source)
                            copy_run(target, source, count);
                          else
                            std::fill(target, target + count, 0.0f);
                        });
}

void gather_a_strip_transposed(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows,
                               std::int64_t depth_begin, std::int64_t depth, float* strip) {
  if (depth <= 0) return;
  // The K block's gathered rows, each the strip's columns of it: one run per part they overlap, a segment of rows
  // at a time.
  for_each_gathered_segment(a, depth_begin, depth, row_begin, rows,
                            [&](std::int64_t d, std::int64_t length, int, std::int64_t column, std::int64_t count,
                                const float* source, std::int64_t stride) {
                              float* target = strip + d * kMr + column;
                              if (source) {
                                copy_segment(target, source, length, stride, count);
                                return;
                              }
                              for (std::int64_t i = 0; i < length; ++i)
                                for (std::int64_t j = 0; j < count; ++j) target[i * kMr + j] = 0.0f;
                            });
}

void add_scaled_gathered_rows(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows, std::int64_t columns,
                              const float* scale, std::int64_t scale_stride, float* sums) {
  for_each_gathered_segment(a, row_begin, rows, 0, columns,
                            [&](std::int64_t r, std::int64_t length, int, std::int64_t column, std::int64_t count,
                                const float* source, std::int64_t stride) {
                              if (!source) return;  // zeros: nothing to add
                              float* const target = sums + column;
                              for (std::int64_t i = 0; i < length; ++i) {
                                const float factor = scale[(r + i) * scale_stride];
                                const float* const row = source + i * stride;
                                for (std::int64_t j = 0; j < count; ++j)
                                  target[j] = std::fma(factor, row[j], target[j]);
                              }
                            });
}

bool reads_gathered_in_place(const GatheredRows& a) {
  if (kMr > kMaxInPlaceRows) return false;
  for (int p = 0; p < a.part_count; ++p)
    if (a.parts[p].width < kMinInPlaceWidth) return false;
  return true;
}

namespace {

// Whether run `next` goes on where `run` ends in every row (each row's memory is contiguous across the two, or
// both are zeros), so that the two can be read as one run.
bool continues(const ARun& run, const ARun& next, std::int64_t rows) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = run.rows[r];
    const float* next_row = next.rows[r];
    // Compared as addresses: row + depth may lie past the end of row's array when the two are unrelated.
    const bool contiguous =
        reinterpret_cast<std::uintptr_t>(row) + sizeof(float) * static_cast<std::size_t>(run.depth) ==
        reinterpret_cast<std::uintptr_t>(next_row);
    if (!contiguous && !(row == kZeros && next_row == kZeros)) return false;
  }
  return true;
}

}  // namespace

int gathered_runs(const GatheredRows& a, std::int64_t row_begin, std::int64_t rows, std::int64_t depth_begin,
                  std::int64_t depth, ARun* runs) {
  if (depth <= 0) return 0;
  const int run_count =
      for_each_gathered_run(a, row_begin, rows, depth_begin, depth,
                            [&](std::int64_t r, int run, std::int64_t, std::int64_t count, const float* source) {
                              runs[run].depth = count;
                              runs[run].rows[r] = source ? source : kZeros;
                            });
  // A convolution's taps along a filter row read adjacent pixels: in NHWC those runs are one piece of memory
  // wherever the strip's rows are away from the padding. Merged, the microkernel sets up its row pointers once
  // for them, and keeps its sums in registers across (it stores and reloads them between runs).
  int merged = 0;
  for (int i = 1; i < run_count; ++i) {
    if (continues(runs[merged], runs[i], rows))
      runs[merged].depth += runs[i].depth;
    else
      runs[++merged] = runs[i];
  }
  return run_count == 0 ? 0 : merged + 1;
}

namespace {

// Group::edges, lowest and highest: part p (columns from `column` within the group, `width` wide, rows inside along
// the last axis from lower to upper) puts its elements inside at u in [column + lower * s, column + (upper - 1) * s
// + width) and outside below column + (lower - 1) * s + width and from column + upper * s on. The group has edges
// when one pair of bounds separates every part's inside elements from every part's outside ones.
void find_edges(const GatheredRows& a, const GatheredInterior& interior, GatheredInterior::Group& group) {
  const int last = a.axes - 1;
  const std::int64_t s = interior.strides[last], extent = a.extents[last];
  group.edges = false;
  if (s <= 0 || extent <= 0) return;
  // Part p's rows inside along the last axis, within the line.
  auto lower_of = [&](const GatheredPart& part) { return std::max<std::int64_t>(part.lower[last], 0); };
  auto upper_of = [&](const GatheredPart& part) { return std::min(part.upper[last], extent); };
  std::int64_t lowest = std::numeric_limits<std::int64_t>::max(), highest = std::numeric_limits<std::int64_t>::min();
  std::int64_t column = 0;
  for (int p = group.first_part; p < group.first_part + group.part_count; column += a.parts[p].width, ++p) {
    const GatheredPart& part = a.parts[p];
    const std::int64_t lower = lower_of(part), upper = upper_of(part);
    if (lower >= upper || part.width <= 0) return;
    lowest = std::min(lowest, column + lower * s);
    highest = std::max(highest, column + (upper - 1) * s + part.width);
  }
  column = 0;
  for (int p = group.first_part; p < group.first_part + group.part_count; column += a.parts[p].width, ++p) {
    const GatheredPart& part = a.parts[p];
    const std::int64_t lower = lower_of(part), upper = upper_of(part);
    if (lower > 0 && column + (lower - 1) * s + part.width > lowest) return;
    if (upper < extent && column + upper * s < highest) return;
  }
  group.edges = true;
  group.lowest = lowest;
  group.highest = highest;
}

}  // namespace

GatheredInterior find_interior(const GatheredRows& a) {
  GatheredInterior interior;
  if (a.axes < 1 || a.part_count < 1) return interior;
  const GatheredPart& first = a.parts[0];
  interior.source = first.source;
  for (int t = 0; t < a.axes; ++t) {
    interior.strides[t] = first.strides[t];
    interior.lower[t] = first.lower[t];
    interior.upper[t] = first.upper[t];
  }
  std::int64_t column = 0;
  for (int p = 0; p < a.part_count; column += a.parts[p].width, ++p) {
    const GatheredPart& part = a.parts[p];
    if (part.source != interior.source) return interior;
    for (int t = 0; t < a.axes; ++t) {
      if (part.strides[t] != interior.strides[t]) return interior;
      interior.lower[t] = std::max(interior.lower[t], part.lower[t]);
      interior.upper[t] = std::min(interior.upper[t], part.upper[t]);
    }
    if (!interior.groups.empty() && interior.groups.back().offset + interior.groups.back().width == part.offset) {
      GatheredInterior::Group& group = interior.groups.back();
      group.width += part.width;
      ++group.part_count;
      for (int t = 0; t < a.axes; ++t) {
        group.lower[t] = std::max(group.lower[t], part.lower[t]);
        group.upper[t] = std::min(group.upper[t], part.upper[t]);
        group.reach_lower[t] = std::min(group.reach_lower[t], part.lower[t]);
        group.reach_upper[t] = std::max(group.reach_upper[t], part.upper[t]);
      }
    } else {
      GatheredInterior::Group group{column, part.width, part.offset, p, 1, {}, {}, {}, {}, false, 0, 0};
      for (int t = 0; t < a.axes; ++t) {
        group.lower[t] = group.reach_lower[t] = part.lower[t];
        group.upper[t] = group.reach_upper[t] = part.upper[t];
      }
      interior.groups.push_back(group);
    }
  }
  interior.usable = true;
  for (GatheredInterior::Group& group : interior.groups) find_edges(a, interior, group);
  return interior;
}

namespace {

// Whether rows [row_begin, row_begin + rows) are all inside every part's bounds and on one line of the last axis
// (the last coordinate does not wrap); if so, row_offset is the first row's offset (sum of coordinates times
// strides), and row r's is row_offset + r * interior.strides[last].
bool interior_row_offset(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin,
                         std::int64_t rows, std::int64_t& row_offset) {
  if (!interior.usable) return false;
  const int last = a.axes - 1;
  row_offset = 0;
  bool inside = true;
  for (std::int64_t rest = row_begin, t = last; t >= 0; --t) {
    const std::int64_t coordinate = rest % a.extents[t];
    rest /= a.extents[t];
    const std::int64_t final_coordinate = t == last ? coordinate + rows - 1 : coordinate;
    inside &=
        interior.lower[t] <= coordinate && final_coordinate < interior.upper[t] && final_coordinate < a.extents[t];
    row_offset += coordinate * interior.strides[t];
  }
  return inside;
}

// Calls visit(column, count, first_row) for each group's columns in K block [depth_begin, depth_begin + depth) of
// rows whose first row has offset row_offset (interior_row_offset): `count` columns from `column` (relative to the
// block), row r's at first_row + r * the last axis's stride.
template <class Visit>
void for_each_interior_run(const GatheredInterior& interior, std::int64_t row_offset, std::int64_t depth_begin,
                           std::int64_t depth, Visit visit) {
  const std::int64_t depth_end = depth_begin + depth;
  for (const GatheredInterior::Group& group : interior.groups) {
    if (group.column >= depth_end) break;
    const std::int64_t begin = std::max(group.column, depth_begin);
    const std::int64_t end = std::min(group.column + group.width, depth_end);
    if (begin >= end) continue;
    visit(begin - depth_begin, end - begin, interior.source + (group.offset + (begin - group.column) + row_offset));
  }
}

}  // namespace

int interior_runs(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin, std::int64_t rows,
                  std::int64_t depth_begin, std::int64_t depth, ARun* runs) {
  std::int64_t row_offset = 0;
  if (depth <= 0 || !interior_row_offset(a, interior, row_begin, rows, row_offset)) return -1;
  const std::int64_t row_stride = interior.strides[a.axes - 1];
  int run_count = 0;
  for_each_interior_run(interior, row_offset, depth_begin, depth,
                        [&](std::int64_t, std::int64_t count, const float* first_row) {
                          ARun& run = runs[run_count++];
                          run.depth = count;
                          for (std::int64_t r = 0; r < rows; ++r) run.rows[r] = first_row + r * row_stride;
                        });
  return run_count;
}

int interior_strided_runs(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin,
                          std::int64_t rows, std::int64_t depth_begin, std::int64_t depth, StridedRun* runs,
                          int capacity, std::int64_t& row_stride) {
  std::int64_t row_offset = 0;
  if (depth <= 0 || !interior_row_offset(a, interior, row_begin, rows, row_offset)) return -1;
  row_stride = interior.strides[a.axes - 1];
  int run_count = 0;
  for_each_interior_run(interior, row_offset, depth_begin, depth,
                        [&](std::int64_t, std::int64_t count, const float* first_row) {
                          if (run_count < capacity) runs[run_count] = {first_row, count};
                          ++run_count;
                        });
  return run_count <= capacity ? run_count : -1;
}

int edge_strided_runs(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin,
                      std::int64_t rows, std::int64_t depth_begin, std::int64_t depth, float* space,
                      std::int64_t space_floats, StridedRun* runs, int capacity, std::int64_t& row_stride) {
  if (!interior.usable || depth <= 0 || rows <= 0) return -1;
  const int last = a.axes - 1;
  std::int64_t coordinates[kGatherMaxAxes] = {};
  row_coordinates(a, row_begin, coordinates);
  const std::int64_t first_x = coordinates[last];
  if (first_x + rows > a.extents[last]) return -1;  // wraps to the next line
  const std::int64_t s = interior.strides[last];
  std::int64_t line_offset = 0;  // the line's start (x = 0) in the source, from its other coordinates
  for (int t = 0; t < last; ++t) line_offset += coordinates[t] * interior.strides[t];
  const std::int64_t depth_end = depth_begin + depth;
  int count = 0;
  std::int64_t used = 0;
  for (const GatheredInterior::Group& group : interior.groups) {
    if (group.column >= depth_end) break;
    const std::int64_t begin = std::max(group.column, depth_begin);
    const std::int64_t end = std::min(group.column + group.width, depth_end);
    if (begin >= end) continue;
    if (!group.edges || count == capacity) return -1;
    // The line's other coordinates: inside every part of the group, or outside every one (zeros).
    bool any_inside = false, any_outside = false;
    for (int p = group.first_part; p < group.first_part + group.part_count; ++p) {
      bool inside = true;
      for (int t = 0; t < last; ++t) inside &= within(coordinates[t], a.parts[p].lower[t], a.parts[p].upper[t]);
      (inside ? any_inside : any_outside) = true;
    }
    if (any_inside && any_outside) return -1;
    const std::int64_t length = (rows - 1) * s + (end - begin);
    if (used + length > space_floats) return -1;
    float* patch = space + used;
    used += length;
    // Patch element q is the line's element u = first + q: inside from lowest to highest.
    const std::int64_t first = first_x * s + (begin - group.column);
    const std::int64_t inside_begin = any_inside ? std::clamp(group.lowest - first, std::int64_t{0}, length) : 0;
    const std::int64_t inside_end = any_inside ? std::clamp(group.highest - first, inside_begin, length) : 0;
    std::fill(patch, patch + inside_begin, 0.0f);
    if (inside_end > inside_begin)
      std::memcpy(patch + inside_begin, interior.source + (group.offset + line_offset + first + inside_begin),
                  static_cast<std::size_t>(inside_end - inside_begin) * sizeof(float));
    std::fill(patch + inside_end, patch + length, 0.0f);
    runs[count++] = {patch, end - begin};
  }
  row_stride = s;
  return count;
}

int gathered_runs(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin, std::int64_t rows,
                  std::int64_t depth_begin, std::int64_t depth, ARun* runs) {
  const int run_count = interior_runs(a, interior, row_begin, rows, depth_begin, depth, runs);
  return run_count >= 0 ? run_count : gathered_runs(a, row_begin, rows, depth_begin, depth, runs);
}

void gather_a_strip(const GatheredRows& a, const GatheredInterior& interior, std::int64_t row_begin, std::int64_t rows,
                    std::int64_t depth_begin, std::int64_t depth, float* strip) {
  if (depth <= 0) return;
  std::int64_t row_offset = 0;
  if (interior_row_offset(a, interior, row_begin, rows, row_offset)) {
    const std::int64_t row_stride = interior.strides[a.axes - 1];
    for_each_interior_run(interior, row_offset, depth_begin, depth,
                          [&](std::int64_t column, std::int64_t count, const float* first_row) {
                            for (std::int64_t r = 0; r < rows; ++r)
                              copy_run(strip + r * kKcMax + column, first_row + r * row_stride, count);
                          });
    return;
  }
  if (!interior.usable) {
    gather_a_strip(a, row_begin, rows, depth_begin, depth, strip);
    return;
  }
  // A strip that wraps to the next line or meets the padding, row by row and group by group (walked part by part,
  // such strips had cost a 7x7 stem's 18% of strips as much as the other 82%; then, the rows inside taking the short
  // cut and the others walking every part, still 60% of its gather). The rows' coordinates move along the last axis
  // from the first row's, without a division per row.
  const int last = a.axes - 1;
  std::int64_t coordinates[kGatherMaxAxes] = {};
  row_coordinates(a, row_begin, coordinates);
  const std::int64_t depth_end = depth_begin + depth;
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = strip + r * kKcMax;
    std::int64_t offset = 0;
    for (int t = 0; t <= last; ++t) offset += coordinates[t] * interior.strides[t];
    auto inside = [&](const std::int64_t* lower, const std::int64_t* upper) {
      bool all = true;
      for (int t = 0; t <= last; ++t) all &= within(coordinates[t], lower[t], upper[t]);
      return all;
    };
    for (const GatheredInterior::Group& group : interior.groups) {
      if (group.column >= depth_end) break;
      const std::int64_t begin = std::max(group.column, depth_begin);
      const std::int64_t end = std::min(group.column + group.width, depth_end);
      if (begin >= end) continue;
      if (inside(group.lower, group.upper)) {
        copy_run(row + (begin - depth_begin), interior.source + (group.offset + (begin - group.column) + offset),
                 end - begin);
      } else if (!inside(group.reach_lower, group.reach_upper)) {
        std::fill(row + (begin - depth_begin), row + (end - depth_begin), 0.0f);
      } else {
        std::int64_t first = group.column;  // the part's first column in A
        for (int p = group.first_part; p < group.first_part + group.part_count; first += a.parts[p].width, ++p) {
          const GatheredPart& part = a.parts[p];
          const std::int64_t part_begin = std::max(first, begin), part_end = std::min(first + part.width, end);
          if (part_begin >= part_end) continue;
          float* target = row + (part_begin - depth_begin);
          if (inside(part.lower, part.upper))
            copy_run(target, interior.source + (part.offset + (part_begin - first) + offset), part_end - part_begin);
          else
            std::fill(target, target + (part_end - part_begin), 0.0f);
        }
      }
    }
    for (int t = last; t >= 0 && ++coordinates[t] == a.extents[t]; --t) coordinates[t] = 0;
  }
}

void pack_b_micro_panel(const float* b, std::int64_t ldb, bool transpose_b, std::int64_t depth_begin,
                        std::int64_t depth, std::int64_t column, std::int64_t columns, float* target) {
  if (transpose_b) {
    pack_transposed_b(b + column * ldb + depth_begin, ldb, depth, columns, target);
    return;
  }
  const float* source = b + depth_begin * ldb + column;
  if (columns < kNr) {
    for (std::int64_t kk = 0; kk < depth; ++kk) {
      for (std::int64_t j = 0; j < columns; ++j) target[kk * kNr + j] = source[kk * ldb + j];
      for (std::int64_t j = columns; j < kNr; ++j) target[kk * kNr + j] = 0.0f;
    }
    return;
  }
  // Rows of B are ldb apart, too far for the hardware prefetchers: ask for the row 16 ahead into L1 and the row
  // 64 ahead into L2 (the source is usually in L3, a few hundred cycles away).
  for (std::int64_t kk = 0; kk < depth; ++kk) {
    const float* near = source + std::min(kk + 16, depth - 1) * ldb;
    const float* far = source + std::min(kk + 64, depth - 1) * ldb;
    __builtin_prefetch(near, 0, 3);
    __builtin_prefetch(near + kNr - 1, 0, 3);
    __builtin_prefetch(far, 0, 2);
    __builtin_prefetch(far + kNr - 1, 0, 2);
    std::memcpy(target + kk * kNr, source + kk * ldb, sizeof(float) * kNr);
  }
}

}  // namespace kiln::kernels::cpu::gemm_detail
