#pragma once
// Process-wide switches that change how kiln computes, read at each use.

#include <atomic>

namespace kiln::config {

// Whether f32 matmuls on CUDA GPUs may use TF32 tensor cores: inputs rounded
// to a 10-bit mantissa, products accumulated in f32 (about 8x the plain f32
// rate on an H200; relative error about 1e-3 instead of 1e-6 on unit-scale
// data). Default true, like TensorFlow (PyTorch defaults to false). Set it to
// false for full f32 precision: `kiln::config::allow_tf32 = false;`. CPU
// matmuls and f64 are never affected, nor the two products of a compiled
// attention kernel on CUDA (computed in plain f32 inside the kernel).
inline std::atomic<bool> allow_tf32{true};

// Whether kiln's CPU kernels (the standard executor's and the JIT's) treat subnormal floats as zero: operands
// below the smallest normal read as 0 and such results become 0 (x86's MXCSR FTZ and DAZ bits, set while kiln
// computes and restored after; your own code's environment is not changed). Default false: IEEE arithmetic, as
// PyTorch (torch.set_flush_denormal(True) is this switch); TensorFlow and XLA flush by default. On x86 every
// instruction producing a subnormal costs a microcode assist of ~150 cycles, so data that drifts into them (a
// decaying recurrence, products of small weights) can run 10-100x slower than it should; flushing trades their
// last bits of range for that time. OpenBLAS's own threads (matmuls) and GPUs are not affected.
inline std::atomic<bool> flush_denormals{false};

}  // namespace kiln::config
