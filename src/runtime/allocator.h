#pragma once
// Per-device allocators behind runtime::allocate. The CPU allocator caches
// freed large blocks by size, so that a function called in a loop reuses the
// same memory instead of paying the kernel's page faults on every call (as
// TensorFlow's BFC and PyTorch's caching allocators do).

#include <kiln/memory.h>

#include <cstddef>

namespace kiln::runtime {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` and sets *capacity to the size of the block.
  // Returns nullptr when the device is out of memory.
  virtual void* allocate(std::size_t bytes, std::size_t* capacity) = 0;
  virtual void deallocate(void* data, std::size_t bytes, std::size_t capacity) = 0;
  virtual MemoryStatistics statistics() const = 0;
  virtual void reset_peak() = 0;
  virtual void release_cache() = 0;
};

// The allocator of `device`; throws kiln::DeviceError for a device kiln
// cannot reach.
Allocator& allocator_for(Device device);

// Registers the allocator of CUDA devices (done by the CUDA runtime when it
// is linked in).
void register_cuda_allocator_factory(Allocator* (*factory)(int index));

}  // namespace kiln::runtime
