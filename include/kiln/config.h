#pragma once
// Process-wide switches that change how kiln computes, read at each use.

#include <atomic>

namespace kiln::config {

// Whether f32 matmuls on CUDA GPUs may use TF32 tensor cores: inputs rounded
// to a 10-bit mantissa, products accumulated in f32 (about 8x the plain f32
// rate on an H200; relative error about 1e-3 instead of 1e-6 on unit-scale
// data). Default true, like TensorFlow (PyTorch defaults to false). Set it to
// false for full f32 precision: `kiln::config::allow_tf32 = false;`. CPU
// matmuls and f64 are never affected.
inline std::atomic<bool> allow_tf32{true};

}  // namespace kiln::config
