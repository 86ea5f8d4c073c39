#pragma once
// Private to the CUDA kernels (src/kernels/cuda/*.cu): launching on a
// device's stream, 16-byte packs for vectorized loads and stores, index math
// for broadcast operands, warp and block reductions.

#include "kernels/cuda/device_traits.cuh"
#include "kernels/cuda/plan.h"
#include "runtime/buffer.h"
#include "runtime/cuda/cuda_context.h"

#include <kiln/error.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

namespace kiln::kernels::cuda {

// Threads per block of every grid-stride kernel: 8 warps; 8 such blocks fill
// a multiprocessor's 2048 thread slots.
inline constexpr int block_threads = 256;
inline constexpr int warp_size = 32;

// The device of `array`, checked (a missing GPU or bad index throws
// DeviceError naming `op`).
inline runtime::cuda::DeviceContext& context_of(const runtime::Array& array, const std::string& op) {
  return runtime::cuda::context(array.device(), op);
}

// Launches with an explicit grid (for kernels that map blocks to work).
template <class... Parameters, class... Arguments>
void launch_grid(const char* name, runtime::cuda::DeviceContext& context, dim3 blocks, dim3 threads,
                 void (*kernel)(Parameters...), Arguments&&... arguments) {
  runtime::cuda::DeviceGuard guard(context.index);
#if defined(KILN_CUDA_SIMULATOR)  // host C++ (tools/cuda-simulator): no <<<>>>
  simulated_launch(blocks, threads, context.stream, kernel, std::forward<Arguments>(arguments)...);
#else
  kernel<<<blocks, threads, 0, context.stream>>>(std::forward<Arguments>(arguments)...);
#endif
  runtime::cuda::check_launch(name);
}

// Launches `kernel` on `context`'s stream as a grid-stride loop over `items`
// work items (block_threads per block) and checks the launch.
template <class... Parameters, class... Arguments>
void launch(const char* name, runtime::cuda::DeviceContext& context, std::int64_t items,
            void (*kernel)(Parameters...), Arguments&&... arguments) {
  Launch shape = grid_stride_launch(items, block_threads, context.properties.multiProcessorCount);
  launch_grid(name, context, dim3(shape.blocks), dim3(shape.threads), kernel, std::forward<Arguments>(arguments)...);
}

[[noreturn]] inline void internal_error(const std::string& op, const std::string& detail) {
  throw InternalError(op, detail + " (CUDA kernels)", std::string());
}

// ---- vector packs ---------------------------------------------------------------

// n elements of T moved as one aligned access (n * sizeof(T) <= 16 bytes).
template <class T, int n> struct alignas(sizeof(T) * n) Pack {
  T value[n];
};

// Elements per 16-byte access of the widest of the element types.
template <class... T> inline constexpr int pack_width = static_cast<int>(16 / std::max({sizeof(T)...}));

inline bool aligned_16(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0; }

template <int n, class T> __device__ __forceinline__ Pack<T, n> load_pack(const T* data, std::int64_t pack) {
  return reinterpret_cast<const Pack<T, n>*>(data)[pack];
}
template <int n, class T> __device__ __forceinline__ void store_pack(T* data, std::int64_t pack, const Pack<T, n>& value) {
  reinterpret_cast<Pack<T, n>*>(data)[pack] = value;
}
// A pack of an operand that is either contiguous or one broadcast element.
template <int n, class T>
__device__ __forceinline__ Pack<T, n> load_operand(const T* data, bool scalar, std::int64_t pack) {
  if (!scalar) return load_pack<n>(data, pack);
  Pack<T, n> result;
  T value = data[0];
#pragma unroll
  for (int j = 0; j < n; ++j) result.value[j] = value;
  return result;
}

// ---- grid-stride indices ---------------------------------------------------------

__device__ __forceinline__ std::int64_t thread_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t thread_count() { return static_cast<std::int64_t>(gridDim.x) * blockDim.x; }

// Element offsets of the N operands of output element i (see BroadcastPlan).
// Index is std::uint32_t when the output has fewer than 2^31 elements (then
// so does every operand): 32-bit division is several times cheaper.
template <class Index, int N>
__device__ __forceinline__ void broadcast_offsets(const BroadcastPlan<N>& plan, Index i, Index (&offsets)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) offsets[k] = 0;
  for (int d = plan.rank - 1; d >= 0; --d) {
    Index dim = static_cast<Index>(plan.dims[d]);
    Index coordinate = i % dim;
    i /= dim;
#pragma unroll
    for (int k = 0; k < N; ++k) offsets[k] += coordinate * static_cast<Index>(plan.strides[k][d]);
  }
}

// Whether 32-bit indices cover `count` elements and any grid-stride step past them.
inline bool fits_32_bits(std::int64_t count) { return count < (std::int64_t{1} << 31); }

// ---- warp and block reductions ------------------------------------------------------

// __shfl_xor_sync for every element type kiln has (bytes travel as unsigned).
template <class T> __device__ __forceinline__ T shuffle_xor(T value, int mask) {
  if constexpr (sizeof(T) == 1) {
    return static_cast<T>(__shfl_xor_sync(0xffffffffu, static_cast<unsigned>(value), mask));
  } else {
    return __shfl_xor_sync(0xffffffffu, value, mask);
  }
}

// Combines the 32 lanes' values as a butterfly (lane l with l ^ 16, then ^ 8,
// ...): a fixed tree, so the result depends on the values only; every lane
// ends with it (the combining operations are commutative).
template <class Combine, class T> __device__ __forceinline__ T warp_reduce(T value, Combine combine) {
#pragma unroll
  for (int mask = warp_size / 2; mask > 0; mask /= 2) value = combine(value, shuffle_xor(value, mask));
  return value;
}

// Combines the values of all threads of a block of block_threads threads:
// each warp's butterfly, then warp 0 over the warps' results in a fixed
// tree. Thread 0 returns the result (others return a partial). `shared`
// holds block_threads / warp_size values; the call ends with a barrier, so
// it may be called again right away.
template <class Combine, class T>
__device__ __forceinline__ T block_reduce(T value, T identity, T* shared, Combine combine) {
  constexpr int warps = block_threads / warp_size;
  int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
  value = warp_reduce(value, combine);
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < warps ? shared[lane] : identity;
    value = warp_reduce(value, combine);
  }
  __syncthreads();
  return value;
}

}  // namespace kiln::kernels::cuda
