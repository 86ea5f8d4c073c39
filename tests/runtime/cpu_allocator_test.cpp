// The CPU allocator's cache of freed large blocks (runtime/cpu_allocator.cpp): a block is reused for a request of
// its size, and when the cache would hold more than its 2 GiB the longest unused blocks leave it, not the newest:
// a long process whose first sizes filled the cache must still keep the blocks of what it runs now. The blocks
// here are only mapped, never touched, so they take address space, not memory.

#include "runtime/buffer.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace kiln::runtime {
namespace {

constexpr std::int64_t mib = std::int64_t{1} << 20;

TEST(CpuAllocator, AFreedBlockIsReusedForItsSize) {
  release_cached_memory();
  void* first = nullptr;
  {
    auto buffer = allocate(Device::cpu(), 64 * mib);
    first = buffer->data();
  }
  EXPECT_EQ(memory_statistics().bytes_cached, 64 * mib);
  auto again = allocate(Device::cpu(), 64 * mib);
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(memory_statistics().bytes_cached, 0);
  again.reset();
  release_cached_memory();
  EXPECT_EQ(memory_statistics().bytes_cached, 0);
}

TEST(CpuAllocator, TheLongestUnusedBlocksLeaveAFullCache) {
  release_cached_memory();
  {
    std::vector<std::shared_ptr<Buffer>> early;
    for (int i = 0; i < 9; ++i) early.push_back(allocate(Device::cpu(), 256 * mib));
  }  // nine freed: the cache keeps 2 GiB of them
  EXPECT_EQ(memory_statistics().bytes_cached, 8 * 256 * mib);
  void* recent = nullptr;
  {
    auto buffer = allocate(Device::cpu(), 300 * mib);  // a size the cache has not seen
    recent = buffer->data();
  }
  // The new block stays; the two oldest 256 MiB blocks made room for it.
  EXPECT_EQ(memory_statistics().bytes_cached, 6 * 256 * mib + 300 * mib);
  auto reused = allocate(Device::cpu(), 300 * mib);
  EXPECT_EQ(reused->data(), recent);
  reused.reset();
  release_cached_memory();
  EXPECT_EQ(memory_statistics().bytes_cached, 0);
}

}  // namespace
}  // namespace kiln::runtime
