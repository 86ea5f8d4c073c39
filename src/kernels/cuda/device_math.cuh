#pragma once
// The ops of meaning `math` in the op table (ir/ops.def) on the GPU: function objects named after the ops, of f32
// and f64, from CUDA's math library (and kiln's f32 erfc). The CPU computes them with vector_math.h, a different
// library: the GPU's results are within the op's accuracy of the float64 reference, not the CPU's bits. Every
// other elementwise op is its scalar meaning (kernels/scalar_ops.h) on both devices. Device code only, without the
// standard library: the JIT's NVRTC prelude embeds this header.

#include "kernels/cuda/erfc.cuh"

namespace kiln::kernels::cuda::device_math {

#define KILN_DEVICE_MATH(name, float_function, double_function)                                   \
  struct name {                                                                                   \
    __device__ __forceinline__ float operator()(float x) const { return ::float_function(x); }    \
    __device__ __forceinline__ double operator()(double x) const { return ::double_function(x); } \
  };
KILN_DEVICE_MATH(sin, sinf, sin)
KILN_DEVICE_MATH(cos, cosf, cos)
KILN_DEVICE_MATH(exp, expf, exp)
KILN_DEVICE_MATH(log, logf, log)
KILN_DEVICE_MATH(tanh, tanhf, tanh)
KILN_DEVICE_MATH(erf, erff, erf)
KILN_DEVICE_MATH(log1p, log1pf, log1p)
KILN_DEVICE_MATH(expm1, expm1f, expm1)
KILN_DEVICE_MATH(atan, atanf, atan)
#undef KILN_DEVICE_MATH

// f32 erfc is kiln's (erfc.cuh: fewer instructions than erfcf, none on the special-function unit); f64 CUDA's.
struct erfc {
  __device__ __forceinline__ float operator()(float x) const { return erfc_float(x); }
  __device__ __forceinline__ double operator()(double x) const { return ::erfc(x); }
};
// 1 / (1 + e^-x); e^-x overflows to inf for very negative x, giving the correct limit 0.
struct sigmoid {
  __device__ __forceinline__ float operator()(float x) const { return 1.0f / (1.0f + exp{}(-x)); }
  __device__ __forceinline__ double operator()(double x) const { return 1.0 / (1.0 + exp{}(-x)); }
};

}  // namespace kiln::kernels::cuda::device_math
