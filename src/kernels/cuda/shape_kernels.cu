// CUDA shape kernels: transpose, broadcast_to, slice, concat, gather, take_along_axis, scatter_add, nonzero.
//
// transpose, broadcast_to and slice copy a strided view of the input into a
// dense output (plan.h: size-1 axes dropped, chaining axes merged). A view
// that reads its innermost output axis contiguously (or broadcast) is a
// gather, one thread per output element, reads and writes coalesced along
// that axis; a fully contiguous view is one device-to-device copy. A view
// whose innermost output axis is strided while another axis is contiguous (a
// transpose moving the innermost axis) goes through 32x32 tiles in shared
// memory, so both the reads and the writes of a warp touch consecutive
// addresses. Elements move as raw 1-, 4- or 8-byte words.

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/scalar_ops.h"

#include <numeric>

namespace kiln::kernels::cuda {
namespace {

using runtime::Array;
using std::int64_t;

// ---- strided views --------------------------------------------------------------------

template <class Index, class E>
__global__ void gather_kernel(const E* __restrict__ source, E* __restrict__ out, Index count, ViewPlan view) {
  for (Index i = static_cast<Index>(thread_index()); i < count; i += static_cast<Index>(thread_count())) {
    Index rest = i;
    int64_t offset = view.offset;
    for (int d = view.rank - 1; d >= 0; --d) {
      Index size = static_cast<Index>(view.sizes[d]);
      offset += static_cast<int64_t>(rest % size) * view.strides[d];
      rest /= size;
    }
    out[i] = source[offset];
  }
}

constexpr int transpose_tile = 32;
constexpr int transpose_rows = 8;  // threads per tile column; each moves 4 elements

// The tiled copy of a collapsed view whose axis `unit` reads contiguously
// and whose innermost output axis does not: for each index of the other
// axes, a 2-D transpose [rows = size(unit)] x [columns = size(last)].
struct TiledView {
  int64_t rows = 0, columns = 0;
  int64_t source_column_stride = 0;  // source stride of the innermost output axis
  int64_t out_row_stride = 0;        // output stride of axis `unit`
  int64_t offset = 0;                // the view's source offset
  ViewPlan others;                   // the other axes: sizes and source strides
  int64_t other_out_strides[max_rank] = {};
  int64_t combinations = 1;          // others.numel()
};

template <class E> __global__ void tiled_transpose_kernel(const E* __restrict__ source, E* __restrict__ out, TiledView view) {
  __shared__ E tile[transpose_tile][transpose_tile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t row_tiles = (view.rows + transpose_tile - 1) / transpose_tile;
  const int64_t column_tiles = (view.columns + transpose_tile - 1) / transpose_tile;
  const int64_t combinations = view.combinations;
  // Loop bounds are uniform across the block, so the barriers are safe.
  for (int64_t combination = blockIdx.z; combination < combinations; combination += gridDim.z) {
    int64_t source_base = view.offset, out_base = 0, rest = combination;
    for (int d = view.others.rank - 1; d >= 0; --d) {
      int64_t i = rest % view.others.sizes[d];
      rest /= view.others.sizes[d];
      source_base += i * view.others.strides[d];
      out_base += i * view.other_out_strides[d];
    }
    for (int64_t row_tile = blockIdx.y; row_tile < row_tiles; row_tile += gridDim.y) {
      for (int64_t column_tile = blockIdx.x; column_tile < column_tiles; column_tile += gridDim.x) {
        const int64_t row0 = row_tile * transpose_tile, column0 = column_tile * transpose_tile;
        // Read: lanes walk the contiguous source axis (rows).
        for (int j = ty; j < transpose_tile; j += transpose_rows) {
          int64_t row = row0 + tx, column = column0 + j;
          if (row < view.rows && column < view.columns)
            tile[j][tx] = source[source_base + row + column * view.source_column_stride];
        }
        __syncthreads();
        // Write: lanes walk the contiguous output axis (columns).
        for (int j = ty; j < transpose_tile; j += transpose_rows) {
          int64_t row = row0 + j, column = column0 + tx;
          if (row < view.rows && column < view.columns) out[out_base + row * view.out_row_stride + column] = tile[tx][j];
        }
        __syncthreads();
      }
    }
  }
}

TiledView tiled_view(const ViewPlan& view, int unit) {
  const int last = view.rank - 1;
  int64_t out_strides[max_rank] = {};
  int64_t stride = 1;
  for (int axis = last; axis >= 0; --axis) {
    out_strides[axis] = stride;
    stride *= view.sizes[axis];
  }
  TiledView tiled;
  tiled.rows = view.sizes[unit];
  tiled.columns = view.sizes[last];
  tiled.source_column_stride = view.strides[last];
  tiled.out_row_stride = out_strides[unit];
  tiled.offset = view.offset;
  for (int axis = 0; axis < last; ++axis) {
    if (axis == unit) continue;
    tiled.other_out_strides[tiled.others.rank] = out_strides[axis];
    tiled.others.push(view.sizes[axis], view.strides[axis]);
  }
  tiled.combinations = tiled.others.numel();
  return tiled;
}

template <class Function> void visit_element_size(DType dtype, Function&& function) {
  switch (size_of(dtype)) {
    case 1: function.template operator()<std::uint8_t>(); break;
    case 4: function.template operator()<std::uint32_t>(); break;
    case 8: function.template operator()<std::uint64_t>(); break;
    default: internal_error("shape kernel", "unexpected element size");
  }
}

void copy_view(const char* name, const Array& input, const ViewPlan& view, const Array& output) {
  if (input.dtype != output.dtype) internal_error(name, "input and output dtypes differ");
  const int64_t count = output.shape.numel();
  if (count == 0) return;
  auto& context = context_of(output, name);
  const ViewPlan collapsed = collapse(view);
  if (collapsed.rank == 1 && collapsed.strides[0] == 1) {  // one contiguous block
    const auto* from = static_cast<const char*>(input.raw()) + collapsed.offset * static_cast<int64_t>(size_of(input.dtype));
    runtime::cuda::copy_device_to_device(output.mutable_raw(), from, output.bytes(), output.device());
    return;
  }
  const int unit = tiled_transpose_axis(collapsed);
  visit_element_size(input.dtype, [&]<class E>() {
    const E* source = static_cast<const E*>(input.raw());
    E* out = static_cast<E*>(output.mutable_raw());
    if (unit >= 0) {
      const TiledView tiled = tiled_view(collapsed, unit);
      const int64_t row_tiles = (tiled.rows + transpose_tile - 1) / transpose_tile;
      const int64_t column_tiles = (tiled.columns + transpose_tile - 1) / transpose_tile;
      dim3 blocks(static_cast<unsigned>(std::min<int64_t>(column_tiles, INT32_MAX)),
                  static_cast<unsigned>(std::min<int64_t>(row_tiles, 65535)),
                  static_cast<unsigned>(std::min<int64_t>(tiled.combinations, 65535)));
      launch_grid(name, context, blocks, dim3(transpose_tile, transpose_rows), &tiled_transpose_kernel<E>, source, out,
                  tiled);
    } else if (fits_32_bits(count)) {
      launch(name, context, count, &gather_kernel<std::uint32_t, E>, source, out, static_cast<std::uint32_t>(count),
             collapsed);
    } else {
      launch(name, context, count, &gather_kernel<int64_t, E>, source, out, count, collapsed);
    }
  });
}

// ---- concat ----------------------------------------------------------------------------

// Copies [rows, width] units into the output rows of `row_units` units,
// starting at unit `start` of each row.
template <class Unit>
__global__ void concat_kernel(const Unit* __restrict__ in, Unit* __restrict__ out, int64_t rows, int64_t width,
                              int64_t row_units, int64_t start) {
  for (int64_t t = thread_index(); t < rows * width; t += thread_count())
    out[t / width * row_units + start + t % width] = in[t];
}

template <class Unit>
void concat_piece(runtime::cuda::DeviceContext& context, const void* in, void* out, int64_t rows, int64_t width_bytes,
                  int64_t row_bytes, int64_t start_bytes) {
  constexpr auto unit = static_cast<int64_t>(sizeof(Unit));
  launch("concat", context, rows * (width_bytes / unit), &concat_kernel<Unit>, static_cast<const Unit*>(in),
         static_cast<Unit*>(out), rows, width_bytes / unit, row_bytes / unit, start_bytes / unit);
}

// After a kernel that kept the smallest position of an index outside its range in *first_bad (count if none):
// waits for it, and reports that position and its index.
std::optional<OutOfRangeIndex> first_out_of_range(const char* op, runtime::cuda::DeviceContext& context,
                                                  const unsigned long long* first_bad, int64_t count,
                                                  const Array& indices) {
  auto first_bad_host = static_cast<unsigned long long>(count);
  runtime::cuda::check(
      cudaMemcpyAsync(&first_bad_host, first_bad, sizeof first_bad_host, cudaMemcpyDeviceToHost, context.stream),
      "cudaMemcpyAsync", op);
  runtime::cuda::check(cudaStreamSynchronize(context.stream), "cudaStreamSynchronize", op);
  if (first_bad_host >= static_cast<unsigned long long>(count)) return std::nullopt;
  const auto position = static_cast<int64_t>(first_bad_host);
  int64_t value = 0;
  std::int32_t value_32 = 0;
  const bool narrow = indices.dtype == DType::i32;
  const char* at = static_cast<const char*>(indices.raw()) + position * (narrow ? 4 : 8);
  runtime::cuda::check(cudaMemcpy(narrow ? static_cast<void*>(&value_32) : static_cast<void*>(&value), at,
                                  narrow ? 4 : 8, cudaMemcpyDeviceToHost),
                       "cudaMemcpy", op);
  return OutOfRangeIndex{position, narrow ? value_32 : value};
}

// take_along_axis: out [outer, count, inner] = values [outer, size, inner] at each index's own position; an index
// outside [-size, size) writes 0 and its position, the smallest such, is kept in *first_bad.
template <class I, class E>
__global__ void take_along_axis_kernel(const E* __restrict__ values, const I* __restrict__ indices,
                                       E* __restrict__ out, int64_t total, int64_t count, int64_t size, int64_t inner,
                                       unsigned long long* first_bad) {
  for (int64_t t = thread_index(); t < total; t += thread_count()) {
    const auto index = static_cast<int64_t>(indices[t]);
    if (index < -size || index >= size) {
      atomicMin(first_bad, static_cast<unsigned long long>(t));
      out[t] = E{};
      continue;
    }
    out[t] = values[(t / (count * inner) * size + (index < 0 ? index + size : index)) * inner + t % inner];
  }
}

// ---- gather ----------------------------------------------------------------------------

// rows[i] = indices[i], made non-negative; an index outside [-size, size) reads row 0 instead, and the smallest
// such i is kept in *first_bad (which starts at count).
template <class I>
__global__ void gather_rows_kernel(const I* __restrict__ indices, int64_t count, int64_t size,
                                   int64_t* __restrict__ rows, unsigned long long* first_bad) {
  for (int64_t i = thread_index(); i < count; i += thread_count()) {
    const auto index = static_cast<int64_t>(indices[i]);
    const bool inside = index >= -size && index < size;
    rows[i] = !inside ? 0 : index < 0 ? index + size : index;
    if (!inside) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// The rows of gather's and scatter_add's `indices` for an axis of `size`, made non-negative on the GPU (rows), and
// the position of the first index outside [-size, size) (first_bad, `count` if none; first_out_of_range reads it
// back). `scratch` holds both.
struct CheckedRows {
  std::shared_ptr<runtime::Buffer> scratch;
  int64_t* rows = nullptr;
  unsigned long long* first_bad = nullptr;
};

CheckedRows checked_rows(const char* op, runtime::cuda::DeviceContext& context, const Array& indices, int64_t size,
                         Device device) {
  const int64_t count = indices.shape.numel();
  CheckedRows checked;
  checked.scratch = runtime::allocate(device, static_cast<std::size_t>(count + 1) * sizeof(int64_t));
  checked.rows = static_cast<int64_t*>(checked.scratch->data());
  checked.first_bad = reinterpret_cast<unsigned long long*>(checked.rows + count);
  auto first_bad_host = static_cast<unsigned long long>(count);
  runtime::cuda::DeviceGuard guard(context.index);
  runtime::cuda::check(cudaMemcpyAsync(checked.first_bad, &first_bad_host, sizeof first_bad_host,
                                       cudaMemcpyHostToDevice, context.stream),
                       "cudaMemcpyAsync", op);
  if (indices.dtype == DType::i32)
    launch(op, context, count, &gather_rows_kernel<std::int32_t>, indices.data<std::int32_t>(), count, size,
           checked.rows, checked.first_bad);
  else
    launch(op, context, count, &gather_rows_kernel<int64_t>, indices.data<int64_t>(), count, size, checked.rows,
           checked.first_bad);
  return checked;
}

// out [outer, count, width] = params [outer, size, width] at rows, in units of `width` per slice.
template <class Unit>
__global__ void gather_copy_kernel(const Unit* __restrict__ params, Unit* __restrict__ out,
                                   const int64_t* __restrict__ rows, int64_t count, int64_t size, int64_t width,
                                   int64_t total) {
  for (int64_t t = thread_index(); t < total; t += thread_count()) {
    const int64_t run = t / width;
    out[t] = params[(run / count * size + rows[run % count]) * width + t % width];
  }
}

template <class Unit>
void gather_copy(runtime::cuda::DeviceContext& context, const void* params, void* out, const int64_t* rows,
                 int64_t count, int64_t size, int64_t slice_bytes, int64_t total_bytes) {
  constexpr auto unit = static_cast<int64_t>(sizeof(Unit));
  launch("gather", context, total_bytes / unit, &gather_copy_kernel<Unit>, static_cast<const Unit*>(params),
         static_cast<Unit*>(out), rows, count, size, slice_bytes / unit, total_bytes / unit);
}

// ---- scatter_add -------------------------------------------------------------------------

// out [outer, size, inner] += updates [outer, count, inner] at rows: a thread owns whole columns (o, i) and adds
// their updates in index order, so no two threads write one element, no atomics are needed, and the sums are the
// CPU kernel's, in its order.
template <class T>
__global__ void scatter_add_kernel(const T* __restrict__ updates, T* __restrict__ out, const int64_t* __restrict__ rows,
                                   int64_t count, int64_t size, int64_t inner, int64_t columns) {
  for (int64_t column = thread_index(); column < columns; column += thread_count()) {
    const int64_t slab = column / inner, element = column % inner;
    for (int64_t j = 0; j < count; ++j) {
      T& target = out[(slab * size + rows[j]) * inner + element];
      target = scalar::add{}(target, updates[(slab * count + j) * inner + element]);
    }
  }
}

// ---- nonzero ---------------------------------------------------------------------------

constexpr int nonzero_per_thread = 16;
constexpr int64_t nonzero_chunk = int64_t{block_threads} * nonzero_per_thread;  // elements per block

template <class T> __device__ __forceinline__ int count_nonzero(const T* x, int64_t first, int64_t total) {
  int found = 0;
  for (int64_t i = first; i < first + nonzero_per_thread && i < total; ++i) found += x[i] != T(0);
  return found;
}

// counts[b] = nonzero elements of chunk b.
template <class T> __global__ void nonzero_count_kernel(const T* __restrict__ x, int64_t total, int64_t* __restrict__ counts) {
  __shared__ int64_t shared[block_threads / warp_size];
  const int64_t chunks = (total + nonzero_chunk - 1) / nonzero_chunk;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    int64_t found = count_nonzero(x, chunk * nonzero_chunk + threadIdx.x * nonzero_per_thread, total);
    found = block_reduce(found, int64_t{0}, shared, [](int64_t a, int64_t b) { return a + b; });
    if (threadIdx.x == 0) counts[chunk] = found;
  }
}

struct Dims {
  int rank = 0;
  int64_t sizes[max_rank] = {};
};

// Writes the indices of chunk b's nonzero elements from row offsets[b] on:
// each thread's 16 elements in order, after those of the threads before it
// (a block-wide exclusive scan of the threads' counts).
template <class T>
__global__ void nonzero_scatter_kernel(const T* __restrict__ x, int64_t total, const int64_t* __restrict__ offsets,
                                       Dims dims, int64_t* __restrict__ out) {
  __shared__ int64_t warp_totals[block_threads / warp_size];
  const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
  const int64_t chunks = (total + nonzero_chunk - 1) / nonzero_chunk;
  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
    const int64_t first = chunk * nonzero_chunk + threadIdx.x * nonzero_per_thread;
    const int64_t found = count_nonzero(x, first, total);
    int64_t inclusive = found;  // within the warp
#pragma unroll
    for (int shift = 1; shift < warp_size; shift *= 2) {
      int64_t before = __shfl_up_sync(0xffffffffu, inclusive, shift);
      if (lane >= shift) inclusive += before;
    }
    if (lane == warp_size - 1) warp_totals[warp] = inclusive;
    __syncthreads();
    int64_t row = offsets[chunk] + inclusive - found;
    for (int w = 0; w < warp; ++w) row += warp_totals[w];
    __syncthreads();
    for (int64_t i = first; i < first + nonzero_per_thread && i < total; ++i) {
      if (x[i] == T(0)) continue;
      int64_t rest = i;
      for (int d = dims.rank - 1; d >= 0; --d) {
        out[row * dims.rank + d] = rest % dims.sizes[d];
        rest /= dims.sizes[d];
      }
      ++row;
    }
  }
}

}  // namespace

void transpose(const std::vector<int64_t>& permutation, const Array& input, const Array& output) {
  copy_view("transpose", input, transpose_view(input.shape, permutation), output);
}

void broadcast_to(const Array& input, const Array& output) {
  copy_view("broadcast_to", input, broadcast_view(input.shape, output.shape), output);
}

void slice(const std::vector<int64_t>& start, const std::vector<int64_t>& step, const Array& input,
           const Array& output) {
  if (output.shape.numel() == 0) return;
  copy_view("slice", input, slice_view(input.shape, start, step, output.shape), output);
}

void concat(int64_t axis, std::span<const Array> inputs, const Array& output) {
  const Shape& shape = output.shape;
  if (shape.numel() == 0) return;
  auto& context = context_of(output, "concat");
  const auto element = static_cast<int64_t>(size_of(output.dtype));
  int64_t outer = 1;
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  const int64_t row_bytes = shape.numel() / outer * element;
  int64_t start = 0;
  for (const Array& input : inputs) {
    if (input.dtype != output.dtype) internal_error("concat", "operands differ in dtype");
    const int64_t width = input.shape.numel() / outer * element;
    if (width > 0) {
      char* out = static_cast<char*>(output.mutable_raw());
      // The widest unit dividing every size and both addresses.
      auto address = [](const void* pointer) { return static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(pointer) % 16); };
      const int64_t alignment = std::gcd(std::gcd(std::gcd(width, row_bytes), std::gcd(start, int64_t{16})),
                                         std::gcd(address(input.raw()), address(out)));
      if (outer == 1) runtime::cuda::copy_device_to_device(out + start, input.raw(), static_cast<std::size_t>(width), output.device());
      else if (alignment % 16 == 0) concat_piece<Pack<std::uint32_t, 4>>(context, input.raw(), out, outer, width, row_bytes, start);
      else if (alignment % 8 == 0) concat_piece<std::uint64_t>(context, input.raw(), out, outer, width, row_bytes, start);
      else if (alignment % 4 == 0) concat_piece<std::uint32_t>(context, input.raw(), out, outer, width, row_bytes, start);
      else concat_piece<std::uint8_t>(context, input.raw(), out, outer, width, row_bytes, start);
    }
    start += width;
  }
}

std::optional<OutOfRangeIndex> take_along_axis(int64_t axis, const Array& values, const Array& indices,
                                               const Array& output) {
  if (values.dtype != output.dtype || !(indices.shape == output.shape))
    internal_error("take_along_axis", "output unlike values' dtype or indices' shape");
  if (indices.dtype != DType::i32 && indices.dtype != DType::i64)
    internal_error("take_along_axis", "indices are neither i32 nor i64");
  const int64_t total = output.shape.numel();
  if (total == 0) return std::nullopt;
  const int64_t size = values.shape[static_cast<int>(axis)], count = output.shape[static_cast<int>(axis)];
  int64_t inner = 1;
  for (int d = static_cast<int>(axis) + 1; d < values.shape.rank(); ++d) inner *= values.shape[d];
  auto& context = context_of(output, "take_along_axis");
  auto scratch = runtime::allocate(output.device(), sizeof(unsigned long long));
  auto* first_bad = static_cast<unsigned long long*>(scratch->data());
  const auto none = static_cast<unsigned long long>(total);
  runtime::cuda::DeviceGuard guard(context.index);
  runtime::cuda::check(cudaMemcpyAsync(first_bad, &none, sizeof none, cudaMemcpyHostToDevice, context.stream),
                       "cudaMemcpyAsync", "take_along_axis");
  visit_element_size(values.dtype, [&]<class E>() {
    const E* source = static_cast<const E*>(values.raw());
    E* out = static_cast<E*>(output.mutable_raw());
    if (indices.dtype == DType::i32)
      launch("take_along_axis", context, total, &take_along_axis_kernel<std::int32_t, E>,
             source, indices.data<std::int32_t>(), out, total, count, size, inner, first_bad);
    else
      launch("take_along_axis", context, total, &take_along_axis_kernel<int64_t, E>, source, indices.data<int64_t>(),
             out, total, count, size, inner, first_bad);
  });
  return first_out_of_range("take_along_axis", context, first_bad, total, indices);
}

std::optional<OutOfRangeIndex> gather(int64_t axis, const Array& params, const Array& indices, const Array& output) {
  if (params.dtype != output.dtype) internal_error("gather", "params and output dtypes differ");
  if (indices.dtype != DType::i32 && indices.dtype != DType::i64)
    internal_error("gather", "indices are neither i32 nor i64");
  const int64_t count = indices.shape.numel();
  if (count == 0) return std::nullopt;
  const int64_t size = params.shape[static_cast<int>(axis)];
  auto& context = context_of(output, "gather");
  const CheckedRows checked = checked_rows("gather", context, indices, size, output.device());
  int64_t* rows = checked.rows;
  unsigned long long* first_bad = checked.first_bad;
  runtime::cuda::DeviceGuard guard(context.index);

  // Every index bad when the axis is empty: nothing to copy from.
  const int64_t total_bytes = static_cast<int64_t>(output.bytes());
  if (total_bytes > 0 && size > 0) {
    int64_t outer = 1;
    for (int d = 0; d < axis; ++d) outer *= params.shape[d];
    const int64_t slice_bytes = total_bytes / (outer * count);
    char* out = static_cast<char*>(output.mutable_raw());
    // The widest unit dividing a slice and both addresses.
    auto address = [](const void* pointer) {
      return static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(pointer) % 16);
    };
    const int64_t alignment =
        std::gcd(std::gcd(slice_bytes, int64_t{16}), std::gcd(address(params.raw()), address(out)));
    if (alignment % 16 == 0)
      gather_copy<Pack<std::uint32_t, 4>>(context, params.raw(), out, rows, count, size, slice_bytes, total_bytes);
    else if (alignment % 8 == 0)
      gather_copy<std::uint64_t>(context, params.raw(), out, rows, count, size, slice_bytes, total_bytes);
    else if (alignment % 4 == 0)
      gather_copy<std::uint32_t>(context, params.raw(), out, rows, count, size, slice_bytes, total_bytes);
    else
      gather_copy<std::uint8_t>(context, params.raw(), out, rows, count, size, slice_bytes, total_bytes);
  }

  return first_out_of_range("gather", context, first_bad, count, indices);
}

std::optional<OutOfRangeIndex> scatter_add(int64_t axis, const Array& operand, const Array& indices,
                                           const Array& updates, const Array& output) {
  if (operand.dtype != output.dtype || updates.dtype != output.dtype)
    internal_error("scatter_add", "operand, updates and output dtypes differ");
  if (indices.dtype != DType::i32 && indices.dtype != DType::i64)
    internal_error("scatter_add", "indices are neither i32 nor i64");
  if (output.shape.numel() == 0) return std::nullopt;
  runtime::cuda::copy_device_to_device(output.mutable_raw(), operand.raw(), output.bytes(), output.device());
  const int64_t count = indices.shape.numel();
  if (count == 0) return std::nullopt;
  const int64_t size = operand.shape[static_cast<int>(axis)];
  auto& context = context_of(output, "scatter_add");
  const CheckedRows checked = checked_rows("scatter_add", context, indices, size, output.device());
  int64_t outer = 1;
  for (int d = 0; d < axis; ++d) outer *= operand.shape[d];
  const int64_t inner = output.shape.numel() / (outer * size);
  visit_dtype(output.dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, std::uint8_t>)
      internal_error("scatter_add", "bool operands cannot be summed");
    else
      launch("scatter_add", context, outer * inner, &scatter_add_kernel<T>, updates.data<T>(),
             static_cast<T*>(output.mutable_raw()), checked.rows, count, size, inner, outer * inner);
  });
  return first_out_of_range("scatter_add", context, checked.first_bad, count, indices);
}

Array nonzero(const Array& input) {
  const Shape& shape = input.shape;
  const int rank = shape.rank();
  const int64_t total = shape.numel();
  const Device device = input.device();
  auto& context = context_of(input, "nonzero");
  const int64_t chunks = (total + nonzero_chunk - 1) / nonzero_chunk;
  std::vector<int64_t> offsets(static_cast<std::size_t>(chunks) + 1, 0);
  std::shared_ptr<runtime::Buffer> counts;
  if (chunks > 0) {
    counts = runtime::allocate(device, static_cast<std::size_t>(chunks) * sizeof(int64_t));
    auto* device_counts = static_cast<int64_t*>(counts->data());
    const Launch shape_of_grid = grid_stride_launch(chunks * block_threads, block_threads,
                                                    context.properties.multiProcessorCount);
    visit_dtype(input.dtype, [&]<class T>() {
      launch_grid("nonzero", context, shape_of_grid.blocks, block_threads, &nonzero_count_kernel<T>, input.data<T>(),
                  total, device_counts);
    });
    runtime::cuda::DeviceGuard guard(context.index);
    runtime::cuda::check(cudaMemcpyAsync(offsets.data() + 1, device_counts, static_cast<std::size_t>(chunks) * sizeof(int64_t),
                                         cudaMemcpyDeviceToHost, context.stream),
                         "cudaMemcpyAsync (nonzero counts)", "nonzero");
    runtime::cuda::check(cudaStreamSynchronize(context.stream), "cudaStreamSynchronize", "nonzero");
  }
  std::partial_sum(offsets.begin(), offsets.end(), offsets.begin());  // offsets[b]: rows before chunk b
  const int64_t found = offsets.back();
  Array output = runtime::allocate_array(DType::i64, Shape({found, rank}), device);
  if (found == 0 || rank == 0) return output;
  {
    runtime::cuda::DeviceGuard guard(context.index);
    // `counts` (one entry per chunk) is reused for the offsets.
    runtime::cuda::check(cudaMemcpyAsync(counts->data(), offsets.data(), static_cast<std::size_t>(chunks) * sizeof(int64_t),
                                         cudaMemcpyHostToDevice, context.stream),
                         "cudaMemcpyAsync (nonzero offsets)", "nonzero");
  }
  Dims dims;
  dims.rank = rank;
  for (int d = 0; d < rank; ++d) dims.sizes[d] = shape[d];
  const Launch shape_of_grid = grid_stride_launch(chunks * block_threads, block_threads,
                                                  context.properties.multiProcessorCount);
  visit_dtype(input.dtype, [&]<class T>() {
    launch_grid("nonzero", context, shape_of_grid.blocks, block_threads, &nonzero_scatter_kernel<T>, input.data<T>(),
                total, static_cast<const int64_t*>(counts->data()), dims, output.mutable_data<int64_t>());
  });
  return output;
}

}  // namespace kiln::kernels::cuda
