#pragma once
// Memory statistics of kiln's allocators, for users and tests: what live
// tensors and temporaries hold now, and the peak since the last reset.

#include <kiln/device.h>

#include <cstdint>

namespace kiln {

struct MemoryStatistics {
  std::int64_t bytes_in_use = 0;       // held by live buffers (requested sizes)
  std::int64_t peak_bytes_in_use = 0;  // maximum of bytes_in_use since the last reset
  std::int64_t buffers_in_use = 0;
  std::int64_t total_allocations = 0;  // since the process started
  // Freed blocks kept for reuse (not in use). On the CPU, blocks of 256 KiB and more, at most 2 GiB in all: the
  // longest unused leave first. On a GPU, every freed block until an allocation fails or the cache is released.
  std::int64_t bytes_cached = 0;
};

MemoryStatistics memory_statistics(Device device = Device::cpu());
// Sets the peak to the current bytes_in_use.
void reset_peak_memory(Device device = Device::cpu());
// Returns cached free blocks to the system.
void release_cached_memory(Device device = Device::cpu());

}  // namespace kiln
