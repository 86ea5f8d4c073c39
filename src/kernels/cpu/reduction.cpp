// Reductions (reduce_sum/mean/max/min/prod over a set of axes), argmax and argmin.
//
// Plan. Size-1 axes are dropped and neighbouring axes that are both reduced
// or both kept are merged, so every problem is a short list of alternating
// kept/reduced axes. It is then reduced one reduced axis at a time, innermost
// first, by one of two kernels:
//   rows:    [P, L] -> [P], the reduced axis innermost (softmax, layernorm,
//            and the full reduction with P = 1);
//   columns: [A, R, B] -> [A, B], a reduced axis with B kept elements inside.
// Intermediate results live in temporaries of the accumulation type.
//
// Determinism. The order of every operation depends on the shape only:
//   rows    split into leaves of `leaf_size` elements; a leaf is reduced into
//           a vector of lane partials (8 vector accumulators, combined as a
//           tree), leaves are combined as a binary tree (left half rounded
//           up), lanes at the end as a tree. Threads evaluate whole subtrees,
//           so their number changes which thread computes what, never the
//           arithmetic.
//   columns rows are taken in blocks of 8 (combined as a tree), blocks are
//           folded in order within groups of `group_rows` rows, groups are
//           combined as a binary tree. Columns are independent, so how they
//           are split among threads does not matter (a vector lane and the
//           scalar tail do the same IEEE operations).
// Float sums are therefore blocked/pairwise: the error grows like log n, not n.
//
// Identities for empty reductions: sum 0, prod 1, max -inf (floats) or the
// lowest value (ints; NumPy raises instead), min +inf or the highest value;
// mean of nothing is 0/0 = NaN. max/min propagate NaN. Integer sum and prod
// wrap (computed in unsigned arithmetic). bool max is any, min is all.

#include "kernels/cpu/combining_ops.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_math.h"
#include "runtime/parallel.h"

#include <kiln/error.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

namespace kiln::kernels::cpu {
namespace {

using runtime::Array;
using std::int64_t;

// One 64-byte vector of V (a zmm register with AVX-512; GCC splits it on
// narrower machines).
template <class V>
struct Simd {
  static constexpr int width = 64 / static_cast<int>(sizeof(V));
  typedef V type __attribute__((vector_size(64)));
};
template <class V>
using Vec = typename Simd<V>::type;

template <class V>
Vec<V> load(const V* pointer) {
  Vec<V> vector;
  std::memcpy(&vector, pointer, sizeof(vector));
  return vector;
}
template <class V>
void store(V* pointer, Vec<V> vector) {
  std::memcpy(pointer, &vector, sizeof(vector));
}
template <class V>
Vec<V> broadcast(V value) {
  Vec<V> vector;
  for (int lane = 0; lane < Simd<V>::width; ++lane) vector[lane] = value;
  return vector;
}

// One register of V (vector_math::kRegisterBytes), where a kernel compares and selects: GCC splits a 64-byte Vec's
// comparisons and selects lane by lane or through the stack on narrower machines (AVX2), as vector_math.h says. Sums
// keep Vec, whose lane partials fix their order.
template <class V>
struct InRegister {
  static constexpr int bytes = static_cast<int>(vector_math::kRegisterBytes);
  static constexpr int width = bytes / static_cast<int>(sizeof(V));
  typedef V type __attribute__((vector_size(bytes)));
};
template <class V>
using Register = typename InRegister<V>::type;

template <class V>
Register<V> load_register(const V* pointer) {
  Register<V> vector;
  std::memcpy(&vector, pointer, sizeof(vector));
  return vector;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- rows: [P, L] -> [P] -------------------------------------------------------

// Elements per leaf: 8 vector accumulators see leaf_size / (8 * width) adds
// each (32 for f32, 64 for f64) before the tree takes over. Long enough that
// the per-leaf work (tail, tree) stays small next to the streaming loop; a
// softmax row of 4096 f32 is one leaf.
constexpr int64_t leaf_size = 4096;
// Rows shorter than this are folded left to right in scalars (a vector pass
// would spend more on its horizontal step than on the row). Longer rows
// leave room for reduce_leaf's backward partial load.
template <class V>
constexpr int64_t short_row = 2 * Simd<V>::width;

// Lane selectors for __builtin_shufflevector (GCC >= 12 and clang), which
// needs its lane indices as constant expressions.
template <int width, int half>
struct RotateLanes {  // lane l takes lane (l + half) mod width
  static constexpr std::array<int, width> lanes = [] {
    std::array<int, width> result{};
    for (int l = 0; l < width; ++l) result[static_cast<std::size_t>(l)] = (l + half) % width;
    return result;
  }();
};
template <class Table, class Vector, std::size_t... lane>
Vector shuffle(Vector a, Vector b, std::index_sequence<lane...>) {
  return __builtin_shufflevector(a, b, Table::lanes[lane]...);
}

// Lane l combined with lane l + half for half = width/2, ..., 1 (a tree);
// the result is lane 0.
template <class Op, class V, int half = Simd<V>::width / 2>
V horizontal(Vec<V> vector) {
  constexpr int width = Simd<V>::width;
  vector = Op::apply(vector, shuffle<RotateLanes<width, half>>(vector, vector, std::make_index_sequence<width>()));
  if constexpr (half > 1)
    return horizontal<Op, V, half / 2>(vector);
  else
    return vector[0];
}

// Integer vectors with V's lane count and lane size (vector conditions).
template <class V>
struct MaskOf {
  using Index =
      std::conditional_t<sizeof(V) == 1, std::int8_t, std::conditional_t<sizeof(V) == 4, std::int32_t, std::int64_t>>;
  typedef Index type __attribute__((vector_size(64)));
};

// One leaf (count <= leaf_size) into a vector of lane partials: eight
// accumulators over blocks of 8 vectors, the remaining whole vectors into the
// first, the last partial vector into the second, then a tree. The partial
// vector is loaded ending at x + count, so it reaches back before x when
// count < width: the caller guarantees that those elements are readable
// (earlier elements of the same row); their lanes take the identity.
template <class Op, class V>
Vec<V> reduce_leaf(const V* x, int64_t count) {
  constexpr int width = Simd<V>::width;
  const Vec<V> identity = broadcast(Op::template identity<V>());
  Vec<V> a0 = identity, a1 = identity, a2 = identity, a3 = identity;
  Vec<V> a4 = identity, a5 = identity, a6 = identity, a7 = identity;
  int64_t i = 0;
  for (; i + 8 * width <= count; i += 8 * width) {
    a0 = Op::apply(a0, load(x + i));
    a1 = Op::apply(a1, load(x + i + width));
    a2 = Op::apply(a2, load(x + i + 2 * width));
    a3 = Op::apply(a3, load(x + i + 3 * width));
    a4 = Op::apply(a4, load(x + i + 4 * width));
    a5 = Op::apply(a5, load(x + i + 5 * width));
    a6 = Op::apply(a6, load(x + i + 6 * width));
    a7 = Op::apply(a7, load(x + i + 7 * width));
  }
  for (; i + width <= count; i += width) a0 = Op::apply(a0, load(x + i));
  if (i < count) {
    using Index = typename MaskOf<V>::Index;
    typename MaskOf<V>::type lane, first_new;
    for (int l = 0; l < width; ++l) {
      lane[l] = static_cast<Index>(l);
      first_new[l] = static_cast<Index>(width - (count - i));
    }
    a1 = Op::apply(a1, lane >= first_new ? load(x + count - width) : identity);
  }
  a0 = Op::apply(a0, a1);
  a2 = Op::apply(a2, a3);
  a4 = Op::apply(a4, a5);
  a6 = Op::apply(a6, a7);
  return Op::apply(Op::apply(a0, a2), Op::apply(a4, a6));
}

// The leaf tree over `leaves` leaves starting at leaf `first` of a row of
// `count` elements: the left subtree takes the larger half.
template <class Op, class V>
Vec<V> reduce_leaves(const V* row, int64_t count, int64_t first, int64_t leaves) {
  if (leaves == 1) {
    int64_t begin = first * leaf_size;
    return reduce_leaf<Op>(row + begin, std::min(leaf_size, count - begin));
  }
  int64_t left = (leaves + 1) / 2;
  return Op::apply(reduce_leaves<Op>(row, count, first, left),
                   reduce_leaves<Op>(row, count, first + left, leaves - left));
}

// The subtrees of the leaf tree at `depth` levels below the root, in order:
// (first leaf, leaf count) each. Evaluating them separately and combining
// them with combine_subtrees gives exactly reduce_leaves.
void collect_subtrees(int64_t first, int64_t leaves, int depth, std::vector<std::pair<int64_t, int64_t>>& out) {
  if (depth == 0 || leaves == 1) {
    out.emplace_back(first, leaves);
    return;
  }
  int64_t left = (leaves + 1) / 2;
  collect_subtrees(first, left, depth - 1, out);
  collect_subtrees(first + left, leaves - left, depth - 1, out);
}

template <class Op, class V>
Vec<V> combine_subtrees(int64_t leaves, int depth, const Vec<V>* results, std::size_t& next) {
  if (depth == 0 || leaves == 1) return results[next++];
  int64_t left = (leaves + 1) / 2;
  Vec<V> a = combine_subtrees<Op, V>(left, depth - 1, results, next);
  Vec<V> b = combine_subtrees<Op, V>(leaves - left, depth - 1, results, next);
  return Op::apply(a, b);
}

template <class Op, class V>
void reduce_rows(const V* x, int64_t rows, int64_t length, V* out) {
  if (rows == 0) return;
  if (length < short_row<V>) {
    // A left fold per row, run for a block of rows side by side so that the
    // rows' dependency chains overlap (and GCC can gather across rows).
    constexpr int64_t block = 64;
    runtime::parallel_for(ceil_div(rows, block), std::max<int64_t>(1, 16384 / (block * std::max<int64_t>(length, 1))),
                          [&](int64_t begin, int64_t end) {
                            for (int64_t row0 = begin * block; row0 < std::min(rows, end * block); row0 += block) {
                              int64_t count = std::min(block, rows - row0);
                              const V* data = x + row0 * length;
                              V acc[block];
                              for (int64_t r = 0; r < count; ++r) acc[r] = Op::template identity<V>();
                              for (int64_t i = 0; i < length; ++i)
                                for (int64_t r = 0; r < count; ++r) acc[r] = Op::apply(acc[r], data[r * length + i]);
                              std::copy_n(acc, count, out + row0);
                            }
                          });
    return;
  }
  int64_t leaves = ceil_div(length, leaf_size);
  // Enough subtrees that every thread gets several.
  int depth = 0;
  int64_t wanted = 8 * runtime::thread_count();
  while (rows * (int64_t{1} << depth) < wanted && (int64_t{1} << depth) < leaves) ++depth;
  std::vector<std::pair<int64_t, int64_t>> subtrees;
  collect_subtrees(0, leaves, depth, subtrees);
  auto per_row = static_cast<int64_t>(subtrees.size());
  int64_t elements_per_task = length / per_row + 1;
  int64_t grain = std::max<int64_t>(1, 32768 / elements_per_task);
  if (per_row == 1) {
    runtime::parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row)
        out[row] = horizontal<Op, V>(reduce_leaves<Op>(x + row * length, length, 0, leaves));
    });
    return;
  }
  std::vector<Vec<V>> results(static_cast<std::size_t>(rows * per_row));
  runtime::parallel_for(rows * per_row, grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      auto [first, count] = subtrees[static_cast<std::size_t>(task % per_row)];
      results[static_cast<std::size_t>(task)] = reduce_leaves<Op>(x + task / per_row * length, length, first, count);
    }
  });
  for (int64_t row = 0; row < rows; ++row) {
    std::size_t next = 0;
    out[row] = horizontal<Op, V>(combine_subtrees<Op, V>(leaves, depth, results.data() + row * per_row, next));
  }
}

// ---- columns: [A, R, B] -> [A, B] ----------------------------------------------

constexpr int64_t block_rows = 8;    // rows combined as a tree in registers
constexpr int64_t group_rows = 256;  // rows folded in order before the group tree
// Columns per task: the accumulators (chunk_bytes) stay in L1 while 8 rows
// stream through.
constexpr int64_t chunk_bytes = 4096;

// Reduces `rows` (<= block_rows) rows at `x`, `stride` apart: a tree for a
// full block, a left fold otherwise. X is V or Vec<V>; `get(i)` loads row i.
template <class Op, class X, class Get>
X reduce_block(int64_t rows, Get get) {
  if (rows == block_rows) {
    X r01 = Op::apply(get(0), get(1)), r23 = Op::apply(get(2), get(3));
    X r45 = Op::apply(get(4), get(5)), r67 = Op::apply(get(6), get(7));
    return Op::apply(Op::apply(r01, r23), Op::apply(r45, r67));
  }
  X acc = get(0);
  for (int64_t i = 1; i < rows; ++i) acc = Op::apply(acc, get(i));
  return acc;
}

// One group: rows [0, rows) of columns [begin, end) of the [rows, stride]
// matrix at x into out[begin, end). end - begin <= chunk_bytes / sizeof(V).
// Registers (InRegister), not Vec: each column is folded alone, so the width
// changes no sum's order, and GCC split the 64-byte max and min (a compare, an
// unordered compare, an or and a blend) through the stack on AVX2: a max over
// axis 0 of 4096^2 floats took twice a sum's time.
template <class Op, class V>
void reduce_group(const V* x, int64_t rows, int64_t stride, int64_t begin, int64_t end, V* out) {
  constexpr int width = InRegister<V>::width;
  constexpr int64_t max_vectors = chunk_bytes / InRegister<V>::bytes;
  const int64_t vectors = (end - begin) / width;
  const int64_t tail_begin = begin + vectors * width, tail = end - tail_begin;  // tail < width
  Register<V> acc[max_vectors];
  V tail_acc[width];
  Register<V> identity;
  for (int lane = 0; lane < width; ++lane) identity[lane] = Op::template identity<V>();
  for (int64_t v = 0; v < vectors; ++v) acc[v] = identity;
  for (int64_t c = 0; c < tail; ++c) tail_acc[c] = Op::template identity<V>();
  for (int64_t row = 0; row < rows; row += block_rows) {
    int64_t count = std::min(block_rows, rows - row);
    const V* base = x + row * stride;
    for (int64_t v = 0; v < vectors; ++v) {
      const V* column = base + begin + v * width;
      acc[v] = Op::apply(
          acc[v], reduce_block<Op, Register<V>>(count, [&](int64_t i) { return load_register(column + i * stride); }));
    }
    // The columns past the last whole vector: the same operations in scalars.
    for (int64_t c = 0; c < tail; ++c) {
      const V* column = base + tail_begin + c;
      tail_acc[c] = Op::apply(tail_acc[c], reduce_block<Op, V>(count, [&](int64_t i) { return column[i * stride]; }));
    }
  }
  for (int64_t v = 0; v < vectors; ++v) std::memcpy(out + begin + v * width, &acc[v], sizeof(acc[v]));
  std::copy_n(tail_acc, tail, out + tail_begin);
}

// Combines groups [first, first + count) of `partials` (group g of item a at
// partials + (a * groups + g) * columns) as a tree, in place into group
// `first`, for columns [begin, end).
template <class Op, class V>
void combine_groups(V* partials, int64_t columns, int64_t first, int64_t count, int64_t begin, int64_t end) {
  if (count == 1) return;
  int64_t left = (count + 1) / 2;
  combine_groups<Op>(partials, columns, first, left, begin, end);
  combine_groups<Op>(partials, columns, first + left, count - left, begin, end);
  V* a = partials + first * columns;
  const V* b = partials + (first + left) * columns;
  constexpr int width = Simd<V>::width;
  int64_t column = begin;
  for (; column + width <= end; column += width) store(a + column, Op::apply(load(a + column), load(b + column)));
  for (; column < end; ++column) a[column] = Op::apply(a[column], b[column]);
}

template <class Op, class V>
void reduce_columns(const V* x, int64_t outer, int64_t rows, int64_t columns, V* out) {
  if (outer == 0 || columns == 0) return;
  if (rows == 0) {
    std::fill_n(out, outer * columns, Op::template identity<V>());
    return;
  }
  constexpr int width = Simd<V>::width;
  int64_t groups = ceil_div(rows, group_rows);
  // Column chunks: at most chunk_bytes, smaller (whole vectors) when the
  // other axes give too few tasks to keep every thread busy.
  int64_t chunk = chunk_bytes / static_cast<int64_t>(sizeof(V));
  int64_t wanted = 4 * runtime::thread_count();
  while (chunk > width && outer * groups * ceil_div(columns, chunk) < wanted) chunk /= 2;
  int64_t chunks = ceil_div(columns, chunk);

  std::unique_ptr<V[]> partials;
  if (groups > 1) partials.reset(new V[static_cast<std::size_t>(outer * groups * columns)]);
  int64_t work_per_task = std::min(rows, group_rows) * std::min(columns, chunk);
  int64_t grain = std::max<int64_t>(1, 32768 / work_per_task);
  runtime::parallel_for(outer * groups * chunks, grain, [&](int64_t task_begin, int64_t task_end) {
    for (int64_t task = task_begin; task < task_end; ++task) {
      int64_t c = task % chunks, g = task / chunks % groups, a = task / chunks / groups;
      int64_t begin = c * chunk, end = std::min(columns, begin + chunk);
      int64_t first_row = g * group_rows;
      const V* source = x + (a * rows + first_row) * columns;
      V* destination = groups > 1 ? partials.get() + (a * groups + g) * columns : out + a * columns;
      reduce_group<Op>(source, std::min(group_rows, rows - first_row), columns, begin, end, destination);
    }
  });
  if (groups == 1) return;
  runtime::parallel_for(outer * chunks, std::max<int64_t>(1, 32768 / (groups * std::min(columns, chunk))),
                        [&](int64_t task_begin, int64_t task_end) {
                          for (int64_t task = task_begin; task < task_end; ++task) {
                            int64_t c = task % chunks, a = task / chunks;
                            int64_t begin = c * chunk, end = std::min(columns, begin + chunk);
                            V* item = partials.get() + a * groups * columns;
                            combine_groups<Op>(item, columns, 0, groups, begin, end);
                            std::copy(item + begin, item + end, out + a * columns + begin);
                          }
                        });
}

// ---- planning ------------------------------------------------------------------

// A shape with size-1 axes dropped and neighbours of the same kind merged.
struct Collapsed {
  std::vector<int64_t> sizes;
  std::vector<bool> reduced;

  void push(int64_t size, bool is_reduced) {
    if (size == 1) return;
    if (!sizes.empty() && reduced.back() == is_reduced) {
      sizes.back() *= size;
      return;
    }
    sizes.push_back(size);
    reduced.push_back(is_reduced);
  }
  int64_t numel() const {
    int64_t count = 1;
    for (int64_t size : sizes) count *= size;
    return count;
  }
};

template <class Op, class V>
void reduce_typed(const V* input, const Collapsed& shape, V* output) {
  Collapsed current = shape;
  const V* source = input;
  std::unique_ptr<V[]> temporary;  // holds `source` between stages
  while (true) {
    int reduced_axes = 0;
    for (bool r : current.reduced) reduced_axes += r;
    if (reduced_axes == 0) {
      if (source != output) std::copy(source, source + current.numel(), output);
      return;
    }
    Collapsed next;
    int last = static_cast<int>(current.sizes.size()) - 1;
    bool final_stage = reduced_axes == 1;
    std::unique_ptr<V[]> result;
    int64_t total = current.numel();
    if (current.reduced[static_cast<std::size_t>(last)]) {
      int64_t length = current.sizes[static_cast<std::size_t>(last)];
      for (int i = 0; i < last; ++i)
        next.push(current.sizes[static_cast<std::size_t>(i)], current.reduced[static_cast<std::size_t>(i)]);
      V* destination = output;
      if (!final_stage) {
        result.reset(new V[static_cast<std::size_t>(total / length)]);
        destination = result.get();
      }
      reduce_rows<Op>(source, total / length, length, destination);
    } else {
      int64_t columns = current.sizes[static_cast<std::size_t>(last)];
      int64_t rows = current.sizes[static_cast<std::size_t>(last - 1)];
      for (int i = 0; i < last - 1; ++i)
        next.push(current.sizes[static_cast<std::size_t>(i)], current.reduced[static_cast<std::size_t>(i)]);
      next.push(columns, false);
      V* destination = output;
      if (!final_stage) {
        result.reset(new V[static_cast<std::size_t>(total / rows)]);
        destination = result.get();
      }
      reduce_columns<Op>(source, total / (rows * columns), rows, columns, destination);
    }
    if (final_stage) return;
    temporary = std::move(result);
    source = temporary.get();
    current = next;
  }
}

template <class Op, class V>
void reduce_with(const Array& input, const Collapsed& shape, const Array& output) {
  auto* out = static_cast<V*>(output.mutable_raw());
  if (input.shape.numel() == 0) {
    std::fill_n(out, output.shape.numel(), Op::template identity<V>());
    return;
  }
  reduce_typed<Op, V>(static_cast<const V*>(input.raw()), shape, out);
}

template <class Op>
void dispatch(const Array& input, const Collapsed& shape, const Array& output) {
  visit_dtype(input.dtype, [&]<class T>() { reduce_with<Op, Accumulator<Op, T>>(input, shape, output); });
}

// ---- argmax and argmin -------------------------------------------------------------

// The first index of the maximum (`smallest`: the minimum) of x[begin, end) of the row at x, and its value; NaN
// counts as the extreme either way (the first NaN wins), like NumPy.
template <class T>
bool is_nan(T value) {
  if constexpr (std::is_floating_point_v<T>)
    return value != value;
  else
    return false;
}

// Whether `candidate`, later in the row than `best`, takes its place.
template <bool smallest, class T>
bool beats(T candidate, T best) {
  return (smallest ? candidate < best : candidate > best) || (is_nan(candidate) && !is_nan(best));
}

template <bool smallest, class T>
std::pair<int64_t, T> arg_extreme_scalar(const T* x, int64_t begin, int64_t end) {
  int64_t best_index = begin;
  T best = x[begin];
  for (int64_t i = begin + 1; i < end && !is_nan(best); ++i)
    if (beats<smallest>(x[i], best)) {
      best_index = i;
      best = x[i];
    }
  return {best_index, best};
}

// One pass of vectors: `sets` interleaved sets of lanes (vector s of every group of `sets` consecutive vectors goes
// to set s), each lane keeping the best value it has seen and where. A lane sees its elements in order, so a strict
// comparison keeps the first of equal ones, and a NaN replaces a number but not an earlier NaN. Then the lanes of
// every set: the best value, and the smallest index among the lanes holding it. Several sets, because one lane's
// compare and select wait for its previous ones (4 cycles); four keep the loop at the loads' pace. The index lanes
// count from `begin` in integers of T's width, so a segment is at most 2^31 elements for 4-byte types. Registers
// (InRegister), not Vec: with Vec's compare and two selects, scalar code on AVX2, argmax over 4096 x 4096 floats took
// 33 ms on Zen 3, against 2.3 ms for reduce_max over the same rows and 10 ms for PyTorch's argmax.
template <bool smallest, class T>
std::pair<int64_t, T> arg_extreme_vector(const T* x, int64_t begin, int64_t end) {
  using Index = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  using Values = Register<T>;
  using Indices = Register<Index>;
  constexpr int width = InRegister<T>::width;
  constexpr int sets = 4;
  Values best[sets];
  Indices best_index[sets], lane_index[sets];
  for (int set = 0; set < sets; ++set) {
    // Every set starts from the first vector, which a set later compares with itself (never taken).
    best[set] = load_register(x + begin);
    for (int lane = 0; lane < width; ++lane) {
      best_index[set][lane] = static_cast<Index>(lane);
      lane_index[set][lane] = static_cast<Index>(set * width + lane);
    }
  }
  auto visit = [&](int set, int64_t i) __attribute__((always_inline)) {
    const Values value = load_register(x + i);
    Indices take;
    if constexpr (smallest)
      take = value < best[set];
    else
      take = value > best[set];
    if constexpr (std::is_floating_point_v<T>) take |= (value != value) & (best[set] == best[set]);
    best[set] = take ? value : best[set];
    best_index[set] = take ? lane_index[set] : best_index[set];
  };
  int64_t i = begin;
  for (; i + sets * width <= end; i += sets * width) {
#pragma GCC unroll 4
    for (int set = 0; set < sets; ++set) {
      visit(set, i + set * width);
      lane_index[set] += static_cast<Index>(sets * width);
    }
  }
  for (; i + width <= end; i += width) {  // the last whole vectors, into the first set (its lanes still in order)
    for (int lane = 0; lane < width; ++lane) lane_index[0][lane] = static_cast<Index>(i - begin + lane);
    visit(0, i);
  }
  std::pair<int64_t, T> result = {begin + best_index[0][0], best[0][0]};
  for (int set = 0; set < sets; ++set)
    for (int lane = 0; lane < width; ++lane) {
      const T value = best[set][lane];
      const int64_t index = begin + best_index[set][lane];
      const bool same = value == result.second || (is_nan(value) && is_nan(result.second));
      if (beats<smallest>(value, result.second) || (same && index < result.first)) result = {index, value};
    }
  if (i < end && !is_nan(result.second)) {  // the last elements, after every one the lanes saw
    const auto tail = arg_extreme_scalar<smallest>(x, i, end);
    if (beats<smallest>(tail.second, result.second)) result = tail;
  }
  return result;
}

template <bool smallest, class T>
std::pair<int64_t, T> arg_extreme_range(const T* x, int64_t begin, int64_t end) {
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    constexpr int64_t longest = int64_t{1} << 30;  // within the index lanes
    if (end - begin < 2 * InRegister<T>::width) return arg_extreme_scalar<smallest>(x, begin, end);
    auto best = arg_extreme_vector<smallest>(x, begin, std::min(end, begin + longest));
    for (int64_t first = begin + longest; first < end && !is_nan(best.second); first += longest) {
      const auto next = end - first < 2 * InRegister<T>::width
                            ? arg_extreme_scalar<smallest>(x, first, end)
                            : arg_extreme_vector<smallest>(x, first, std::min(end, first + longest));
      if (beats<smallest>(next.second, best.second)) best = next;
    }
    return best;
  } else {
    return arg_extreme_scalar<smallest>(x, begin, end);
  }
}

template <bool smallest, class T>
void arg_extreme_typed(const T* x, int64_t outer, int64_t length, int64_t inner, int64_t* out) {
  if (inner == 1) {
    // Rows, each split into segments when there are too few rows to go
    // around; segments are combined in order (the result is exact, so any
    // split gives the same answer).
    constexpr int64_t segment = 16 * leaf_size;
    int64_t segments = 1;
    if (outer < 4 * runtime::thread_count()) segments = ceil_div(length, segment);
    int64_t grain = std::max<int64_t>(1, 32768 / std::min(length, segment));
    if (segments == 1) {  // each row's index straight into out (many short rows: no pairs to write and read back)
      runtime::parallel_for(outer, grain, [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row)
          out[row] = arg_extreme_range<smallest>(x + row * length, 0, length).first;
      });
      return;
    }
    std::vector<std::pair<int64_t, T>> results(static_cast<std::size_t>(outer * segments));
    runtime::parallel_for(outer * segments, grain, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        int64_t row = task / segments, first = task % segments * segment;
        const T* data = x + row * length;
        results[static_cast<std::size_t>(task)] =
            arg_extreme_range<smallest>(data, first, std::min(length, first + segment));
      }
    });
    for (int64_t row = 0; row < outer; ++row) {
      auto best = results[static_cast<std::size_t>(row * segments)];
      for (int64_t s = 1; s < segments && !is_nan(best.second); ++s) {
        const auto& candidate = results[static_cast<std::size_t>(row * segments + s)];
        if (beats<smallest>(candidate.second, best.second)) best = candidate;
      }
      out[row] = best.first;
    }
    return;
  }
  // Keep a running best per column of a chunk while the rows stream by.
  constexpr int64_t chunk = 1024;
  int64_t chunks = ceil_div(inner, chunk);
  runtime::parallel_for(outer * chunks, std::max<int64_t>(1, 32768 / (length * std::min(inner, chunk))),
                        [&](int64_t task_begin, int64_t task_end) {
                          T best[chunk];
                          for (int64_t task = task_begin; task < task_end; ++task) {
                            int64_t a = task / chunks, begin = task % chunks * chunk;
                            int64_t width = std::min(chunk, inner - begin);
                            const T* item = x + a * length * inner + begin;
                            int64_t* index = out + a * inner + begin;
                            for (int64_t j = 0; j < width; ++j) {
                              best[j] = item[j];
                              index[j] = 0;
                            }
                            for (int64_t r = 1; r < length; ++r) {
                              const T* row = item + r * inner;
                              for (int64_t j = 0; j < width; ++j) {
                                const bool take = beats<smallest>(row[j], best[j]);
                                best[j] = take ? row[j] : best[j];
                                index[j] = take ? r : index[j];
                              }
                            }
                          }
                        });
}

}  // namespace

void reduce(ir::Op op, const std::vector<int64_t>& axes, const Array& input, const Array& output) {
  const Shape& shape = input.shape;
  Collapsed collapsed;
  int64_t count = 1;  // elements per output, for mean
  for (int axis = 0; axis < shape.rank(); ++axis) {
    bool is_reduced = std::find(axes.begin(), axes.end(), axis) != axes.end();
    if (is_reduced) count *= shape[axis];
    collapsed.push(shape[axis], is_reduced);
  }
  if (output.dtype != input.dtype)
    throw InternalError(std::string(ir::name(op)), "reduction kernel needs equal input and output dtypes",
                        std::string());
  if (op == ir::Op::reduce_mean && !is_floating(input.dtype))
    throw DTypeError("reduce_mean", "needs a float operand (the api layer casts integers to f32)", std::string());
  switch (op) {
    case ir::Op::reduce_sum:
    case ir::Op::reduce_mean:
    case ir::Op::reduce_prod:
      if (input.dtype == DType::boolean)
        throw DTypeError(std::string(ir::name(op)), "does not accept bool operands", std::string());
      if (op == ir::Op::reduce_prod)
        dispatch<ProdOp>(input, collapsed, output);
      else
        dispatch<SumOp>(input, collapsed, output);
      break;
    case ir::Op::reduce_max:
      dispatch<MaxOp>(input, collapsed, output);
      break;
    case ir::Op::reduce_min:
      dispatch<MinOp>(input, collapsed, output);
      break;
    default:
      throw InternalError(std::string(ir::name(op)), "is not a reduction with a kernel here", std::string());
  }
  if (op == ir::Op::reduce_mean) {
    visit_dtype(input.dtype, [&]<class T>() {
      if constexpr (std::is_floating_point_v<T>) {
        T* out = output.mutable_data<T>();
        auto divisor = static_cast<T>(count);
        runtime::parallel_for(output.shape.numel(), 1 << 16, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[i] = out[i] / divisor;
        });
      }
    });
  }
}

void arg_reduce(ir::Op op, int64_t axis, const Array& input, const Array& output) {
  const std::string name(ir::name(op));
  const Shape& shape = input.shape;
  if (!ir::is_arg_reduction(op) || axis < 0 || axis >= shape.rank() || output.dtype != DType::i64)
    throw InternalError(name, "kernel called with a bad op, axis or output dtype", std::string());
  int64_t outer = 1, inner = 1, length = shape[static_cast<int>(axis)];
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  for (int i = static_cast<int>(axis) + 1; i < shape.rank(); ++i) inner *= shape[i];
  if (outer * inner == 0) return;
  if (length == 0) throw ShapeError(name, name + " of an empty axis", std::string());
  visit_dtype(input.dtype, [&]<class T>() {
    if (op == ir::Op::argmin)
      arg_extreme_typed<true>(input.data<T>(), outer, length, inner, output.mutable_data<int64_t>());
    else
      arg_extreme_typed<false>(input.data<T>(), outer, length, inner, output.mutable_data<int64_t>());
  });
}

}  // namespace kiln::kernels::cpu
