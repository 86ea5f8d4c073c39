// CUDA kernels: sort, argsort and top_k's indices, as the CPU's (kernels/cpu/sort.cpp).
//
// The input is viewed as [outer, length, inner] with the ordered axis in the middle. Every element becomes a
// (key, index) pair (kernels/sort_keys.h: the NaN rule, -0 = +0 and descending are in the key), and pairs are
// ordered lexicographically: no two are equal, so any correct sorting method gives the one order the CPU and the
// reference give (stable, deterministic), and the results equal the CPU's bit for bit.
//   - A line of up to `tile` elements is sorted by one block in shared memory: a bitonic sorting network over the
//     line padded to a power of two with pairs above every real one, written straight to the output.
//   - A longer line is cut into tiles, each sorted so into a global scratch buffer, then merged: each pass merges
//     neighbouring sorted runs of `width` into runs of 2 * width, one thread per element, which finds its place
//     by a binary search in the other run (its rank in its own run plus the number of the other run's pairs
//     before it).
// top_k sorts the whole line, largest first, and keeps the first k: correctness first, a selection later.
// No CUB or Thrust: the kernels also run in kiln's CUDA simulator (tools/cuda-simulator), which checks their
// barriers.

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/sort_keys.h"

#include <limits>
#include <string>
#include <utility>

namespace kiln::kernels::cuda {
namespace {

using runtime::Array;
using std::int64_t;
using Index = std::uint32_t;

// Elements a block sorts in shared memory: 2048 pairs of 8-byte keys and 4-byte indices are 24 KiB, half of the
// 48 KiB a block may hold statically.
constexpr int tile = 2048;
// Threads of a tile's block: each does tile / 2 / tile_threads = 4 compare-exchanges per step.
constexpr int tile_threads = 256;

struct Lines {
  int64_t outer = 1, length = 1, inner = 1;
};

// Where the results go: the first `count` of each line's order (the line's length for sort and argsort, k for
// top_k), as values (sort) or i64 indices, at [outer, count, inner] around the axis.
struct Result {
  void* out = nullptr;
  bool values = false;
  int64_t count = 0;
};

template <class Key>
__device__ __forceinline__ bool before(Key key, Index index, Key other_key, Index other_index) {
  return key < other_key || (key == other_key && index < other_index);
}

// The first element of a line, and where the result of line position j goes.
__device__ __forceinline__ int64_t line_base(const Lines& lines, int64_t line) {
  return line / lines.inner * lines.length * lines.inner + line % lines.inner;
}
__device__ __forceinline__ int64_t result_at(const Lines& lines, const Result& result, int64_t line, int64_t j) {
  return (line / lines.inner * result.count + j) * lines.inner + line % lines.inner;
}

template <class T>
__device__ __forceinline__ void write_result(const T* x, const Lines& lines, const Result& result, int64_t line,
                                             int64_t j, Index index) {
  const int64_t at = result_at(lines, result, line, j);
  if (result.values)
    static_cast<T*>(result.out)[at] = x[line_base(lines, line) + static_cast<int64_t>(index) * lines.inner];
  else
    static_cast<int64_t*>(result.out)[at] = static_cast<int64_t>(index);
}

// Sorts `padded` (a power of two, at most `tile`) pairs in shared memory, ascending. Ends with a barrier.
template <class Key>
__device__ void bitonic_sort(Key* keys, Index* indices, int padded) {
  for (int size = 2; size <= padded; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int t = static_cast<int>(threadIdx.x); t < padded / 2; t += static_cast<int>(blockDim.x)) {
        const int i = 2 * t - (t & (stride - 1)), j = i + stride;
        const bool ascending = (i & size) == 0;
        const Key key_i = keys[i], key_j = keys[j];
        const Index index_i = indices[i], index_j = indices[j];
        if (before(key_j, index_j, key_i, index_i) == ascending) {
          keys[i] = key_j;
          keys[j] = key_i;
          indices[i] = index_j;
          indices[j] = index_i;
        }
      }
      __syncthreads();
    }
  }
}

// Block b sorts tile b % chunks of line b / chunks. One tile per line: the results go to `result`; more: the sorted
// pairs go to the scratch arrays (line-major, `length` per line) for the merge passes.
template <class T>
__global__ void __launch_bounds__(tile_threads)
    sort_tiles_kernel(const T* __restrict__ x, Lines lines, int64_t chunks, int padded, bool descending, Result result,
                      SortKey<T>* __restrict__ keys_out, Index* __restrict__ indices_out) {
  using Key = SortKey<T>;
  __shared__ Key keys[tile];
  __shared__ Index indices[tile];
  const int64_t line = blockIdx.x / chunks, first = blockIdx.x % chunks * tile;
  const int64_t base = line_base(lines, line);
  const int64_t remaining = lines.length - first;
  const int size = remaining < tile ? static_cast<int>(remaining) : tile;
  for (int t = static_cast<int>(threadIdx.x); t < padded; t += static_cast<int>(blockDim.x)) {
    if (t < size) {
      keys[t] = sort_key(x[base + (first + t) * lines.inner], descending);
      indices[t] = static_cast<Index>(first + t);
    } else {  // padding: after every real pair, whatever its key
      keys[t] = static_cast<Key>(~Key{0});
      indices[t] = static_cast<Index>(~Index{0});
    }
  }
  __syncthreads();
  bitonic_sort(keys, indices, padded);
  if (chunks == 1) {
    const int count = result.count < size ? static_cast<int>(result.count) : size;
    for (int t = static_cast<int>(threadIdx.x); t < count; t += static_cast<int>(blockDim.x))
      write_result(x, lines, result, line, t, indices[t]);
    return;
  }
  for (int t = static_cast<int>(threadIdx.x); t < size; t += static_cast<int>(blockDim.x)) {
    keys_out[line * lines.length + first + t] = keys[t];
    indices_out[line * lines.length + first + t] = indices[t];
  }
}

// Merges each pair of neighbouring sorted runs of `width` (the last run of a line may be shorter, or alone).
template <class Key>
__global__ void merge_kernel(const Key* __restrict__ keys, const Index* __restrict__ indices,
                             Key* __restrict__ keys_out, Index* __restrict__ indices_out, int64_t lines, int64_t length,
                             int64_t width) {
  for (int64_t e = thread_index(); e < lines * length; e += thread_count()) {
    const int64_t line = e / length, j = e % length;
    const int64_t run = j / width, start = (run & ~int64_t{1}) * width;
    const bool second = (run & 1) != 0;
    const int64_t own = second ? start + width : start, other = second ? start : start + width;
    const int64_t left = length - other;
    const int64_t other_size = second ? width : (left < 0 ? 0 : left < width ? left : width);
    const Key key = keys[e];
    const Index index = indices[e];
    const Key* other_keys = keys + line * length + other;
    const Index* other_indices = indices + line * length + other;
    int64_t low = 0, high = other_size;  // the other run's pairs before this one: [0, low)
    while (low < high) {
      const int64_t middle = (low + high) / 2;
      if (before(other_keys[middle], other_indices[middle], key, index))
        low = middle + 1;
      else
        high = middle;
    }
    const int64_t at = line * length + start + (j - own) + low;
    keys_out[at] = key;
    indices_out[at] = index;
  }
}

// The results from the merged order of every line.
template <class T>
__global__ void write_kernel(const T* __restrict__ x, const Index* __restrict__ indices, Lines lines, Result result) {
  const int64_t total = lines.outer * lines.inner * result.count;
  for (int64_t e = thread_index(); e < total; e += thread_count()) {
    const int64_t line = e / result.count, j = e % result.count;
    write_result(x, lines, result, line, j, indices[line * lines.length + j]);
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class T>
void order(const char* name, const Array& input, const Lines& lines, bool descending, const Result& result) {
  using Key = SortKey<T>;
  const int64_t count = lines.outer * lines.inner;
  if (count == 0 || lines.length == 0 || result.count == 0) return;
  if (lines.length >= int64_t{std::numeric_limits<Index>::max()})
    throw ValueError(name,
                     "cannot order lines longer than 2^32 - 2 elements on a GPU, got " + std::to_string(lines.length),
                     std::string());
  auto& context = context_of(input, name);
  const int64_t chunks = ceil_div(lines.length, tile);
  if (count * chunks > int64_t{std::numeric_limits<int>::max()})
    throw ValueError(name, "too many lines to order on a GPU: " + std::to_string(count), std::string());
  int padded = tile;
  if (chunks == 1)
    for (padded = 2; padded < lines.length;) padded *= 2;
  const dim3 blocks(static_cast<unsigned>(count * chunks));
  const dim3 threads(static_cast<unsigned>(padded / 2 < tile_threads ? padded / 2 : tile_threads));
  const T* x = input.data<T>();
  if (chunks == 1) {
    launch_grid(name, context, blocks, threads, &sort_tiles_kernel<T>, x, lines, chunks, padded, descending, result,
                static_cast<Key*>(nullptr), static_cast<Index*>(nullptr));
    return;
  }
  // Two sets of (key, index) arrays, one read and one written by each merge pass. Released when this returns,
  // behind the queued work on the device's one stream (cuda_context.h).
  const auto pairs = static_cast<std::size_t>(count * lines.length);
  const Device device = input.device();
  auto key_buffers = runtime::allocate(device, 2 * pairs * sizeof(Key));
  auto index_buffers = runtime::allocate(device, 2 * pairs * sizeof(Index));
  Key* keys = static_cast<Key*>(key_buffers->data());
  Index* indices = static_cast<Index*>(index_buffers->data());
  Key* other_keys = keys + pairs;
  Index* other_indices = indices + pairs;
  launch_grid(name, context, blocks, threads, &sort_tiles_kernel<T>, x, lines, chunks, padded, descending, result, keys,
              indices);
  for (int64_t width = tile; width < lines.length; width *= 2) {
    launch(name, context, count * lines.length, &merge_kernel<Key>, keys, indices, other_keys, other_indices, count,
           lines.length, width);
    std::swap(keys, other_keys);
    std::swap(indices, other_indices);
  }
  launch(name, context, count * result.count, &write_kernel<T>, x, indices, lines, result);
}

Lines lines_of(const Shape& shape, int axis) {
  Lines lines;
  for (int d = 0; d < axis; ++d) lines.outer *= shape[d];
  lines.length = shape[axis];
  for (int d = axis + 1; d < shape.rank(); ++d) lines.inner *= shape[d];
  return lines;
}

}  // namespace

void sort(ir::Op op, const ir::Attributes& attributes, const Array& input, const Array& output) {
  const std::string name(ir::name(op));
  const int rank = input.shape.rank();
  if ((op != ir::Op::sort && op != ir::Op::argsort) || attributes.axis < 0 || attributes.axis >= rank)
    internal_error(name, "not an ordering along an axis of the input");
  const DType result_dtype = op == ir::Op::sort ? input.dtype : DType::i64;
  if (output.dtype != result_dtype || !(output.shape == input.shape))
    internal_error(name, "output unlike the input's shape or the result's dtype");
  const Lines lines = lines_of(input.shape, static_cast<int>(attributes.axis));
  const Result result{output.mutable_raw(), op == ir::Op::sort, lines.length};
  visit_dtype(input.dtype, [&]<class T>() { order<T>(name.c_str(), input, lines, attributes.descending, result); });
}

void top_k(int64_t k, const Array& input, const Array& output) {
  const int rank = input.shape.rank();
  if (rank == 0 || output.dtype != DType::i64 || output.shape.rank() != rank || output.shape[rank - 1] != k)
    internal_error("top_k", "output unlike i64 [..., k]");
  const Lines lines = lines_of(input.shape, rank - 1);
  if (k < 0 || k > lines.length)
    throw ValueError(
        "top_k",
        "k = " + std::to_string(k) + " is outside [0, " + std::to_string(lines.length) + "], the size of the last axis",
        std::string());
  const Result result{output.mutable_raw(), false, k};
  visit_dtype(input.dtype, [&]<class T>() { order<T>("top_k", input, lines, true, result); });
}

}  // namespace kiln::kernels::cuda
