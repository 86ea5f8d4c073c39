#pragma once
// The CPU's treatment of subnormal floats while kiln computes (kiln::config::flush_denormals): on x86 the MXCSR's
// flush-to-zero (FTZ: subnormal results become 0) and denormals-are-zero (DAZ: subnormal operands read as 0)
// bits, set for the duration of a kernel and restored after, so the caller's own code keeps its environment.
// The thread pool runs every piece of a job in the environment of the thread that submitted it.

#include <cstdint>

namespace kiln::runtime {

// The calling thread's floating-point control and status word (x86: MXCSR; 0 where kiln does not manage it). The
// scope below changes and restores its control bits only, never the sticky exception flags.
std::uint32_t float_control();
// Sets it (a no-op where kiln does not manage it).
void set_float_control(std::uint32_t control);

// The control word kiln computes in: the calling thread's, with subnormal flushing on or off as
// kiln::config::flush_denormals says now.
std::uint32_t computing_control();

// Runs with the control bits of `control` (kernels: computing_control(); the pool's workers: their job
// submitter's), restoring the previous ones. Cheap when nothing changes (no write).
class ScopedFloatControl {
 public:
  explicit ScopedFloatControl(std::uint32_t control);
  ~ScopedFloatControl();
  ScopedFloatControl(const ScopedFloatControl&) = delete;
  ScopedFloatControl& operator=(const ScopedFloatControl&) = delete;

 private:
  std::uint32_t previous_;
  bool changed_;
};

}  // namespace kiln::runtime
