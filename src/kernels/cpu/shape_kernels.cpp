// Shape kernels: transpose, broadcast_to, slice, concat, gather, take_along_axis, scatter_add, nonzero.
//
// transpose, broadcast_to and slice are one problem: copy a strided view of
// the input into a dense output. Each drops size-1 axes, merges neighbouring
// axes whose strides chain, and then copies rows: memcpy when the innermost
// source stride is 1, a fill when it is 0 (broadcast), a gather otherwise.
// A transpose whose innermost output axis is not the input's innermost axis
// (2-D transposes, swapping the last two axes, any permutation that moves
// the innermost axis) is copied in square tiles transposed in registers (16
// x 16 for 4-byte elements), so that reads and writes move whole cache lines.
// Data are moved as raw 1-, 4- or 8-byte elements; the dtype does not matter.

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/scalar_ops.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

namespace kiln::kernels::cpu {
namespace {

using runtime::Array;
using std::int64_t;

// Copies of at least this many bytes are worth a thread.
constexpr int64_t bytes_per_task = 64 * 1024;

// Copies `bytes` bytes. Short runs -- a slice or a concat operand of an image with few channels, 12 bytes a row --
// are moved by two overlapping fixed-size copies, which compile to loads and stores: a call of memcpy per 12 bytes
// took most of the standard executor's 7x7 convolution of 3-channel images (49 slices and their concat).
inline void copy_bytes(void* to, const void* from, std::size_t bytes) {
  auto* out = static_cast<std::uint8_t*>(to);
  const auto* in = static_cast<const std::uint8_t*>(from);
  auto overlapping = [&](auto word) {  // bytes in [sizeof(word), 2 sizeof(word)]
    decltype(word) first, last;
    std::memcpy(&first, in, sizeof(word));
    std::memcpy(&last, in + bytes - sizeof(word), sizeof(word));
    std::memcpy(out, &first, sizeof(word));
    std::memcpy(out + bytes - sizeof(word), &last, sizeof(word));
  };
  if (bytes > 32) {
    std::memcpy(out, in, bytes);
  } else if (bytes >= 16) {
    struct Sixteen {
      std::uint64_t low, high;
    };
    overlapping(Sixteen{});
  } else if (bytes >= 8) {
    overlapping(std::uint64_t{});
  } else if (bytes >= 4) {
    overlapping(std::uint32_t{});
  } else {
    for (std::size_t i = 0; i < bytes; ++i) out[i] = in[i];
  }
}

// A strided view: out[i0, i1, ...] = source[sum(i_k * strides[k])], with
// `sizes` the output's sizes. Strides are in elements and may be 0 or
// negative.
struct View {
  int rank = 0;
  std::array<int64_t, Shape::max_rank> sizes{};
  std::array<int64_t, Shape::max_rank> strides{};

  void push(int64_t size, int64_t stride) {
    sizes[static_cast<std::size_t>(rank)] = size;
    strides[static_cast<std::size_t>(rank)] = stride;
    ++rank;
  }
  int64_t size(int axis) const { return sizes[static_cast<std::size_t>(axis)]; }
  int64_t stride(int axis) const { return strides[static_cast<std::size_t>(axis)]; }
  int64_t numel() const {
    int64_t count = 1;
    for (int axis = 0; axis < rank; ++axis) count *= size(axis);
    return count;
  }
  // Drops size-1 axes and merges neighbours whose strides chain; keeps at
  // least one axis.
  View collapsed() const {
    View result;
    for (int axis = 0; axis < rank; ++axis) {
      if (size(axis) == 1) continue;
      if (result.rank > 0) {
        auto last = static_cast<std::size_t>(result.rank - 1);
        if (result.strides[last] == stride(axis) * size(axis)) {
          result.sizes[last] *= size(axis);
          result.strides[last] = stride(axis);
          continue;
        }
      }
      result.push(size(axis), stride(axis));
    }
    if (result.rank == 0) result.push(1, 0);
    return result;
  }
};

// Source offset of the first element of output row `row` (a row: all axes
// but the last).
int64_t row_offset(const View& view, int64_t row) {
  int64_t offset = 0;
  for (int axis = view.rank - 2; axis >= 0; --axis) {
    offset += row % view.size(axis) * view.stride(axis);
    row /= view.size(axis);
  }
  return offset;
}

// Moves to the next row: an odometer over all axes but the last.
void next_row(const View& view, std::array<int64_t, Shape::max_rank>& index, int64_t& offset) {
  for (int axis = view.rank - 2; axis >= 0; --axis) {
    auto a = static_cast<std::size_t>(axis);
    offset += view.strides[a];
    if (++index[a] < view.sizes[a]) return;
    offset -= view.strides[a] * index[a];
    index[a] = 0;
  }
}

template <class E>
void copy_view(const E* source, const View& view, E* out) {
  int64_t total = view.numel();
  if (total == 0) return;
  int64_t length = view.size(view.rank - 1), step = view.stride(view.rank - 1);
  int64_t rows = total / length;
  int64_t grain = std::max<int64_t>(1, bytes_per_task / (length * static_cast<int64_t>(sizeof(E))));
  runtime::parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::array<int64_t, Shape::max_rank> index{};
    int64_t rest = begin;
    for (int axis = view.rank - 2; axis >= 0; --axis) {
      index[static_cast<std::size_t>(axis)] = rest % view.size(axis);
      rest /= view.size(axis);
    }
    int64_t offset = row_offset(view, begin);
    for (int64_t row = begin; row < end; ++row) {
      const E* from = source + offset;
      E* to = out + row * length;
      if (step == 1)
        copy_bytes(to, from, static_cast<std::size_t>(length) * sizeof(E));
      else if (step == 0)
        std::fill_n(to, length, *from);
      else
        for (int64_t i = 0; i < length; ++i) to[i] = from[i * step];
      next_row(view, index, offset);
    }
  });
}

// One 64-byte vector of E.
template <class E>
struct Lanes {
  static constexpr int width = 64 / static_cast<int>(sizeof(E));
  typedef E Vector __attribute__((vector_size(64)));
};

// to[i, j] = from[j, i] for a width x width tile (16 x 16 for 4-byte
// elements): whole cache lines in, whole cache lines out.
template <class E>
void transpose_tile(const E* from, int64_t from_stride, E* to, int64_t to_stride) {
  using L = Lanes<E>;
  typename L::Vector rows[L::width];
  for (int i = 0; i < L::width; ++i) std::memcpy(&rows[i], from + i * from_stride, sizeof(rows[i]));
  vector_math::transpose_square(rows);
  for (int i = 0; i < L::width; ++i) std::memcpy(to + i * to_stride, &rows[i], sizeof(rows[i]));
}

// The transpose of a view whose innermost output axis has a source stride
// != 1 while output axis `unit_axis` has source stride 1: for each index of
// the other axes, a 2-D transpose between those two axes, by blocks of 4 x 4
// register tiles (64 x 64 f32); the ragged edges element by element.
template <class E>
void copy_view_tiled(const E* source, const View& view, int unit_axis, E* out) {
  constexpr int64_t tile = Lanes<E>::width;
  constexpr int64_t block = std::max<int64_t>(tile, 4 * tile);
  const int last = view.rank - 1;
  std::array<int64_t, Shape::max_rank> out_strides{};
  int64_t stride = 1;
  for (int axis = last; axis >= 0; --axis) {
    out_strides[static_cast<std::size_t>(axis)] = stride;
    stride *= view.size(axis);
  }
  const int64_t rows = view.size(unit_axis);  // read contiguously
  const int64_t columns = view.size(last);    // written contiguously
  const int64_t source_column_stride = view.stride(last);
  const int64_t out_row_stride = out_strides[static_cast<std::size_t>(unit_axis)];
  // The other axes, enumerated as one index.
  View others;
  std::array<int64_t, Shape::max_rank> other_out_strides{};
  for (int axis = 0; axis < last; ++axis) {
    if (axis == unit_axis) continue;
    other_out_strides[static_cast<std::size_t>(others.rank)] = out_strides[static_cast<std::size_t>(axis)];
    others.push(view.size(axis), view.stride(axis));
  }
  const int64_t row_blocks = (rows + block - 1) / block, column_blocks = (columns + block - 1) / block;
  const int64_t tasks = others.numel() * row_blocks * column_blocks;
  const int64_t grain = std::max<int64_t>(1, bytes_per_task / (block * block * static_cast<int64_t>(sizeof(E))));
  runtime::parallel_for(tasks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      int64_t column0 = task % column_blocks * block;
      int64_t row0 = task / column_blocks % row_blocks * block;
      int64_t combination = task / column_blocks / row_blocks;
      int64_t source_offset = 0, out_offset = 0;
      for (int axis = others.rank - 1; axis >= 0; --axis) {
        int64_t i = combination % others.size(axis);
        combination /= others.size(axis);
        source_offset += i * others.stride(axis);
        out_offset += i * other_out_strides[static_cast<std::size_t>(axis)];
      }
      const int64_t height = std::min(block, rows - row0), width = std::min(block, columns - column0);
      const int64_t full_height = height / tile * tile, full_width = width / tile * tile;
      const E* from = source + source_offset + row0 + column0 * source_column_stride;
      E* to = out + out_offset + row0 * out_row_stride + column0;
      for (int64_t column = 0; column < full_width; column += tile)
        for (int64_t row = 0; row < full_height; row += tile)
          transpose_tile(from + column * source_column_stride + row, source_column_stride,
                         to + row * out_row_stride + column, out_row_stride);
      for (int64_t row = 0; row < height; ++row)
        for (int64_t column = row < full_height ? full_width : 0; column < width; ++column)
          to[row * out_row_stride + column] = from[column * source_column_stride + row];
    }
  });
}

template <class Function>
void visit_element_size(DType dtype, Function&& function) {
  switch (size_of(dtype)) {
    case 1:
      function.template operator()<std::uint8_t>();
      break;
    case 4:
      function.template operator()<std::uint32_t>();
      break;
    case 8:
      function.template operator()<std::uint64_t>();
      break;
    default:
      throw InternalError("shape kernel", "unexpected element size", std::string());
  }
}

void copy(const Array& input, const View& view, const Array& output) {
  if (input.dtype != output.dtype) throw InternalError("shape kernel", "input and output dtypes differ", std::string());
  View collapsed = view.collapsed();
  visit_element_size(input.dtype, [&]<class E>() {
    const E* source = static_cast<const E*>(input.raw());
    E* out = static_cast<E*>(output.mutable_raw());
    int last = collapsed.rank - 1;
    if (collapsed.stride(last) != 1 && collapsed.stride(last) != 0) {
      for (int axis = 0; axis < last; ++axis)
        if (collapsed.stride(axis) == 1) {
          copy_view_tiled(source, collapsed, axis, out);
          return;
        }
    }
    copy_view(source, collapsed, out);
  });
}

}  // namespace

void transpose(const std::vector<int64_t>& permutation, const Array& input, const Array& output) {
  const Shape& shape = input.shape;
  if (static_cast<int>(permutation.size()) != shape.rank())
    throw InternalError("transpose", "permutation does not match the rank", std::string());
  if (output.shape.numel() == 0) return;
  auto strides = shape.strides();
  View view;
  for (int64_t axis : permutation) view.push(shape[static_cast<int>(axis)], strides[static_cast<std::size_t>(axis)]);
  copy(input, view, output);
}

void broadcast_to(const Array& input, const Array& output) {
  const Shape& from = input.shape;
  const Shape& to = output.shape;
  if (to.numel() == 0) return;
  auto strides = from.strides();
  View view;
  int offset = to.rank() - from.rank();
  for (int axis = 0; axis < to.rank(); ++axis) {
    int source_axis = axis - offset;
    bool broadcast = source_axis < 0 || from[source_axis] == 1;
    view.push(to[axis], broadcast ? 0 : strides[static_cast<std::size_t>(source_axis)]);
  }
  copy(input, view, output);
}

void slice(const std::vector<int64_t>& start, const std::vector<int64_t>& step, const Array& input,
           const Array& output) {
  const Shape& shape = input.shape;
  if (output.shape.numel() == 0) return;
  auto strides = shape.strides();
  int64_t offset = 0;
  View view;
  for (int axis = 0; axis < shape.rank(); ++axis) {
    auto a = static_cast<std::size_t>(axis);
    offset += start[a] * strides[a];
    // The step of an axis of one element is never taken, and may be anything
    // (even near 2^63, where step * stride would overflow).
    view.push(output.shape[axis], output.shape[axis] > 1 ? step[a] * strides[a] : 0);
  }
  // The view starts `offset` elements into the input; negative steps read
  // backwards from there.
  View collapsed = view.collapsed();
  visit_element_size(input.dtype, [&]<class E>() {
    const E* source = static_cast<const E*>(input.raw()) + offset;
    E* out = static_cast<E*>(output.mutable_raw());
    copy_view(source, collapsed, out);
  });
}

void concat(int64_t axis, std::span<const Array> inputs, const Array& output, const std::vector<bool>& in_place) {
  const Shape& shape = output.shape;
  int64_t total = output.shape.numel();
  if (total == 0) return;
  const auto element = static_cast<int64_t>(size_of(output.dtype));
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  // Bytes each input contributes to one output "row" (everything from
  // `axis` inward), and where they start within it.
  std::vector<int64_t> widths, starts;
  int64_t row_bytes = 0;
  for (const Array& input : inputs) {
    if (input.dtype != output.dtype) throw InternalError("concat", "operands differ in dtype", std::string());
    int64_t width = outer == 0 ? 0 : input.shape.numel() / outer * element;
    starts.push_back(row_bytes);
    widths.push_back(width);
    row_bytes += width;
  }
  auto* out = static_cast<std::uint8_t*>(output.mutable_raw());
  int64_t total_bytes = total * element;
  // Copies the runs of output bytes [position, stop): from the run at `position` on, input by input, row by row.
  auto copy_runs = [&](int64_t position, int64_t stop) {
    int64_t row = position / row_bytes, within = position % row_bytes;
    std::size_t input =
        static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), within) - starts.begin()) - 1;
    while (position < stop) {
      while (widths[input] == 0 || within >= starts[input] + widths[input]) {  // past this input: the next one
        if (++input == widths.size()) {
          input = 0;
          within = 0;
          ++row;
        }
      }
      const int64_t run = std::min(stop - position, starts[input] + widths[input] - within);
      if (input >= in_place.size() || !in_place[input]) {
        const auto* source =
            static_cast<const std::uint8_t*>(inputs[input].raw()) + row * widths[input] + (within - starts[input]);
        copy_bytes(out + position, source, static_cast<std::size_t>(run));
      }
      position += run;
      within += run;
    }
  };
  // The output in equal byte ranges. A range's whole rows are copied input by input: each input's runs there are
  // one size, a row apart, so the loop over them is a copy of a fixed size and two pointer increments -- the
  // runs of a 3-channel convolution's 49 taps are 12 bytes each, and finding each afresh (a division and a search
  // per run) had cost more than copying it. The partial rows at the ends go run by run.
  const int64_t pieces = (total_bytes + bytes_per_task - 1) / bytes_per_task;
  runtime::parallel_for(pieces, 1, [&](int64_t begin, int64_t end) {
    for (int64_t piece = begin; piece < end; ++piece) {
      const int64_t position = piece * bytes_per_task, stop = std::min(total_bytes, position + bytes_per_task);
      const int64_t first_row = (position + row_bytes - 1) / row_bytes, end_row = stop / row_bytes;
      if (first_row >= end_row) {
        copy_runs(position, stop);
        continue;
      }
      copy_runs(position, first_row * row_bytes);
      for (std::size_t input = 0; input < inputs.size(); ++input) {
        const int64_t width = widths[input];
        if (width == 0 || (input < in_place.size() && in_place[input])) continue;
        const auto* source = static_cast<const std::uint8_t*>(inputs[input].raw()) + first_row * width;
        std::uint8_t* target = out + first_row * row_bytes + starts[input];
        for (int64_t row = first_row; row < end_row; ++row, source += width, target += row_bytes)
          copy_bytes(target, source, static_cast<std::size_t>(width));
      }
      copy_runs(end_row * row_bytes, stop);
    }
  });
}

namespace {

// Every index (i32 or i64) checked against [-size, size) and made non-negative into `normalized`, before the
// caller copies anything; the first one outside, in row-major order, is reported.
std::optional<OutOfRangeIndex> checked_indices(const char* op, const Array& indices, int64_t size,
                                               std::vector<int64_t>& normalized) {
  const int64_t count = indices.shape.numel();
  normalized.resize(static_cast<std::size_t>(count));
  auto normalize = [&]<class I>(const I* entries) -> std::optional<OutOfRangeIndex> {
    for (int64_t i = 0; i < count; ++i) {
      const auto value = static_cast<int64_t>(entries[i]);
      if (value < -size || value >= size) return OutOfRangeIndex{i, value};
      normalized[static_cast<std::size_t>(i)] = value < 0 ? value + size : value;
    }
    return std::nullopt;
  };
  if (indices.dtype == DType::i32) return normalize(indices.data<std::int32_t>());
  if (indices.dtype == DType::i64) return normalize(indices.data<int64_t>());
  throw InternalError(op, "indices are neither i32 nor i64", std::string());
}

}  // namespace

std::optional<OutOfRangeIndex> gather(int64_t axis, const Array& params, const Array& indices, const Array& output) {
  if (params.dtype != output.dtype) throw InternalError("gather", "params and output dtypes differ", std::string());
  const int64_t size = params.shape[static_cast<int>(axis)];
  const int64_t count = indices.shape.numel();
  std::vector<int64_t> rows;
  if (auto bad = checked_indices("gather", indices, size, rows)) return bad;
  if (output.shape.numel() == 0) return std::nullopt;

  // output [outer, count, inner] from params [outer, size, inner]: one run of `inner` elements per index.
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= params.shape[d];
  const int64_t inner = output.shape.numel() / (outer * count);
  visit_element_size(params.dtype, [&]<class E>() {
    const E* source = static_cast<const E*>(params.raw());
    E* out = static_cast<E*>(output.mutable_raw());
    const int64_t grain = std::max<int64_t>(1, bytes_per_task / (inner * static_cast<int64_t>(sizeof(E))));
    runtime::parallel_for(outer * count, grain, [&](int64_t begin, int64_t end) {
      for (int64_t run = begin; run < end; ++run) {
        const E* from = source + ((run / count) * size + rows[static_cast<std::size_t>(run % count)]) * inner;
        if (inner == 1)
          out[run] = *from;
        else
          std::memcpy(out + run * inner, from, static_cast<std::size_t>(inner) * sizeof(E));
      }
    });
  });
  return std::nullopt;
}

std::optional<OutOfRangeIndex> take_along_axis(int64_t axis, const Array& values, const Array& indices,
                                               const Array& output) {
  if (values.dtype != output.dtype || !(indices.shape == output.shape))
    throw InternalError("take_along_axis", "output unlike values' dtype or indices' shape", std::string());
  const int64_t size = values.shape[static_cast<int>(axis)], total = output.shape.numel();
  std::vector<int64_t> picked;
  if (auto bad = checked_indices("take_along_axis", indices, size, picked)) return bad;
  if (total == 0) return std::nullopt;
  // output [outer, count, inner] from values [outer, size, inner].
  int64_t inner = 1;
  for (int d = static_cast<int>(axis) + 1; d < values.shape.rank(); ++d) inner *= values.shape[d];
  const int64_t count = output.shape[static_cast<int>(axis)];
  visit_element_size(values.dtype, [&]<class E>() {
    const E* source = static_cast<const E*>(values.raw());
    E* out = static_cast<E*>(output.mutable_raw());
    runtime::parallel_for(total, std::max<int64_t>(1, bytes_per_task / static_cast<int64_t>(sizeof(E))),
                          [&](int64_t begin, int64_t end) {
                            for (int64_t i = begin; i < end; ++i)
                              out[i] = source[(i / (count * inner) * size + picked[static_cast<std::size_t>(i)]) *
                                                  inner +
                                              i % inner];
                          });
  });
  return std::nullopt;
}

std::optional<OutOfRangeIndex> scatter_add(int64_t axis, const Array& operand, const Array& indices,
                                           const Array& updates, const Array& output) {
  if (operand.dtype != output.dtype || updates.dtype != output.dtype)
    throw InternalError("scatter_add", "operand, updates and output dtypes differ", std::string());
  const int64_t size = operand.shape[static_cast<int>(axis)];
  const int64_t count = indices.shape.numel();
  std::vector<int64_t> rows;
  if (auto bad = checked_indices("scatter_add", indices, size, rows)) return bad;
  if (output.shape.numel() == 0) return std::nullopt;
  std::memcpy(output.mutable_raw(), operand.raw(),
              static_cast<std::size_t>(output.shape.numel()) * size_of(output.dtype));
  if (count == 0) return std::nullopt;

  // output [outer, size, inner] += updates [outer, count, inner] at the rows. A task owns whole columns (an outer
  // index and a range of inner ones) of a range of rows, and adds every update of them in index order: no two tasks
  // write one element, and the sums do not depend on the split. Few columns (take_along_axis's adjoint is one flat
  // column) split the rows instead, each task reading every index and keeping those of its rows.
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= operand.shape[d];
  const int64_t inner = output.shape.numel() / (outer * size);
  const int64_t block = std::clamp<int64_t>(bytes_per_task / std::max<int64_t>(1, count * 8), 16, 4096);
  const int64_t column_blocks = (inner + block - 1) / block;
  const int64_t row_ranges =
      std::clamp<int64_t>(4 * runtime::thread_count() / std::max<int64_t>(1, outer * column_blocks), 1, size);
  const int64_t rows_per_range = (size + row_ranges - 1) / row_ranges;
  visit_dtype(output.dtype, [&]<class T>() {
    if constexpr (!std::is_same_v<T, std::uint8_t>) {
      const T* source = updates.data<T>();
      T* out = static_cast<T*>(output.mutable_raw());
      runtime::parallel_for(outer * column_blocks * row_ranges, 1, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t range = task % row_ranges, columns = task / row_ranges;
          const int64_t slab = columns / column_blocks, first = columns % column_blocks * block;
          const int64_t last = std::min(inner, first + block);
          const int64_t first_row = range * rows_per_range, end_row = first_row + rows_per_range;
          for (int64_t j = 0; j < count; ++j) {
            const int64_t row = rows[static_cast<std::size_t>(j)];
            if (row < first_row || row >= end_row) continue;
            T* target = out + (slab * size + row) * inner;
            const T* from = source + (slab * count + j) * inner;
            for (int64_t i = first; i < last; ++i) target[i] = scalar::add{}(target[i], from[i]);
          }
        }
      });
    } else {
      throw InternalError("scatter_add", "bool operands cannot be summed", std::string());
    }
  });
  return std::nullopt;
}

Array nonzero(const Array& input) {
  const Shape& shape = input.shape;
  const int rank = shape.rank();
  const int64_t total = shape.numel();
  // Fixed blocks: count per block, then each block writes at its offset.
  constexpr int64_t block = 1 << 16;
  const int64_t blocks = (total + block - 1) / block;
  std::vector<int64_t> counts(static_cast<std::size_t>(blocks) + 1, 0);
  auto is_nonzero_at = [&]<class T>(const T* data, int64_t i) { return data[i] != T(0); };
  visit_dtype(input.dtype, [&]<class T>() {
    const T* data = input.data<T>();
    runtime::parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        int64_t count = 0;
        for (int64_t i = b * block, stop = std::min(total, (b + 1) * block); i < stop; ++i)
          count += is_nonzero_at(data, i);
        counts[static_cast<std::size_t>(b) + 1] = count;
      }
    });
  });
  std::partial_sum(counts.begin(), counts.end(), counts.begin());
  const int64_t found = counts.back();
  Array output = runtime::allocate_array(DType::i64, Shape({found, rank}), Device::cpu());
  if (found == 0 || rank == 0) return output;
  int64_t* out = output.mutable_data<int64_t>();
  visit_dtype(input.dtype, [&]<class T>() {
    const T* data = input.data<T>();
    runtime::parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        int64_t first = b * block, stop = std::min(total, (b + 1) * block);
        std::array<int64_t, Shape::max_rank> index{};
        int64_t rest = first;
        for (int axis = rank - 1; axis >= 0; --axis) {
          index[static_cast<std::size_t>(axis)] = rest % shape[axis];
          rest /= shape[axis];
        }
        int64_t* write = out + counts[static_cast<std::size_t>(b)] * rank;
        for (int64_t i = first; i < stop; ++i) {
          if (is_nonzero_at(data, i)) {
            std::copy_n(index.begin(), rank, write);
            write += rank;
          }
          for (int axis = rank - 1; axis >= 0; --axis) {
            auto a = static_cast<std::size_t>(axis);
            if (++index[a] < shape[axis]) break;
            index[a] = 0;
          }
        }
      }
    });
  });
  return output;
}

}  // namespace kiln::kernels::cpu
