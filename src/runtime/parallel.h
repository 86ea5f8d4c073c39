#pragma once
// kiln's one thread pool. Every multithreaded CPU kernel -- standard kernels
// and JIT-generated ones alike -- runs through parallel_for, so the process
// never holds more busy threads than KILN_NUM_THREADS (default: all cores).

#include <cstdint>
#include <type_traits>
#include <utility>

namespace kiln::runtime {

// Number of threads parallel_for uses (the caller included).
int thread_count();
// Changes the thread count (>= 1); for tests and benchmarks.
void set_thread_count(int count);

// A non-owning reference to a callable `void(std::int64_t begin, std::int64_t end)`.
class RangeFunction {
 public:
  template <class Callable>
    requires(!std::is_same_v<std::remove_cvref_t<Callable>, RangeFunction>)
  RangeFunction(Callable&& callable)  // NOLINT: implicit on purpose
      : object_(const_cast<void*>(static_cast<const void*>(&callable))),
        call_([](void* object, std::int64_t begin, std::int64_t end) {
          (*static_cast<std::remove_reference_t<Callable>*>(object))(begin, end);
        }) {}
  RangeFunction(void (*call)(void*, std::int64_t, std::int64_t), void* object) : object_(object), call_(call) {}

  void operator()(std::int64_t begin, std::int64_t end) const { call_(object_, begin, end); }

 private:
  void* object_;
  void (*call_)(void*, std::int64_t, std::int64_t);
};

// Runs body(begin, end) over contiguous pieces covering [0, count), each of at
// least `grain` iterations (except maybe the last), at most one piece per
// thread. The calling thread takes part; it returns when all pieces are done.
// A call from inside a body, or while another thread holds the pool, runs
// serially in the caller (never deadlocks). Exceptions thrown by a body are
// rethrown in the caller. Stores a body makes, weakly ordered ones (non-temporal
// stores) included, are ordered before the return, for the caller and for any
// thread it hands the results to: a fence after each piece, run by the pool or
// serially.
void parallel_for(std::int64_t count, std::int64_t grain, RangeFunction body);

// The same with the pieces chosen by the caller: body(piece) for piece in
// [0, pieces); useful when each piece owns an accumulator.
void parallel_pieces(int pieces, RangeFunction body);

}  // namespace kiln::runtime
