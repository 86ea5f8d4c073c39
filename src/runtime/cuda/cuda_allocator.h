#pragma once
// The caching allocator of CUDA device memory, one per GPU, behind
// runtime::allocate(Device::cuda(n), ...). cudaMalloc and cudaFree are slow
// (cudaFree synchronizes the whole device), so freed blocks are kept in
// size-ordered free lists and handed out again, as PyTorch's
// CUDACachingAllocator does:
//   - requests are rounded up to a block size: multiples of 512 bytes up to
//     1 MiB ("small" blocks), multiples of 2 MiB above;
//   - a request takes the smallest cached block of its pool that is at least
//     its block size and wastes at most a quarter of it; otherwise cudaMalloc;
//   - when cudaMalloc runs out of memory, every cached block is freed and the
//     allocation retried (runtime::allocate then retries once more and throws
//     kiln::DeviceError);
//   - release_cache() (kiln::release_cached_memory(Device::cuda(n))) frees
//     all cached blocks.
// Blocks are not split (simpler than PyTorch; the waste bound above holds).
// Freed blocks are reused without events because all of kiln's work on a
// device runs on one stream (cuda_context.h).

#include "runtime/allocator.h"

#include <cstddef>

namespace kiln::runtime::cuda {

inline constexpr std::size_t small_block_limit = std::size_t{1} << 20;  // 1 MiB
inline constexpr std::size_t small_block_granule = 512;
inline constexpr std::size_t large_block_granule = std::size_t{2} << 20;  // 2 MiB

// The block size a request of `bytes` is rounded up to (at least 512, so that
// even 0 bytes get a distinct, non-null block).
constexpr std::size_t block_size(std::size_t bytes) {
  std::size_t granule = bytes <= small_block_limit ? small_block_granule : large_block_granule;
  std::size_t size = (bytes + granule - 1) / granule * granule;
  return size == 0 ? small_block_granule : size;
}
// Whether a cached block of `capacity` bytes may serve a request whose block
// size is `size`: same pool, large enough, and at most 25% larger.
constexpr bool block_fits(std::size_t capacity, std::size_t size) {
  bool same_pool = (capacity <= small_block_limit) == (size <= small_block_limit);
  return same_pool && capacity >= size && capacity - size <= size / 4;
}

// The allocator of GPU `index` (created on first use, never destroyed).
// Throws kiln::DeviceError when kiln has no CUDA device or `index` is out of
// range: "kiln found no CUDA device: ..." / "cuda:3 is out of range ...".
Allocator* device_allocator(int index);

}  // namespace kiln::runtime::cuda
