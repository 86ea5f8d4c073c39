#pragma once
// CUDA's device built-ins on the host, for kiln's CUDA simulator
// (tools/cuda-simulator/README.md): threadIdx and friends, barriers, warp
// shuffles, atomics and bit casts, and a grid runner.
//
// The same text serves two kinds of code, both compiled by the host C++
// compiler:
//  - the standard CUDA kernels (src/kernels/cuda/*.cu), force-included ahead
//    of them (`-include`) in a simulator build, where their launches go
//    through simulated_launch (kernels/cuda/common.cuh);
//  - JIT modules (what NVRTC would compile), put ahead of the module's source
//    by the simulator's driver API and by kiln-fuzz's emulation.
// The state below is in inline variables: one copy in a program, however many
// of its translation units include this (the standard kernels' inline
// helpers, merged across them by the linker, must see the same threadIdx),
// and one per JIT module (built with hidden visibility and loaded with
// RTLD_LOCAL). The simulator runs one grid at a time.
//
// Each thread of a block is a fiber on the host thread that runs the grid. The scheduler runs every fiber that can run,
// in an order shuffled per block (the same every run), until it waits at a barrier or ends:
// __syncthreads is a barrier of the block, and a warp shuffle two barriers of
// the warp around an exchange through memory. So a thread that reads what
// another wrote without a barrier in between sees a stale value, as it may
// on a GPU. Blocks run one after another. A barrier that not all of its
// threads reach, and a full-mask shuffle in a partial warp, are reported and
// abort the process, as they would hang or be undefined on a GPU.

#include <ucontext.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

// Grid and block sizes as the simulator passes them (also across the C
// interface of kiln_simulator_enqueue_grid; simulator.h repeats it, token for
// token).
struct kiln_simulated_dim3 {
  unsigned x = 1, y = 1, z = 1;
};

namespace kiln_simulated_device {

// ---- fibers -----------------------------------------------------------------------------
//
// ucontext's swapcontext saves and restores the signal mask with a system
// call at every switch (about a microsecond, and a block of 256 threads needs
// 512 switches or more); on x86-64 a switch is done here by hand instead:
// the callee-saved registers, MXCSR and the x87 control word pushed on the
// running stack, the stack pointer swapped, the other side's popped.

#if defined(__x86_64__)

struct MachineContext {
  void* stack_pointer = nullptr;
};

// Saves the running context into *save and resumes `load` (where its own
// call of switch_to returns, or a fresh fiber's entry function starts).
__attribute__((naked, noinline)) static void switch_stack(void** /*save: rdi*/, void* /*load: rsi*/) {
  asm("pushq %rbp\n\t"
      "pushq %rbx\n\t"
      "pushq %r12\n\t"
      "pushq %r13\n\t"
      "pushq %r14\n\t"
      "pushq %r15\n\t"
      "subq $8, %rsp\n\t"
      "stmxcsr (%rsp)\n\t"
      "fnstcw 4(%rsp)\n\t"
      "movq %rsp, (%rdi)\n\t"
      "movq %rsi, %rsp\n\t"
      "ldmxcsr (%rsp)\n\t"
      "fldcw 4(%rsp)\n\t"
      "addq $8, %rsp\n\t"
      "popq %r15\n\t"
      "popq %r14\n\t"
      "popq %r13\n\t"
      "popq %r12\n\t"
      "popq %rbx\n\t"
      "popq %rbp\n\t"
      "ret\n\t");
}

inline void switch_machine(MachineContext& save, MachineContext& load) {
  switch_stack(&save.stack_pointer, load.stack_pointer);
}

// A context that starts `entry` (which must never return) on `stack`.
inline void prepare_machine(MachineContext& context, char* stack, std::size_t bytes, void (*entry)()) {
  auto* slot = reinterpret_cast<std::uint64_t*>(reinterpret_cast<std::uintptr_t>(stack + bytes) & ~std::uintptr_t{15});
  *--slot = 0;                                          // entry's return address: none (the stack as after a call)
  *--slot = reinterpret_cast<std::uint64_t>(entry);     // where switch_stack's ret goes
  for (int saved = 0; saved < 6; ++saved) *--slot = 0;  // rbp, rbx, r12-r15
  *--slot = std::uint64_t{0x037f} << 32 | 0x1f80;       // the default x87 control word and MXCSR
  context.stack_pointer = slot;
}

#else  // elsewhere, ucontext

struct MachineContext {
  ucontext_t context;
};

inline void switch_machine(MachineContext& save, MachineContext& load) { swapcontext(&save.context, &load.context); }

inline void prepare_machine(MachineContext& context, char* stack, std::size_t bytes, void (*entry)()) {
  getcontext(&context.context);
  context.context.uc_stack.ss_sp = stack;
  context.context.uc_stack.ss_size = bytes;
  context.context.uc_link = nullptr;  // entry never returns
  makecontext(&context.context, entry, 0);
}

#endif

// A context with its stack's bounds, which AddressSanitizer must be told of
// at every switch (in an ASan build of the simulator, whose kernels' memory
// accesses it then checks).
struct Context {
  MachineContext machine;
  const void* stack_bottom = nullptr;  // the host thread's: learnt by the first fiber it starts
  std::size_t stack_size = 0;
};

inline void prepare(Context& context, char* stack, std::size_t bytes, void (*entry)()) {
  prepare_machine(context.machine, stack, bytes, entry);
  context.stack_bottom = stack;
  context.stack_size = bytes;
}

// Leaves `save` (the running context) for `load`; `ending`: `save` is a
// fiber that will not be resumed.
inline void switch_to(Context& save, Context& load, bool ending = false) {
#if defined(__SANITIZE_ADDRESS__)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(ending ? nullptr : &fake_stack, load.stack_bottom, load.stack_size);
  switch_machine(save.machine, load.machine);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#else
  (void)ending;
  switch_machine(save.machine, load.machine);
#endif
}

struct Thread {
  Context context;
  std::unique_ptr<char[]> stack;
  kiln_simulated_dim3 index;
  int waiting = -1;  // the barrier it waits at (0: the block's, 1 + w: warp w's), or -1
  bool finished = false;
};

// Enough for the kernels' frames in an unoptimized build; only the pages a
// fiber touches cost memory.
inline constexpr std::size_t stack_bytes = 256 * 1024;

// The operand words one lane gives a warp's mma: 4 of A, 2 of B.
inline constexpr unsigned kFragmentWords = 6;

struct State {
  std::vector<Thread> threads;
  std::vector<unsigned> barrier_arrivals;         // per barrier
  std::vector<unsigned> barrier_sizes;            // threads that must arrive
  std::vector<unsigned long long> shuffle_slots;  // one per thread
  std::vector<unsigned> fragment_slots;           // kFragmentWords per thread: mma operands (tensor_core_mma)
  std::vector<unsigned> order;                    // the running block's order of threads
  Context scheduler;                              // the host thread's, while a block runs
  const std::function<void()>* kernel = nullptr;
  unsigned block_index = 0;
  unsigned running = 0;  // linear index of the running thread
  unsigned block_threads = 0;
};

inline State state;

}  // namespace kiln_simulated_device

inline kiln_simulated_dim3 threadIdx, blockIdx, blockDim, gridDim;  // threadIdx: the running fiber's
inline constexpr int warpSize = 32;

namespace kiln_simulated_device {

[[noreturn]] inline void fail(const char* what) {
  std::fprintf(stderr, "kiln CUDA simulator: block %u of (%u, %u, %u), thread %u of (%u, %u, %u): %s\n",
               state.block_index, gridDim.x, gridDim.y, gridDim.z, state.running, blockDim.x, blockDim.y, blockDim.z,
               what);
  std::abort();
}

inline void wait_at_barrier(int barrier) {
  if (++state.barrier_arrivals[barrier] == state.barrier_sizes[barrier]) {
    // The last to arrive releases the others and goes on.
    state.barrier_arrivals[barrier] = 0;
    for (Thread& thread : state.threads)
      if (thread.waiting == barrier) thread.waiting = -1;
    return;
  }
  Thread& self = state.threads[state.running];
  self.waiting = barrier;
  switch_to(self.context, state.scheduler);
}

// Threads in the running thread's warp (the last warp of a block may be partial).
inline unsigned warp_lanes() {
  unsigned first = state.running / 32 * 32;
  return std::min(32u, state.block_threads - first);
}

// Exchanges `value` within the warp: every lane gets the value of lane
// source(lane), or keeps its own where that is outside the warp.
template <class T, class Source>
T exchange(T value, unsigned mask, Source source) {
  static_assert(sizeof(T) <= sizeof(unsigned long long));
  if (mask != 0xffffffffu) fail("warp shuffle with a mask other than all lanes (kiln's kernels use only full masks)");
  if (warp_lanes() != 32) fail("warp shuffle with a full mask in a partial warp");
  const unsigned lane = state.running % 32, first = state.running - lane;
  const int barrier = 1 + static_cast<int>(state.running / 32);
  std::memcpy(&state.shuffle_slots[state.running], &value, sizeof(T));
  wait_at_barrier(barrier);
  T result = value;
  const int from = source(static_cast<int>(lane));
  if (from >= 0 && from < 32)
    std::memcpy(&result, &state.shuffle_slots[first + static_cast<unsigned>(from)], sizeof(T));
  wait_at_barrier(barrier);
  return result;
}

// One warp's d += a b for the running lane: the lanes post their operand words (4 of A, 2 of B) and meet; each
// sums its four elements of D in order along K (`depth` products, each exact in f32), as the tensor cores do up to
// their unspecified order of addition, reading A(row, k) and B(k, column) through a_at(word, row, k) and
// b_at(word, k, column), where word(lane, index) is a lane's posted word; the lanes meet again before any posts
// the next. D's layout is the same for every shape (prelude.cuh, mma_tf32).
template <class ElementOfA, class ElementOfB>
void warp_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], unsigned depth, ElementOfA a_at,
              ElementOfB b_at) {
  if (warp_lanes() != 32) fail("mma.sync in a partial warp");
  const unsigned lane = state.running % 32, first = state.running - lane;
  const int barrier = 1 + static_cast<int>(state.running / 32);
  unsigned* mine = &state.fragment_slots[static_cast<std::size_t>(state.running) * kFragmentWords];
  for (int k = 0; k < 4; ++k) mine[k] = a[k];
  mine[4] = b[0];
  mine[5] = b[1];
  wait_at_barrier(barrier);
  auto word = [&](unsigned source_lane, unsigned index) {
    return state.fragment_slots[static_cast<std::size_t>(first + source_lane) * kFragmentWords + index];
  };
  const unsigned group = lane / 4, pair = 2 * (lane % 4);
  const unsigned rows[4] = {group, group, group + 8, group + 8}, columns[4] = {pair, pair + 1, pair, pair + 1};
  for (int element = 0; element < 4; ++element)
    for (unsigned k = 0; k < depth; ++k) d[element] += a_at(word, rows[element], k) * b_at(word, k, columns[element]);
  wait_at_barrier(barrier);
}

inline float float_of_bits(unsigned bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (prelude.cuh's mma_tf32 has the layout). The words are read
// as TF32: their 13 low mantissa bits are ignored. A(row, k) lies in lane 4 (row % 8) + k % 4, word (row / 8) +
// 2 (k / 4); B(k, column) in lane 4 column + k % 4, word 4 + k / 4.
inline void tensor_core_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  const auto tf32 = [](unsigned bits) { return float_of_bits(bits & 0xFFFFE000u); };
  warp_mma(
      d, a, b, 8,
      [&](auto word, unsigned row, unsigned k) { return tf32(word(4 * (row % 8) + k % 4, row / 8 + 2 * (k / 4))); },
      [&](auto word, unsigned k, unsigned column) { return tf32(word(4 * column + k % 4, 4 + k / 4)); });
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (prelude.cuh's mma_bf16 has the layout): two bf16 to a
// word, the lower-numbered k in the low half. A(row, k) lies in lane 4 (row % 8) + (k % 8) / 2, word (row / 8) +
// 2 (k / 8); B(k, column) in lane 4 column + (k % 8) / 2, word 4 + k / 8.
inline void tensor_core_mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  const auto bf16 = [](unsigned bits, unsigned k) { return float_of_bits(bits >> (16 * (k % 2)) << 16); };
  warp_mma(
      d, a, b, 16,
      [&](auto word, unsigned row, unsigned k) {
        return bf16(word(4 * (row % 8) + (k % 8) / 2, row / 8 + 2 * (k / 8)), k);
      },
      [&](auto word, unsigned k, unsigned column) { return bf16(word(4 * column + (k % 8) / 2, 4 + k / 8), k); });
}

// cvt.rna.tf32.f32: the nearest TF32, ties away from zero; NaN and infinities unchanged.
inline unsigned round_to_tf32(float x) {
  unsigned bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7F800000u) == 0x7F800000u) return bits;
  return (bits + 0x1000u) & 0xFFFFE000u;
}

// A fiber's entry: the kernel, then back to the scheduler for good.
inline void run_thread() {
#if defined(__SANITIZE_ADDRESS__)  // the first code on this fiber's stack: it learns the host thread's
  __sanitizer_finish_switch_fiber(nullptr, &state.scheduler.stack_bottom, &state.scheduler.stack_size);
#endif
  (*state.kernel)();
  Thread& self = state.threads[state.running];
  self.finished = true;
  switch_to(self.context, state.scheduler, true);
  fail("a finished thread was resumed");
}

inline void set_thread_index(unsigned linear) {
  state.running = linear;
  threadIdx = state.threads[linear].index;
}

inline void run_block() {
  const unsigned count = state.block_threads;
  for (unsigned linear = 0; linear < count; ++linear) {
    Thread& thread = state.threads[linear];
    if (!thread.stack) thread.stack.reset(new char[stack_bytes]);
    prepare(thread.context, thread.stack.get(), stack_bytes, run_thread);
    thread.waiting = -1;
    thread.finished = false;
  }
  // A shuffled order, the same for the same block (its storage reused from block to block).
  std::vector<unsigned>& order = state.order;
  order.resize(count);
  unsigned long long random = 0x9e3779b97f4a7c15ull * (state.block_index + 1);
  for (unsigned index = 0; index < count; ++index) {
    random = random * 6364136223846793005ull + 1442695040888963407ull;
    const unsigned other = static_cast<unsigned>((random >> 33) % (index + 1));
    order[index] = order[other];
    order[other] = index;
  }
  for (unsigned remaining = count; remaining > 0;) {
    bool ran = false;
    for (unsigned linear : order) {
      Thread& thread = state.threads[linear];
      if (thread.finished || thread.waiting >= 0) continue;
      set_thread_index(linear);
      switch_to(state.scheduler, thread.context);
      ran = true;
      if (thread.finished) --remaining;
    }
    if (!ran) fail("deadlock: threads wait at a barrier that the others of their block or warp never reach");
  }
}

// Runs `kernel` (a call of the kernel with its arguments) over a grid.
inline void run_grid(const std::function<void()>& kernel, kiln_simulated_dim3 grid, kiln_simulated_dim3 block) {
  state.kernel = &kernel;
  gridDim = grid;
  blockDim = block;
  const unsigned count = block.x * block.y * block.z;
  state.block_threads = count;
  state.threads.resize(count);
  for (unsigned linear = 0; linear < count; ++linear)
    state.threads[linear].index = {linear % block.x, linear / block.x % block.y, linear / (block.x * block.y)};
  const unsigned warps = (count + 31) / 32;
  state.barrier_arrivals.assign(1 + warps, 0);
  state.barrier_sizes.assign(1 + warps, 0);
  state.barrier_sizes[0] = count;
  for (unsigned warp = 0; warp < warps; ++warp) state.barrier_sizes[1 + warp] = std::min(32u, count - 32 * warp);
  state.shuffle_slots.assign(count, 0);
  state.fragment_slots.assign(static_cast<std::size_t>(count) * kFragmentWords, 0);
  unsigned block_index = 0;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = {x, y, z};
        state.block_index = block_index++;
        run_block();
      }
  state.kernel = nullptr;
}

// Calls `kernel` with the arguments that cuLaunchKernel's `parameters` point to.
template <class... P, std::size_t... I>
std::function<void()> bind_parameters(void (*kernel)(P...), void** parameters, std::index_sequence<I...>) {
  // Copied now, as a launch copies its arguments.
  std::tuple<std::remove_cvref_t<P>...> arguments{*static_cast<std::remove_cvref_t<P>*>(parameters[I])...};
  return [kernel, arguments] { std::apply(kernel, arguments); };
}

// The launch's bound call of `kernel` (a std::function<void()>), or null when
// it has parameters and `parameters` is null.
template <class... P>
void* bind_kernel(void (*kernel)(P...), void** parameters) {
  if (sizeof...(P) > 0 && !parameters) return nullptr;
  return new std::function<void()>(bind_parameters(kernel, parameters, std::index_sequence_for<P...>{}));
}

}  // namespace kiln_simulated_device

// ---- built-ins ------------------------------------------------------------------------

inline void __syncthreads() { kiln_simulated_device::wait_at_barrier(0); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  kiln_simulated_device::wait_at_barrier(1 + static_cast<int>(kiln_simulated_device::state.running / 32));
}
inline void __threadfence() {}  // blocks run one at a time

template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  return kiln_simulated_device::exchange(value, mask, [&](int lane) {
    const int target = lane ^ lane_mask;
    return target / width == lane / width ? target : lane;
  });
}
template <class T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return kiln_simulated_device::exchange(value, mask, [&](int lane) {
    const int target = lane - static_cast<int>(delta);
    return target >= lane / width * width ? target : lane;
  });
}
template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
  return kiln_simulated_device::exchange(value, mask, [&](int lane) {
    const int target = lane + static_cast<int>(delta);
    return target < (lane / width + 1) * width ? target : lane;
  });
}
template <class T>
T __shfl_sync(unsigned mask, T value, int source, int width = 32) {
  return kiln_simulated_device::exchange(value, mask, [&](int lane) { return lane / width * width + source % width; });
}

// Threads switch only at barriers, so a read-modify-write is atomic here.
template <class T>
T atomicAdd(T* address, T value) {
  T old = *address;
  *address = old + value;
  return old;
}
template <class T>
T atomicMin(T* address, T value) {
  T old = *address;
  *address = value < old ? value : old;
  return old;
}

inline unsigned kiln_simulated_to_tf32(float x) { return kiln_simulated_device::round_to_tf32(x); }
inline void kiln_simulated_mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  kiln_simulated_device::tensor_core_mma(d, a, b);
}
inline void kiln_simulated_mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  kiln_simulated_device::tensor_core_mma_bf16(d, a, b);
}

template <class To, class From>
To kiln_simulated_bit_cast(From value) {
  static_assert(sizeof(To) == sizeof(From));
  To result;
  std::memcpy(&result, &value, sizeof(To));
  return result;
}
inline float __int_as_float(int bits) { return kiln_simulated_bit_cast<float>(bits); }
inline int __float_as_int(float value) { return kiln_simulated_bit_cast<int>(value); }
inline float __uint_as_float(unsigned bits) { return kiln_simulated_bit_cast<float>(bits); }
inline unsigned __float_as_uint(float value) { return kiln_simulated_bit_cast<unsigned>(value); }
inline double __longlong_as_double(long long bits) { return kiln_simulated_bit_cast<double>(bits); }
inline long long __double_as_longlong(double value) { return kiln_simulated_bit_cast<long long>(value); }

// ---- launches from host code --------------------------------------------------------------

// Defined by the simulator's runtime (tools/cuda-simulator/runtime.cpp):
// queues `run(work)` on `stream` after checking the launch's shape as a GPU
// would; `release(work)` frees `work` once it has run (or was refused).
// Returns a cudaError_t, also kept for cudaGetLastError.
extern "C" int kiln_simulator_enqueue_grid(void* stream, kiln_simulated_dim3 grid, kiln_simulated_dim3 block,
                                           void (*run)(void*), void* work, void (*release)(void*));

namespace kiln_simulated_device {

struct HostLaunch {
  std::function<void()> kernel;
  kiln_simulated_dim3 grid, block;
};

template <class Dimensions>
kiln_simulated_dim3 dimensions(const Dimensions& value) {
  if constexpr (std::is_integral_v<Dimensions>)
    return {static_cast<unsigned>(value), 1, 1};
  else
    return {value.x, value.y, value.z};
}

}  // namespace kiln_simulated_device

// kernel<<<grid, block, 0, stream>>>(arguments...) in the simulator.
template <class Grid, class Block, class Stream, class... Parameters, class... Arguments>
void simulated_launch(Grid grid, Block block, Stream stream, void (*kernel)(Parameters...), Arguments&&... arguments) {
  using kiln_simulated_device::HostLaunch;
  std::tuple<std::remove_cvref_t<Parameters>...> copies{std::forward<Arguments>(arguments)...};
  auto* work = new HostLaunch{[kernel, copies] { std::apply(kernel, copies); }, kiln_simulated_device::dimensions(grid),
                              kiln_simulated_device::dimensions(block)};
  kiln_simulator_enqueue_grid(
      static_cast<void*>(stream), work->grid, work->block,
      [](void* pointer) {
        auto* launch = static_cast<HostLaunch*>(pointer);
        kiln_simulated_device::run_grid(launch->kernel, launch->grid, launch->block);
      },
      work, [](void* pointer) { delete static_cast<HostLaunch*>(pointer); });
}
