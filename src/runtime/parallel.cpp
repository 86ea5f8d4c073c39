#include "runtime/parallel.h"

#include "runtime/float_environment.h"

#include <kiln/error.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace kiln::runtime {
namespace {

thread_local bool inside_pool_work = false;

int threads_from_environment() {
  if (const char* text = std::getenv("KILN_NUM_THREADS")) {
    char* end = nullptr;
    long value = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && value >= 1 && value <= 1024) return static_cast<int>(value);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Orders the piece's weakly ordered (non-temporal) stores before the count of finished pieces says it is done,
// so a kernel may stream its results without fencing each call of its own (parallel.h).
void store_fence() {
#if defined(__SSE__)
  __builtin_ia32_sfence();
#endif
}

// The CPU the calling thread runs on, or -1 where that is not known.
int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

// A worker woken for a job on the CPU of the thread that submitted it shares that CPU with it: the submitter
// computes its pieces while the worker waits for a time slice, and a call of ~0.1 ms (a 256^2 product) ran at the
// speed of one thread until the scheduler's load balancing moved one of them, some milliseconds and many calls
// later (kiln-bench seed-256 after its standard-executor runs: half of the processes 0.20 ms instead of 0.12, the
// two threads last seen on the same CPU). Such a worker moves itself off that CPU, if its affinity allows another,
// and keeps away from it while jobs follow one another (the standard executor's kernels of a few microseconds
// each would otherwise pay two system calls and a migration apiece); it takes its own affinity back before it
// sleeps.
class CpuAvoidance {
 public:
  CpuAvoidance() = default;
  CpuAvoidance(const CpuAvoidance&) = delete;
  CpuAvoidance& operator=(const CpuAvoidance&) = delete;
  ~CpuAvoidance() { release(); }

  // Before a job submitted from `cpu` (-1: unknown).
  void avoid(int cpu) {
#if defined(__linux__)
    if (cpu < 0 || (moved_ && cpu == avoided_) || sched_getcpu() != cpu) return;
    if (!moved_ && pthread_getaffinity_np(pthread_self(), sizeof(allowed_), &allowed_) != 0) return;
    cpu_set_t others = allowed_;
    CPU_CLR(cpu, &others);
    if (CPU_COUNT(&others) == 0) return;
    if (pthread_setaffinity_np(pthread_self(), sizeof(others), &others) != 0) return;
    moved_ = true;
    avoided_ = cpu;
#else
    (void)cpu;
#endif
  }

  // The thread's own affinity again.
  void release() {
#if defined(__linux__)
    if (moved_) pthread_setaffinity_np(pthread_self(), sizeof(allowed_), &allowed_);
#endif
    moved_ = false;
  }

 private:
#if defined(__linux__)
  cpu_set_t allowed_{};
#endif
  bool moved_ = false;
  int avoided_ = -1;
};

// One job at a time. Its pieces are claimed by the workers and the caller
// through one atomic word holding (job number, piece count, next piece), so a
// worker that wakes late for a job that has already ended cannot claim a
// piece of the next one. Workers spin briefly after a job before sleeping,
// so back-to-back kernels (the standard executor's op-by-op loop) do not pay
// a futex wake-up each.
class ThreadPool {
 public:
  static constexpr int max_pieces = (1 << 20) - 1;

  explicit ThreadPool(int threads) { start(threads); }
  ~ThreadPool() { stop(); }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int threads) {
    std::lock_guard submit(submit_mutex_);
    stop();
    start(threads);
  }

  // Returns false if the pool is busy with another caller's job.
  bool run(int pieces, RangeFunction body) {
    std::unique_lock submit(submit_mutex_, std::try_to_lock);
    if (!submit.owns_lock()) return false;
    body_ = &body;
    control_ = float_control();
    submitter_cpu_.store(current_cpu(), std::memory_order_relaxed);
    finished_pieces_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    job_ = (job_ + 1) & 0xffffff;
    state_.store(pack(job_, static_cast<std::uint64_t>(pieces), 0), std::memory_order_release);
    {
      std::lock_guard lock(wake_mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work_on_pieces();
    while (finished_pieces_.load(std::memory_order_acquire) < pieces) std::this_thread::yield();
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  static std::uint64_t pack(std::uint64_t job, std::uint64_t pieces, std::uint64_t next) {
    return job << 40 | pieces << 20 | next;
  }

  void start(int threads) {
    stopping_.store(false, std::memory_order_release);
    // A worker starts from the generation current when it was created: if it
    // read it only once running, a stop() in between would go unnoticed.
    std::uint64_t generation = generation_.load(std::memory_order_acquire);
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, generation] { worker_loop(generation); });
  }

  void stop() {
    {
      std::lock_guard lock(wake_mutex_);
      stopping_.store(true, std::memory_order_release);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
    workers_.clear();
  }

  void worker_loop(std::uint64_t seen) {
    inside_pool_work = true;
    CpuAvoidance avoidance;
    while (true) {
      // Spin briefly, then sleep until the next job.
      for (int spin = 0; spin < 2000 && generation_.load(std::memory_order_acquire) == seen; ++spin)
        std::this_thread::yield();
      if (generation_.load(std::memory_order_acquire) == seen) {
        avoidance.release();
        std::unique_lock lock(wake_mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      }
      seen = generation_.load(std::memory_order_acquire);
      if (stopping_.load(std::memory_order_acquire)) return;
      avoidance.avoid(submitter_cpu_.load(std::memory_order_relaxed));
      work_on_pieces();
    }
  }

  // Claims and runs pieces of whatever job is current until none is left.
  // A successful claim keeps the job alive: its caller waits for every piece.
  void work_on_pieces() {
    bool was_inside = inside_pool_work;
    inside_pool_work = true;
    std::uint64_t state = state_.load(std::memory_order_acquire);
    while (true) {
      std::uint64_t pieces = (state >> 20) & 0xfffff;
      std::uint64_t next = state & 0xfffff;
      if (next >= pieces) break;
      if (!state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel, std::memory_order_acquire))
        continue;
      try {
        // In the submitter's floating-point environment (its subnormal flushing): control_ belongs to the job
        // whose piece was just claimed, since the next job cannot start before this piece is finished.
        const ScopedFloatControl environment(control_);
        (*body_)(static_cast<std::int64_t>(next), static_cast<std::int64_t>(next + 1));
        store_fence();
      } catch (...) {
        std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      finished_pieces_.fetch_add(1, std::memory_order_acq_rel);
      state = state_.load(std::memory_order_acquire);
    }
    inside_pool_work = was_inside;
  }

  std::vector<std::thread> workers_;
  std::mutex submit_mutex_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> stopping_{false};

  std::uint64_t job_ = 0;
  std::atomic<std::uint64_t> state_{0};
  const RangeFunction* body_ = nullptr;
  std::uint32_t control_ = 0;  // the submitting thread's float control word (float_environment.h)
  std::atomic<int> submitter_cpu_{-1};  // where the submitting thread ran when it submitted the job
  std::atomic<int> finished_pieces_{0};
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

ThreadPool& pool() {
  static ThreadPool* instance = new ThreadPool(threads_from_environment());  // never destroyed: used at exit
  return *instance;
}

}  // namespace

int thread_count() { return pool().threads(); }

void set_thread_count(int count) {
  if (count < 1) throw ValueError("set_thread_count", "thread count must be at least 1", std::string());
  pool().resize(count);
}

void parallel_pieces(int pieces, RangeFunction body) {
  if (pieces <= 0) return;
  if (pieces > ThreadPool::max_pieces)
    throw ValueError("parallel_pieces", "too many pieces: " + std::to_string(pieces), std::string());
  if (pieces == 1 || inside_pool_work || !pool().run(pieces, body)) {
    for (int piece = 0; piece < pieces; ++piece) body(piece, piece + 1);
    store_fence();  // as the pool's pieces: the caller may hand the results to another thread
  }
}

void parallel_for(std::int64_t count, std::int64_t grain, RangeFunction body) {
  if (count <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  std::int64_t pieces = std::min<std::int64_t>(thread_count(), (count + grain - 1) / grain);
  if (pieces <= 1) {
    body(0, count);
    store_fence();
    return;
  }
  parallel_pieces(static_cast<int>(pieces), [&](std::int64_t piece, std::int64_t) {
    std::int64_t begin = count * piece / pieces;
    std::int64_t end = count * (piece + 1) / pieces;
    body(begin, end);
  });
}

}  // namespace kiln::runtime
