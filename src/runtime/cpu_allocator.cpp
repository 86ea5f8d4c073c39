#include "runtime/allocator.h"
#include "runtime/buffer.h"

#include <kiln/error.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <vector>

namespace kiln::runtime {
namespace {

constexpr std::size_t alignment = 64;
// Below this size malloc's own free lists are fast and page faults rare.
constexpr std::size_t large_block = 256 * 1024;
constexpr std::size_t huge_page = 2 * 1024 * 1024;
// Freed large blocks kept for reuse, at most this many bytes in total.
constexpr std::size_t cache_limit = std::size_t{2} << 30;

std::size_t round_up(std::size_t value, std::size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

class CpuAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes, std::size_t* capacity) override {
    std::size_t size = block_size(bytes);
    void* data = nullptr;
    if (size < large_block) {
      data = std::aligned_alloc(alignment, size);
    } else {
      data = take_cached(size);
      if (!data) data = map(size);
      if (!data) {
        release_cache();
        data = map(size);
      }
    }
    if (!data) return nullptr;
    *capacity = size;
    std::lock_guard lock(mutex_);
    statistics_.bytes_in_use += static_cast<std::int64_t>(bytes);
    statistics_.peak_bytes_in_use = std::max(statistics_.peak_bytes_in_use, statistics_.bytes_in_use);
    statistics_.buffers_in_use += 1;
    statistics_.total_allocations += 1;
    return data;
  }

  void deallocate(void* data, std::size_t bytes, std::size_t capacity) override {
    {
      std::lock_guard lock(mutex_);
      statistics_.bytes_in_use -= static_cast<std::int64_t>(bytes);
      statistics_.buffers_in_use -= 1;
    }
    if (capacity < large_block) {
      std::free(data);
      return;
    }
    if (capacity > cache_limit) {
      munmap(data, capacity);
      return;
    }
    // The block joins the cache; the longest unused blocks leave it while it holds more than cache_limit. Refusing
    // the new block instead kept a long process's first sizes forever: kiln-bench's whole suite in one process left
    // block-train's temporaries mapped afresh on every call (134-182 ms against 115 alone).
    std::vector<Cached> evicted;
    {
      std::lock_guard lock(mutex_);
      order_.push_back({capacity, data});
      cache_.emplace(capacity, std::prev(order_.end()));
      cached_bytes_ += capacity;
      while (cached_bytes_ > cache_limit) evicted.push_back(forget(entry_of(order_.front())));
    }
    for (const Cached& block : evicted) munmap(block.data, block.size);
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
    std::list<Cached> released;
    {
      std::lock_guard lock(mutex_);
      released.swap(order_);
      cache_.clear();
      cached_bytes_ = 0;
    }
    for (const Cached& block : released) munmap(block.data, block.size);
  }

 private:
  static std::size_t block_size(std::size_t bytes) {
    if (bytes < large_block) return round_up(std::max<std::size_t>(bytes, 1), alignment);
    return round_up(bytes, bytes >= 4 * huge_page ? huge_page : 64 * 1024);
  }

  // A freed block kept for reuse, in the order blocks were freed (oldest first).
  struct Cached {
    std::size_t size;
    void* data;
  };

  // Exact-size reuse: a function called in a loop asks for the same sizes. The most recently freed block of the
  // size, whose pages are likeliest still in cache.
  void* take_cached(std::size_t size) {
    std::lock_guard lock(mutex_);
    auto [first, last] = cache_.equal_range(size);
    if (first == last) return nullptr;
    // Equal keys stay in the order they were inserted: the last is the newest.
    return forget(std::prev(last)).data;
  }

  using Index = std::multimap<std::size_t, std::list<Cached>::iterator>;

  // The index entry of a cached block (the caller holds the mutex).
  Index::iterator entry_of(const Cached& block) {
    auto [first, last] = cache_.equal_range(block.size);
    return std::find_if(first, last, [&](const auto& entry) { return entry.second->data == block.data; });
  }

  // Drops a cached block from the index and the order, and returns it (the caller holds the mutex).
  Cached forget(Index::iterator entry) {
    const Cached block = *entry->second;
    order_.erase(entry->second);
    cache_.erase(entry);
    cached_bytes_ -= block.size;
    return block;
  }

  static void* map(std::size_t size) {
    void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) return nullptr;
    // Large tensors are streamed; huge pages cut TLB misses and page faults.
    if (size >= huge_page) madvise(data, size, MADV_HUGEPAGE);
    return data;
  }

  mutable std::mutex mutex_;
  MemoryStatistics statistics_;
  std::list<Cached> order_;                                        // oldest first
  Index cache_;                                                    // by size
  std::size_t cached_bytes_ = 0;
};

Allocator* (*cuda_factory)(int) = nullptr;

}  // namespace

void register_cuda_allocator_factory(Allocator* (*factory)(int index)) { cuda_factory = factory; }

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) {
    static CpuAllocator* cpu = new CpuAllocator();  // lives until exit: buffers may outlive statics
    return *cpu;
  }
  if (!cuda_factory)
    throw DeviceError("allocate", "kiln was built without CUDA support; " + device.to_string() + " is not available",
                      std::string());
  Allocator* allocator = cuda_factory(device.index);
  if (!allocator) throw DeviceError("allocate", "no such device: " + device.to_string(), std::string());
  return *allocator;
}

Buffer::~Buffer() {
  if (!parent_ && !external_) allocator_for(device_).deallocate(data_, bytes_, capacity_);
}

std::shared_ptr<Buffer> Buffer::external(Device device, void* data, std::size_t bytes, std::shared_ptr<void> owner) {
  auto buffer = std::make_shared<Buffer>(device, data, bytes, bytes);
  buffer->owner_ = std::move(owner);
  buffer->external_ = true;
  return buffer;
}

std::shared_ptr<Buffer> Buffer::view(std::shared_ptr<Buffer> parent, std::size_t offset, std::size_t bytes) {
  auto window = std::make_shared<Buffer>(parent->device(), static_cast<char*>(parent->data()) + offset, bytes, bytes);
  window->parent_ = std::move(parent);
  return window;
}

std::shared_ptr<Buffer> allocate(Device device, std::size_t bytes) {
  Allocator& allocator = allocator_for(device);
  std::size_t capacity = 0;
  void* data = allocator.allocate(bytes, &capacity);
  if (!data) {
    allocator.release_cache();
    data = allocator.allocate(bytes, &capacity);
  }
  if (!data)
    throw DeviceError("allocate",
                      "out of memory allocating " + std::to_string(bytes) + " bytes on " + device.to_string(),
                      std::string());
  return std::make_shared<Buffer>(device, data, bytes, capacity);
}

Array allocate_array(DType dtype, const Shape& shape, Device device) {
  return Array{allocate(device, static_cast<std::size_t>(shape.numel()) * size_of(dtype)), dtype, shape};
}

}  // namespace kiln::runtime

namespace kiln {

MemoryStatistics memory_statistics(Device device) { return runtime::allocator_for(device).statistics(); }
void reset_peak_memory(Device device) { runtime::allocator_for(device).reset_peak(); }
void release_cached_memory(Device device) { runtime::allocator_for(device).release_cache(); }

}  // namespace kiln
