// Orderings along one axis: sort, argsort and top_k's indices.
//
// The input is viewed as [outer, length, inner] with the ordered axis in the middle; each line (one outer and one
// inner index) is ordered on its own, the lines split among the threads. A line that is not contiguous (inner > 1)
// is first copied into a contiguous buffer. Elements become (key, index) pairs (kernels/sort_keys.h: the NaN rule,
// -0 = +0 and descending are all in the key), ordered lexicographically, so every path below gives the one stable
// order the CUDA kernels and the reference give too:
//   - a least-significant-digit radix sort of the keys, a digit per pass, carrying the indices (stable, so equal
//     keys stay in index order): 32-bit keys packed with their index into one 64-bit word, by bytes, or by 11 bits
//     in long rows; 64-bit keys by bytes, beside their indices; a pass whose digit is the same in every key is
//     skipped;
//   - rows shorter than `radix_threshold`: std::sort of the pairs (a radix pass costs a 256-entry histogram);
//   - top_k with k small against the row: std::partial_sort of the pairs (a heap of k, O(n log k)).

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/sort_keys.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace kiln::kernels::cpu {
namespace {

using runtime::Array;
using std::int64_t;
using Index = std::uint32_t;

// Below this many elements a row is sorted by comparisons.
constexpr int64_t radix_threshold = 64;

// From this many elements on, a row of 32-bit keys is sorted by 11-bit digits rather than bytes (by_packed_radix).
constexpr int64_t long_row = 2048;

// Elements ordered by one task of parallel_for (at least a row).
constexpr int64_t elements_per_task = 32768;

template <class Key>
struct Entry {
  Key key;
  Index index;
  friend bool operator<(const Entry& a, const Entry& b) {
    return a.key < b.key || (a.key == b.key && a.index < b.index);
  }
};

// The buffers of one task, reused from row to row.
template <class T>
class RowOrder {
 public:
  using Key = SortKey<T>;

  // The contiguous copy of a line of `length` elements `stride` apart (the line itself when stride is 1).
  const T* contiguous(const T* line, int64_t length, int64_t stride) {
    if (stride == 1) return line;
    values_.resize(static_cast<std::size_t>(length));
    for (int64_t j = 0; j < length; ++j) values_[static_cast<std::size_t>(j)] = line[j * stride];
    return values_.data();
  }

  // The indices of `row` in order (all `length` of them).
  const Index* order(const T* row, int64_t length, bool descending) {
    if (length < radix_threshold) return by_comparison(row, length, length, descending);
    if constexpr (sizeof(Key) == 4)
      return length >= long_row ? by_packed_radix<11>(row, length, descending)
                                : by_packed_radix<8>(row, length, descending);
    return by_radix(row, length, descending);
  }

  // The first `count` indices of the order.
  const Index* first(const T* row, int64_t length, int64_t count, bool descending) {
    if (count * 4 >= length) return order(row, length, descending);
    return by_comparison(row, length, count, descending);
  }

 private:
  const Index* by_comparison(const T* row, int64_t length, int64_t count, bool descending) {
    entries_.resize(static_cast<std::size_t>(length));
    for (int64_t j = 0; j < length; ++j)
      entries_[static_cast<std::size_t>(j)] = {sort_key(row[j], descending), static_cast<Index>(j)};
    if (count == length)
      std::sort(entries_.begin(), entries_.end());
    else
      std::partial_sort(entries_.begin(), entries_.begin() + count, entries_.end());
    indices_.resize(static_cast<std::size_t>(count));
    for (int64_t j = 0; j < count; ++j)
      indices_[static_cast<std::size_t>(j)] = entries_[static_cast<std::size_t>(j)].index;
    return indices_.data();
  }

  const Index* by_radix(const T* row, int64_t length, bool descending) {
    constexpr int digits = sizeof(Key);
    const auto size = static_cast<std::size_t>(length);
    keys_.resize(size);
    key_scratch_.resize(size);
    indices_.resize(size);
    index_scratch_.resize(size);
    std::array<std::array<Index, 256>, digits> counts{};
    for (std::size_t j = 0; j < size; ++j) {
      const Key key = sort_key(row[j], descending);
      keys_[j] = key;
      indices_[j] = static_cast<Index>(j);
      for (int digit = 0; digit < digits; ++digit)
        ++counts[static_cast<std::size_t>(digit)][(key >> (8 * digit)) & 0xff];
    }
    for (int digit = 0; digit < digits; ++digit) {
      auto& count = counts[static_cast<std::size_t>(digit)];
      const int shift = 8 * digit;
      if (count[(keys_[0] >> shift) & 0xff] == size) continue;  // one value of this byte: nothing moves
      Index start = 0;
      for (Index& bucket : count) start += std::exchange(bucket, start);
      for (std::size_t j = 0; j < size; ++j) {
        const Index at = count[(keys_[j] >> shift) & 0xff]++;
        key_scratch_[at] = keys_[j];
        index_scratch_[at] = indices_[j];
      }
      keys_.swap(key_scratch_);
      indices_.swap(index_scratch_);
    }
    return indices_.data();
  }

  // 32-bit keys: a (key, index) pair is one 64-bit word, the key above the index, so a pass moves one word per
  // element to one place, where by_radix moves a key and an index to two (twice the scattered streams).
  // 32-bit keys: a (key, index) pair is one 64-bit word, the key above the index, so a pass moves one word per
  // element to one place, where by_radix moves a key and an index to two. Digits of `bits`: each pass costs its
  // element moves plus a prefix sum over 2^bits buckets, so long rows take 11-bit digits (three passes instead of
  // four) and shorter ones bytes. argsort of f32, one thread's share of rows on the 2-core VM, ns per element:
  // rows of 4096: 20.8 (key and index arrays, bytes) -> 19.4 (packed, bytes) -> 17.4 (packed, 11 bits); 65536:
  // 19.7 -> 17.7 -> 15.0; 1024: 20.8 -> 19.0 -> 18.8; 256: 22.3 -> 21.9 -> 27.9.
  template <int bits>
  const Index* by_packed_radix(const T* row, int64_t length, bool descending) {
    constexpr int passes = (32 + bits - 1) / bits;
    constexpr std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
    const auto size = static_cast<std::size_t>(length);
    items_.resize(size);
    item_scratch_.resize(size);
    std::array<std::array<Index, std::size_t{1} << bits>, passes> counts{};
    for (std::size_t j = 0; j < size; ++j) {
      const Key key = sort_key(row[j], descending);
      items_[j] = std::uint64_t{key} << 32 | j;
      for (int digit = 0; digit < passes; ++digit)
        ++counts[static_cast<std::size_t>(digit)][(key >> (bits * digit)) & mask];
    }
    for (int digit = 0; digit < passes; ++digit) {
      auto& count = counts[static_cast<std::size_t>(digit)];
      const int shift = 32 + bits * digit;
      if (count[(items_[0] >> shift) & mask] == size) continue;  // one value of this digit: nothing moves
      Index start = 0;
      for (Index& bucket : count) start += std::exchange(bucket, start);
      for (std::size_t j = 0; j < size; ++j) item_scratch_[count[(items_[j] >> shift) & mask]++] = items_[j];
      items_.swap(item_scratch_);
    }
    indices_.resize(size);
    for (std::size_t j = 0; j < size; ++j) indices_[j] = static_cast<Index>(items_[j]);
    return indices_.data();
  }

  std::vector<T> values_;
  std::vector<std::uint64_t> items_, item_scratch_;
  std::vector<Entry<Key>> entries_;
  std::vector<Key> keys_, key_scratch_;
  std::vector<Index> indices_, index_scratch_;
};

// The lines of `shape` around `axis`.
struct Lines {
  int64_t outer = 1, length = 1, inner = 1;
};

Lines lines_of(const Shape& shape, int axis, const char* op) {
  Lines lines;
  for (int d = 0; d < axis; ++d) lines.outer *= shape[d];
  lines.length = shape[axis];
  for (int d = axis + 1; d < shape.rank(); ++d) lines.inner *= shape[d];
  if (lines.length > int64_t{std::numeric_limits<Index>::max()})
    throw ValueError(op, "cannot order lines longer than 2^32 - 1 elements, got " + std::to_string(lines.length),
                     std::string());
  return lines;
}

int64_t grain_for(int64_t length) { return std::max<int64_t>(1, elements_per_task / std::max<int64_t>(length, 1)); }

template <class T>
void order_lines(bool values, bool descending, const Lines& lines, const T* x, void* out) {
  runtime::parallel_for(lines.outer * lines.inner, grain_for(lines.length), [&](int64_t begin, int64_t end) {
    RowOrder<T> order;
    for (int64_t line = begin; line < end; ++line) {
      const int64_t base = line / lines.inner * lines.length * lines.inner + line % lines.inner;
      const T* row = order.contiguous(x + base, lines.length, lines.inner);
      const Index* sorted = order.order(row, lines.length, descending);
      if (values) {
        T* result = static_cast<T*>(out) + base;
        for (int64_t j = 0; j < lines.length; ++j) result[j * lines.inner] = row[sorted[j]];
      } else {
        int64_t* result = static_cast<int64_t*>(out) + base;
        for (int64_t j = 0; j < lines.length; ++j) result[j * lines.inner] = sorted[j];
      }
    }
  });
}

}  // namespace

void sort(ir::Op op, const ir::Attributes& attributes, const Array& input, const Array& output) {
  const std::string name(ir::name(op));
  const int rank = input.shape.rank();
  if ((op != ir::Op::sort && op != ir::Op::argsort) || attributes.axis < 0 || attributes.axis >= rank)
    throw InternalError(name, "not an ordering along an axis of the input", std::string());
  const DType result_dtype = op == ir::Op::sort ? input.dtype : DType::i64;
  if (output.dtype != result_dtype || !(output.shape == input.shape))
    throw InternalError(name, "output unlike the input's shape or the result's dtype", std::string());
  if (input.shape.numel() == 0) return;
  const Lines lines = lines_of(input.shape, static_cast<int>(attributes.axis), name.c_str());
  visit_dtype(input.dtype, [&]<class T>() {
    order_lines<T>(op == ir::Op::sort, attributes.descending, lines, input.data<T>(), output.mutable_raw());
  });
}

void top_k(int64_t k, const Array& input, const Array& output) {
  const int rank = input.shape.rank();
  if (rank == 0 || output.dtype != DType::i64 || output.shape.rank() != rank || output.shape[rank - 1] != k)
    throw InternalError("top_k", "output unlike i64 [..., k]", std::string());
  const Lines lines = lines_of(input.shape, rank - 1, "top_k");
  if (k < 0 || k > lines.length)
    throw ValueError(
        "top_k",
        "k = " + std::to_string(k) + " is outside [0, " + std::to_string(lines.length) + "], the size of the last axis",
        std::string());
  if (output.shape.numel() == 0) return;
  int64_t* out = output.mutable_data<int64_t>();
  visit_dtype(input.dtype, [&]<class T>() {
    const T* x = input.data<T>();
    runtime::parallel_for(lines.outer, grain_for(lines.length), [&](int64_t begin, int64_t end) {
      RowOrder<T> order;
      for (int64_t row = begin; row < end; ++row) {
        const Index* largest = order.first(x + row * lines.length, lines.length, k, true);
        for (int64_t j = 0; j < k; ++j) out[row * k + j] = largest[j];
      }
    });
  });
}

}  // namespace kiln::kernels::cpu
