// CUDA kernels: reductions (reduce_sum/mean/max/min/prod over a set of axes),
// argmax and argmin.
//
// Plan (plan.h, the CPU kernels' order): size-1 axes dropped, neighbouring
// axes of one kind merged, then one pass per reduced axis, innermost first:
//   rows     [P, L] -> [P]: L <= 1024: one warp per row (lanes stride the row,
//            then a butterfly); longer rows: one block per chunk of 16384
//            elements (16-byte packs when the rows are aligned), a warp
//            butterfly and a fixed tree over the warps; rows of several
//            chunks write partials [P, chunks], reduced again as rows.
//   columns  [A, R, B] -> [A, B]: one thread per (a, group of 128 rows, b),
//            adjacent threads on adjacent b (coalesced), the group folded in
//            order; R > 128 writes partials [A, groups, B], reduced again as
//            columns.
// Determinism: every partition above depends on the shape only, never on
// the GPU, the grid size or timing, and no float is combined with atomics;
// a given shape always sums in the same order. Integer sum and prod wrap
// (unsigned accumulators), so they equal the CPU's exactly; float results
// differ from the CPU's by reassociation only. Identities for empty
// reductions and NaN propagation follow the CPU kernels (reduction.cpp).

#include "kernels/cuda/combining_ops.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

#include <limits>

namespace kiln::kernels::cuda {
namespace {

using runtime::Array;
using std::int64_t;

constexpr int64_t warp_row_limit = 1024;  // rows up to this long: one warp each
constexpr int64_t row_chunk = 16384;      // elements per block in longer rows (64 per thread)
constexpr int64_t group_rows = 128;       // rows per thread in a column pass

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- rows --------------------------------------------------------------------------------

template <class Op, class V>
__global__ void rows_warp_kernel(const V* __restrict__ x, int64_t rows, int64_t length, V* __restrict__ out, Op op) {
  const int lane = threadIdx.x % warp_size;
  for (int64_t row = thread_index() / warp_size; row < rows; row += thread_count() / warp_size) {
    const V* data = x + row * length;
    V accumulator = Op::template identity<V>();
    for (int64_t i = lane; i < length; i += warp_size) accumulator = op(accumulator, data[i]);
    accumulator = warp_reduce(accumulator, op);
    if (lane == 0) out[row] = accumulator;
  }
}

// One block per (row, chunk) task; out[task] gets the chunk's result.
template <class Op, class V>
__global__ void rows_block_kernel(const V* __restrict__ x, int64_t rows, int64_t length, int64_t chunks, bool packed,
                                  V* __restrict__ out, Op op) {
  constexpr int width = pack_width<V>;
  __shared__ V shared[block_threads / warp_size];
  const V identity = Op::template identity<V>();
  for (int64_t task = blockIdx.x; task < rows * chunks; task += gridDim.x) {
    const int64_t row = task / chunks, begin = task % chunks * row_chunk;
    const int64_t end = begin + row_chunk < length ? begin + row_chunk : length;
    const V* data = x + row * length;
    V accumulator = identity;
    if (packed) {  // rows start 16-byte aligned; chunks and rows hold whole packs
#pragma unroll 4  // several 16-byte loads in flight per thread
      for (int64_t p = begin / width + threadIdx.x; p < end / width; p += block_threads) {
        Pack<V, width> values = load_pack<width>(data, p);
#pragma unroll
        for (int j = 0; j < width; ++j) accumulator = op(accumulator, values.value[j]);
      }
    } else {
      for (int64_t i = begin + threadIdx.x; i < end; i += block_threads) accumulator = op(accumulator, data[i]);
    }
    accumulator = block_reduce(accumulator, identity, shared, op);
    if (threadIdx.x == 0) out[task] = accumulator;
  }
}

template <class Op, class V>
void reduce_rows(runtime::cuda::DeviceContext& context, Device device, const V* x, int64_t rows, int64_t length,
                 V* out) {
  if (length <= warp_row_limit) {
    launch("reduce (rows)", context, rows * warp_size, &rows_warp_kernel<Op, V>, x, rows, length, out, Op{});
    return;
  }
  const int64_t chunks = ceil_div(length, row_chunk);
  const bool packed = aligned_16(x) && length % pack_width<V> == 0;
  const Launch shape = grid_stride_launch(rows * chunks * block_threads, block_threads,
                                          context.properties.multiProcessorCount);
  if (chunks == 1) {
    launch_grid("reduce (rows)", context, shape.blocks, block_threads, &rows_block_kernel<Op, V>, x, rows, length,
                chunks, packed, out, Op{});
    return;
  }
  auto partials = runtime::allocate(device, static_cast<std::size_t>(rows * chunks) * sizeof(V));
  V* partial = static_cast<V*>(partials->data());
  launch_grid("reduce (rows)", context, shape.blocks, block_threads, &rows_block_kernel<Op, V>, x, rows, length,
              chunks, packed, partial, Op{});
  // `partials` is released when this returns, after the next pass is queued
  // behind it on the stream: safe to reuse (cuda_context.h).
  reduce_rows<Op, V>(context, device, partial, rows, chunks, out);
}

// ---- columns -----------------------------------------------------------------------------

template <class Op, class V>
__global__ void columns_kernel(const V* __restrict__ x, int64_t outer, int64_t length, int64_t inner, int64_t groups,
                               V* __restrict__ out, Op op) {
  const int64_t total = outer * groups * inner;
  for (int64_t t = thread_index(); t < total; t += thread_count()) {
    const int64_t b = t % inner, g = t / inner % groups, a = t / inner / groups;
    const int64_t first = g * group_rows;
    const int64_t last = first + group_rows < length ? first + group_rows : length;
    const V* column = x + (a * length + first) * inner + b;
    V accumulator = Op::template identity<V>();
    for (int64_t r = first; r < last; ++r, column += inner) accumulator = op(accumulator, *column);
    out[(a * groups + g) * inner + b] = accumulator;
  }
}

template <class Op, class V>
void reduce_columns(runtime::cuda::DeviceContext& context, Device device, const V* x, int64_t outer, int64_t length,
                    int64_t inner, V* out) {
  const int64_t groups = ceil_div(length, group_rows);
  if (groups == 1) {
    launch("reduce (columns)", context, outer * inner, &columns_kernel<Op, V>, x, outer, length, inner, groups, out,
           Op{});
    return;
  }
  auto partials = runtime::allocate(device, static_cast<std::size_t>(outer * groups * inner) * sizeof(V));
  V* partial = static_cast<V*>(partials->data());
  launch("reduce (columns)", context, outer * groups * inner, &columns_kernel<Op, V>, x, outer, length, inner, groups,
         partial, Op{});
  reduce_columns<Op, V>(context, device, partial, outer, groups, inner, out);
}

// ---- the whole reduction -----------------------------------------------------------------

template <class T> __global__ void fill_value_kernel(T* __restrict__ out, int64_t count, T value) {
  for (int64_t i = thread_index(); i < count; i += thread_count()) out[i] = value;
}

template <class T> __global__ void divide_kernel(T* __restrict__ out, int64_t count, T divisor) {
  for (int64_t i = thread_index(); i < count; i += thread_count()) out[i] = out[i] / divisor;
}

template <class Op, class V>
void reduce_typed(const std::vector<int64_t>& axes, const Array& input, const Array& output) {
  auto& context = context_of(output, "reduce");
  const Device device = output.device();
  V* out = static_cast<V*>(output.mutable_raw());
  const int64_t count = output.shape.numel();
  if (input.shape.numel() == 0) {
    launch("reduce (identity)", context, count, &fill_value_kernel<V>, out, count, Op::template identity<V>());
    return;
  }
  const std::vector<ReductionStage> stages = plan_reduction(input.shape, axes);
  if (stages.empty()) {  // only size-1 axes are reduced: the values stay
    runtime::cuda::copy_device_to_device(out, input.raw(), output.bytes(), device);
    return;
  }
  const V* source = static_cast<const V*>(input.raw());
  std::shared_ptr<runtime::Buffer> held;  // the previous pass's result, read by this one
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const ReductionStage& stage = stages[s];
    const bool last = s + 1 == stages.size();
    std::shared_ptr<runtime::Buffer> result;
    V* destination = out;
    if (!last) {
      result = runtime::allocate(device, static_cast<std::size_t>(stage.outer * stage.inner) * sizeof(V));
      destination = static_cast<V*>(result->data());
    }
    if (stage.rows) reduce_rows<Op, V>(context, device, source, stage.outer, stage.length, destination);
    else reduce_columns<Op, V>(context, device, source, stage.outer, stage.length, stage.inner, destination);
    held = std::move(result);
    source = destination;
  }
}

template <class Op> void dispatch(const std::vector<int64_t>& axes, const Array& input, const Array& output) {
  visit_dtype(input.dtype, [&]<class T>() { reduce_typed<Op, typename AccumulatorOf<Op, T>::type>(axes, input, output); });
}

// ---- argmax and argmin ----------------------------------------------------------------------

// A candidate for the maximum (`smallest`: the minimum). The order is total: NaN
// above everything (the first NaN wins, as NumPy), then larger (smaller) values,
// then lower indices, so combining candidates in any grouping gives the same,
// exact answer.
template <class T> struct Candidate {
  T value;
  int64_t index;
};

template <bool smallest, class T>
__device__ __forceinline__ Candidate<T> better(const Candidate<T>& a, const Candidate<T>& b) {
  const bool a_nan = a.value != a.value, b_nan = b.value != b.value;  // false for integers
  if (a_nan != b_nan) return a_nan ? a : b;
  if (!a_nan && a.value != b.value) return (smallest ? a.value < b.value : a.value > b.value) ? a : b;
  return a.index <= b.index ? a : b;
}

// Loses against every real candidate (ties go to the lower index).
template <bool smallest, class T> __device__ __forceinline__ Candidate<T> no_candidate() {
  T worst;
  if constexpr (std::numeric_limits<T>::has_infinity)
    worst = smallest ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
  else
    worst = smallest ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
  return {worst, std::numeric_limits<int64_t>::max()};
}

template <bool smallest, class T> __device__ __forceinline__ Candidate<T> warp_best(Candidate<T> c) {
#pragma unroll
  for (int mask = warp_size / 2; mask > 0; mask /= 2)
    c = better<smallest>(c, Candidate<T>{shuffle_xor(c.value, mask), shuffle_xor(c.index, mask)});
  return c;
}

// One warp per row of `count` candidates: values[row * count + i] with index
// indices[row * count + i], or i when `indices` is null (the input itself).
template <bool smallest, class T>
__global__ void arg_rows_warp_kernel(const T* __restrict__ values, const int64_t* __restrict__ indices,
                                        int64_t rows, int64_t count, int64_t* __restrict__ out) {
  const int lane = threadIdx.x % warp_size;
  for (int64_t row = thread_index() / warp_size; row < rows; row += thread_count() / warp_size) {
    Candidate<T> best = no_candidate<smallest, T>();
    for (int64_t i = lane; i < count; i += warp_size) {
      int64_t at = row * count + i;
      best = better<smallest>(best, Candidate<T>{values[at], indices ? indices[at] : i});
    }
    best = warp_best<smallest>(best);
    if (lane == 0) out[row] = best.index;
  }
}

constexpr int64_t argmax_warp_limit = 4096;
constexpr int64_t argmax_chunk = 8192;

// One block per (row, chunk): the chunk's best candidate.
template <bool smallest, class T>
__global__ void arg_rows_block_kernel(const T* __restrict__ x, int64_t rows, int64_t length, int64_t chunks,
                                         T* __restrict__ best_values, int64_t* __restrict__ best_indices) {
  constexpr int warps = block_threads / warp_size;
  __shared__ T shared_values[warps];
  __shared__ int64_t shared_indices[warps];
  const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
  for (int64_t task = blockIdx.x; task < rows * chunks; task += gridDim.x) {
    const int64_t row = task / chunks, begin = task % chunks * argmax_chunk;
    const int64_t end = begin + argmax_chunk < length ? begin + argmax_chunk : length;
    Candidate<T> best = no_candidate<smallest, T>();
    for (int64_t i = begin + threadIdx.x; i < end; i += block_threads)
      best = better<smallest>(best, Candidate<T>{x[row * length + i], i});
    best = warp_best<smallest>(best);
    if (lane == 0) {
      shared_values[warp] = best.value;
      shared_indices[warp] = best.index;
    }
    __syncthreads();
    if (warp == 0) {
      best = lane < warps ? Candidate<T>{shared_values[lane], shared_indices[lane]} : no_candidate<smallest, T>();
      best = warp_best<smallest>(best);
      if (lane == 0) {
        best_values[task] = best.value;
        best_indices[task] = best.index;
      }
    }
    __syncthreads();
  }
}

// [outer, length, inner] -> [outer, inner]: one thread per column, in order.
template <bool smallest, class T>
__global__ void arg_columns_kernel(const T* __restrict__ x, int64_t outer, int64_t length, int64_t inner,
                                      int64_t* __restrict__ out) {
  for (int64_t t = thread_index(); t < outer * inner; t += thread_count()) {
    const int64_t a = t / inner, b = t % inner;
    const T* column = x + a * length * inner + b;
    Candidate<T> best{column[0], 0};
    for (int64_t r = 1; r < length; ++r) best = better<smallest>(best, Candidate<T>{column[r * inner], r});
    out[t] = best.index;
  }
}

template <bool smallest, class T>
void arg_reduce_typed(const char* name, runtime::cuda::DeviceContext& context, Device device, const T* x,
                      int64_t outer, int64_t length, int64_t inner, int64_t* out) {
  if (inner > 1) {
    launch(name, context, outer * inner, &arg_columns_kernel<smallest, T>, x, outer, length, inner, out);
    return;
  }
  if (length <= argmax_warp_limit) {
    launch(name, context, outer * warp_size, &arg_rows_warp_kernel<smallest, T>, x, nullptr, outer, length, out);
    return;
  }
  const int64_t chunks = ceil_div(length, argmax_chunk);
  auto values = runtime::allocate(device, static_cast<std::size_t>(outer * chunks) * sizeof(T));
  auto indices = runtime::allocate(device, static_cast<std::size_t>(outer * chunks) * sizeof(int64_t));
  T* best_values = static_cast<T*>(values->data());
  int64_t* best_indices = static_cast<int64_t*>(indices->data());
  const Launch shape = grid_stride_launch(outer * chunks * block_threads, block_threads,
                                          context.properties.multiProcessorCount);
  launch_grid(name, context, shape.blocks, block_threads, &arg_rows_block_kernel<smallest, T>, x, outer, length, chunks,
              best_values, best_indices);
  launch(name, context, outer * warp_size, &arg_rows_warp_kernel<smallest, T>, best_values, best_indices, outer, chunks,
         out);
}

}  // namespace

void reduce(ir::Op op, const std::vector<int64_t>& axes, const Array& input, const Array& output) {
  const std::string name(ir::name(op));
  if (output.dtype != input.dtype) internal_error(name, "reduction kernel needs equal input and output dtypes");
  if (op == ir::Op::reduce_mean && !is_floating(input.dtype))
    throw DTypeError("reduce_mean", "needs a float operand (the api layer casts integers to f32)", std::string());
  if (output.shape.numel() == 0) return;
  int64_t count = 1;  // elements per output, for mean
  for (int64_t axis : axes) count *= input.shape[static_cast<int>(axis)];
  switch (op) {
    case ir::Op::reduce_sum:
    case ir::Op::reduce_mean:
    case ir::Op::reduce_prod:
      if (input.dtype == DType::boolean) throw DTypeError(name, "does not accept bool operands", std::string());
      if (op == ir::Op::reduce_prod) dispatch<ProdOp>(axes, input, output);
      else dispatch<SumOp>(axes, input, output);
      break;
    case ir::Op::reduce_max: dispatch<MaxOp>(axes, input, output); break;
    case ir::Op::reduce_min: dispatch<MinOp>(axes, input, output); break;
    default: internal_error(name, "is not a reduction with a kernel here");
  }
  if (op == ir::Op::reduce_mean) {
    auto& context = context_of(output, name);
    visit_dtype(output.dtype, [&]<class T>() {
      if constexpr (std::is_floating_point_v<T>)
        launch("reduce_mean", context, output.shape.numel(), &divide_kernel<T>, output.mutable_data<T>(),
               output.shape.numel(), static_cast<T>(count));
    });
  }
}

void arg_reduce(ir::Op op, int64_t axis, const Array& input, const Array& output) {
  const std::string name(ir::name(op));
  const Shape& shape = input.shape;
  if (!ir::is_arg_reduction(op) || axis < 0 || axis >= shape.rank() || output.dtype != DType::i64)
    internal_error(name, "kernel called with a bad op, axis or output dtype");
  int64_t outer = 1, inner = 1, length = shape[static_cast<int>(axis)];
  for (int i = 0; i < axis; ++i) outer *= shape[i];
  for (int i = static_cast<int>(axis) + 1; i < shape.rank(); ++i) inner *= shape[i];
  if (outer * inner == 0) return;
  if (length == 0) throw ShapeError(name, name + " of an empty axis", std::string());
  auto& context = context_of(output, name);
  visit_dtype(input.dtype, [&]<class T>() {
    int64_t* out = output.mutable_data<int64_t>();
    if (op == ir::Op::argmin)
      arg_reduce_typed<true>(name.c_str(), context, output.device(), input.data<T>(), outer, length, inner, out);
    else
      arg_reduce_typed<false>(name.c_str(), context, output.device(), input.data<T>(), outer, length, inner, out);
  });
}

}  // namespace kiln::kernels::cuda
