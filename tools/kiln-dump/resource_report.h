#pragma once
// kiln-dump's table of what each generated CUDA kernel costs a multiprocessor:
// registers, spills, stack and shared memory from ptxas's report (NVRTC's log
// with --ptxas-options=-v), and the occupancy they allow at the kernel's block
// size. Occupancy is the CUDA occupancy calculator's arithmetic for the
// architecture's limits; it says how many blocks can be resident, not how fast
// they run.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::dump {

// What ptxas reported for one entry function.
struct KernelResources {
  std::string function;
  int registers = 0;             // per thread
  std::int64_t stack_bytes = 0;  // per thread
  std::int64_t spill_store_bytes = 0;
  std::int64_t spill_load_bytes = 0;
  std::int64_t shared_bytes = 0;  // static shared memory per block
};

// The entry functions of a ptxas report, in its order. Lines that are not
// ptxas's (NVRTC's warnings) are skipped.
std::vector<KernelResources> parse_ptxas_report(const std::string& log);

// A streaming multiprocessor's limits for one architecture.
struct MultiprocessorLimits {
  int threads = 0;                         // resident threads
  int blocks = 0;                          // resident blocks
  int registers = 65536;                   // 32-bit registers
  std::int64_t shared_bytes = 0;           // shared memory, reserved bytes included
  std::int64_t reserved_shared_bytes = 0;  // per block, kept by the system
};

// The limits of compute capability `architecture` (90 for sm_90); nullopt for
// one this table does not know.
std::optional<MultiprocessorLimits> limits_for(int architecture);

struct Occupancy {
  int blocks = 0;          // resident blocks per multiprocessor
  double fraction = 0;     // resident threads over the multiprocessor's maximum
  std::string limited_by;  // "threads", "blocks", "registers" or "shared memory"
};

// The blocks of `threads_per_block` threads of `kernel` that one
// multiprocessor can hold: registers are allocated per warp in units of 256,
// shared memory in units of 128 bytes plus the reserved bytes per block.
Occupancy occupancy(const KernelResources& kernel, int threads_per_block, const MultiprocessorLimits& limits);

}  // namespace kiln::dump
