#include "runtime/cuda/cuda_allocator.h"

#include "runtime/cuda/cuda_context.h"

#include <kiln/error.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace kiln::runtime::cuda {
namespace {

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int index) : index_(index) {}

  void* allocate(std::size_t bytes, std::size_t* capacity) override {
    std::size_t size = block_size(bytes);
    std::lock_guard lock(mutex_);
    void* data = take_cached(size, capacity);
    if (!data) {
      data = device_malloc(size);
      if (!data) {  // out of memory: give the cache back and try once more
        release_cache_locked();
        data = device_malloc(size);
      }
      if (!data) return nullptr;
      *capacity = size;
    }
    statistics_.bytes_in_use += static_cast<std::int64_t>(bytes);
    statistics_.peak_bytes_in_use = std::max(statistics_.peak_bytes_in_use, statistics_.bytes_in_use);
    statistics_.buffers_in_use += 1;
    statistics_.total_allocations += 1;
    return data;
  }

  // Never calls CUDA (it runs in destructors, maybe during unwinding): the
  // block goes to the cache.
  void deallocate(void* data, std::size_t bytes, std::size_t capacity) override {
    std::lock_guard lock(mutex_);
    statistics_.bytes_in_use -= static_cast<std::int64_t>(bytes);
    statistics_.buffers_in_use -= 1;
    cache_.emplace(capacity, data);
    cached_bytes_ += capacity;
  }

  MemoryStatistics statistics() const override {
    std::lock_guard lock(mutex_);
    MemoryStatistics result = statistics_;
    result.bytes_cached = static_cast<std::int64_t>(cached_bytes_);
    return result;
  }

  void reset_peak() override {
    std::lock_guard lock(mutex_);
    statistics_.peak_bytes_in_use = statistics_.bytes_in_use;
  }

  void release_cache() override {
    std::lock_guard lock(mutex_);
    release_cache_locked();
  }

 private:
  void* take_cached(std::size_t size, std::size_t* capacity) {
    auto found = cache_.lower_bound(size);
    if (found == cache_.end() || !block_fits(found->first, size)) return nullptr;
    void* data = found->second;
    *capacity = found->first;
    cached_bytes_ -= found->first;
    cache_.erase(found);
    return data;
  }

  // nullptr when the device is out of memory; throws on any other failure.
  void* device_malloc(std::size_t size) {
    DeviceGuard guard(index_);
    void* data = nullptr;
    cudaError_t status = cudaMalloc(&data, size);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // clear it: it is not sticky, but would be reported later
      return nullptr;
    }
    check(status, "cudaMalloc", "allocate");
    return data;
  }

  // cudaFree waits for the device, so cached blocks are never freed under a
  // running kernel.
  void release_cache_locked() {
    if (cache_.empty()) return;
    DeviceGuard guard(index_);
    for (auto& [size, data] : cache_) check(cudaFree(data), "cudaFree", "release_cached_memory");
    cache_.clear();
    cached_bytes_ = 0;
  }

  const int index_;
  mutable std::mutex mutex_;
  MemoryStatistics statistics_;
  std::multimap<std::size_t, void*> cache_;  // capacity -> block
  std::size_t cached_bytes_ = 0;
};

}  // namespace

Allocator* device_allocator(int index) {
  static std::once_flag created;
  static std::vector<std::unique_ptr<CachingAllocator>>* allocators = nullptr;
  context(Device::cuda(index), "allocate");  // throws for a missing GPU or a bad index
  std::call_once(created, [] {
    // Lives until exit: buffers may outlive static destructors.
    allocators = new std::vector<std::unique_ptr<CachingAllocator>>();
    for (int i = 0; i < device_count(); ++i) allocators->push_back(std::make_unique<CachingAllocator>(i));
  });
  return (*allocators)[static_cast<std::size_t>(index)].get();
}

}  // namespace kiln::runtime::cuda
