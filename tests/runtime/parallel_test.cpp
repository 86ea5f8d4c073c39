// kiln's thread pool: coverage of every index exactly once, resizing (a
// worker created just before a stop must still see it), callers from many
// threads, nested calls, exceptions, and workers on the caller's CPU.

#include "runtime/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#endif

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

#if defined(__linux__)
// Each thread's allowed CPUs, as /proc shows them.
std::map<std::string, std::string> allowed_cpus_of_threads() {
  std::map<std::string, std::string> allowed;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0) allowed[task.path().filename().string()] = line;
  }
  return allowed;
}

TEST(Parallel, WorkersOnTheCallersCpuLeaveItForTheJobOnly) {
  // The caller pinned to one CPU: a worker woken there moves to another while jobs follow (parallel.cpp,
  // CpuAvoidance) and gets its own affinity back when it sleeps; every index is covered either way.
  cpu_set_t original;
  ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(original), &original), 0);
  int first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &original)) ++first;
  ASSERT_LT(first, CPU_SETSIZE);
  expect_each_index_once(1000, 1);  // the workers exist
  // Asleep, with their own affinity: a worker still spinning after that job may be moved off the caller's CPU.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto before = allowed_cpus_of_threads();
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(one), &one), 0);
  std::atomic<int> on_the_callers_cpu = 0;
  const pid_t caller = gettid();
  for (int round = 0; round < 1000; ++round) {
    std::vector<std::atomic<int>> hits(64);
    parallel_pieces(64, [&](std::int64_t piece, std::int64_t) {
      hits[static_cast<std::size_t>(piece)] += 1;
      if (gettid() != caller && sched_getcpu() == first) on_the_callers_cpu += 1;
    });
    for (const auto& hit : hits) ASSERT_EQ(hit, 1);
  }
  ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof(original), &original), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the workers' spin (~1 ms) ends: they sleep
  auto after = allowed_cpus_of_threads();
  for (const auto& [thread, cpus] : before) {
    if (after.count(thread) == 0) continue;  // a thread that has ended
    EXPECT_EQ(after[thread], cpus) << "thread " << thread;
  }
  // Only on a machine with more CPUs than the caller's one: a worker may still be moved back by the scheduler
  // within a piece, but not at its start; most pieces of a worker run elsewhere.
  if (CPU_COUNT(&original) > 1 && thread_count() > 1) {
    EXPECT_LT(on_the_callers_cpu.load(), 64 * 1000 / 2);
  }
}
#endif

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
