// kiln's thread pool: coverage of every index exactly once, resizing (a
// worker created just before a stop must still see it), callers from many
// threads, nested calls and exceptions.

#include "runtime/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kiln::runtime {
namespace {

void expect_each_index_once(std::int64_t count, std::int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
  parallel_for(count, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)] += 1;
  });
  for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)], 1) << "index " << i;
}

TEST(Parallel, CoversEveryIndexOnce) {
  for (std::int64_t count : {0, 1, 7, 1000, 100003}) expect_each_index_once(count, 16);
}

TEST(Parallel, ResizingRepeatedlyNeverLosesAWorker) {
  int original = thread_count();
  for (int round = 0; round < 200; ++round) {
    set_thread_count(1 + round % 4);
    expect_each_index_once(257, 1);
  }
  set_thread_count(original);
}

TEST(Parallel, ManyCallersAtOnce) {
  std::vector<std::thread> callers;
  std::atomic<int> failures = 0;
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&] {
      for (int round = 0; round < 50; ++round) {
        std::atomic<std::int64_t> total = 0;
        parallel_for(1000, 10, [&](std::int64_t begin, std::int64_t end) {
          for (std::int64_t i = begin; i < end; ++i) total += i;
        });
        if (total != 999 * 1000 / 2) failures += 1;
      }
    });
  for (auto& caller : callers) caller.join();
  EXPECT_EQ(failures, 0);
}

TEST(Parallel, NestedCallsRunSerially) {
  std::atomic<std::int64_t> total = 0;
  parallel_for(8, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i)
      parallel_for(100, 1, [&](std::int64_t inner_begin, std::int64_t inner_end) { total += inner_end - inner_begin; });
  });
  EXPECT_EQ(total, 800);
}

TEST(Parallel, ExceptionsReachTheCaller) {
  EXPECT_THROW(parallel_for(1000, 1,
                            [](std::int64_t begin, std::int64_t) {
                              if (begin > 0) throw std::runtime_error("piece failed");
                            }),
               std::runtime_error);
  expect_each_index_once(100, 1);  // the pool still works
}

}  // namespace
}  // namespace kiln::runtime
