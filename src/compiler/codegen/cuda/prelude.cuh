#pragma once
// The prelude of every CUDA module the JIT generates (codegen/cuda): the ops
// of kiln's op table as scalar device functions named like the ops, with the
// standard CUDA kernels' semantics -- they call the same function objects
// (kernels/scalar_ops.h and kernels/cuda/device_math.cuh) -- plus 16-byte
// packs and the warp and block reductions of generated reduction kernels.
//
// NVRTC compiles without the C++ standard library, so this header and the
// ones it includes use none; at build time their text is embedded into kiln
// (cmake/embed_text.cmake) and every generated module starts with it.
// Generated kernels are written inside namespace kiln::jit, so the names
// here (int64_t, add, sin, ...) are found before any global ones.

#include "core/half_precision_bits.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/device_traits.cuh"
#include "kernels/scalar_ops.h"

namespace kiln::jit {

namespace device_math = kiln::kernels::cuda::device_math;
using kiln::kernels::cuda::Bool;
using kiln::kernels::cuda::ElementTraits;

// The storage types generated code names (NVRTC has no <cstdint>).
using uint8_t = unsigned char;
using uint16_t = unsigned short;  // bf16 and f16: their bits
using int32_t = int;
using int64_t = long long;

inline constexpr int warp_size = 32;  // inline: no unused-variable warning in modules without a reduction

// ---- values ------------------------------------------------------------------------------

// A constant or index converted to the value's type (the CPU prelude's
// splat; here every thread computes one element, so it is a plain cast).
template <class T, class From> __device__ __forceinline__ T splat(From value) { return static_cast<T>(value); }

// IEEE special values: NVRTC has no __builtin_inf/__builtin_nan.
template <class T> __device__ __forceinline__ T infinity() {
  if constexpr (sizeof(T) == 4) return __int_as_float(0x7f800000);
  else return __longlong_as_double(0x7ff0000000000000LL);
}
template <class T> __device__ __forceinline__ T not_a_number() {
  if constexpr (sizeof(T) == 4) return __int_as_float(0x7fc00000);
  else return __longlong_as_double(0x7ff8000000000000LL);
}

// The identities of max and min reductions: -inf and +inf for floats, the
// extremes for integers, 0 and 1 for bool (as the CPU prelude).
template <class T> __device__ __forceinline__ T lowest() {
  if constexpr (ElementTraits<T>::is_float) return -infinity<T>();
  else if constexpr (ElementTraits<T>::is_integer) return ElementTraits<T>::lowest;
  else return T(0);
}
template <class T> __device__ __forceinline__ T highest() {
  if constexpr (ElementTraits<T>::is_float) return infinity<T>();
  else if constexpr (ElementTraits<T>::is_integer) return ElementTraits<T>::highest;
  else return T(1);
}

// Whether a padded input's coordinate lies in [0, size): inside its source, not on the padding
// (compiler/fusion.h: padding read in place).
__device__ __forceinline__ bool inside(int64_t coordinate, int64_t size) { return 0 <= coordinate && coordinate < size; }

// ---- the ops, named as in the op table -----------------------------------------------------

// Every op of meaning `scalar` or `math` in the op table (ir/ops.def), named as there: add(a, b), sin(x), ...
#define KILN_JIT_scalar(name)                           \
  template <class... T>                                 \
  __device__ __forceinline__ auto name(T... operands) { \
    return scalar::name{}(operands...);                 \
  }
#define KILN_JIT_math(name)                \
  template <class T>                       \
  __device__ __forceinline__ T name(T x) { \
    return device_math::name{}(x);         \
  }
#define KILN_JIT_own(name)
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) KILN_JIT_##meaning(name)
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_JIT_own
#undef KILN_JIT_math
#undef KILN_JIT_scalar
template <class T> __device__ __forceinline__ T where(Bool condition, T a, T b) { return condition != 0 ? a : b; }
template <class To, class From>
__device__ __forceinline__ To cast(From x) {
  return scalar::convert<To>{}(x);
}

// ---- bf16 and f16 ----------------------------------------------------------------------------

// Their elements are bits, moved as uint16_t; every op on them computes in f32 (compiler/widen_half_precision.h):
// widened where read, rounded once where its result is stored, with the CPU kernels' bit arithmetic
// (core/half_precision_bits.h), so generated kernels, the standard CUDA kernels and the CPU agree to the bit.
__device__ __forceinline__ float widen_bf16(uint16_t bits) { return __uint_as_float(half_bits::f32_from_bf16(bits)); }
__device__ __forceinline__ float widen_f16(uint16_t bits) { return __uint_as_float(half_bits::f32_from_f16(bits)); }
__device__ __forceinline__ uint16_t round_to_bf16(float value) {
  return half_bits::bf16_from_f32(__float_as_uint(value));
}
__device__ __forceinline__ uint16_t round_to_f16(float value) {
  return half_bits::f16_from_f32(__float_as_uint(value));
}
// From f64: one rounding (through a round-to-odd f32, as the standard kernels).
__device__ __forceinline__ uint16_t round_to_bf16(double value) { return half_bits::bf16_from_f64(value); }
__device__ __forceinline__ uint16_t round_to_f16(double value) { return half_bits::f16_from_f64(value); }
// An f32 result rounded to 16 bits and read again as f32 by the next op (codegen/kernel_emitter.h's round_through).
__device__ __forceinline__ float round_through_bf16(float value) { return widen_bf16(round_to_bf16(value)); }
__device__ __forceinline__ float round_through_f16(float value) { return widen_f16(round_to_f16(value)); }

// ---- 16-byte accesses ------------------------------------------------------------------------

// n elements moved as one aligned access. Generated kernels use packs only in
// their `_vector` variant, launched when every buffer is 16-byte aligned.
template <class T, int n> struct alignas(sizeof(T) * n) Pack {
  T value[n];
};
template <int n, class T> __device__ __forceinline__ Pack<T, n> load_pack(const T* address) {
  return *reinterpret_cast<const Pack<T, n>*>(address);
}
template <int n, class T> __device__ __forceinline__ void store_pack(T* address, const Pack<T, n>& pack) {
  *reinterpret_cast<Pack<T, n>*>(address) = pack;
}

// ---- reductions ------------------------------------------------------------------------------

// __shfl_xor_sync for every element type (bytes travel as unsigned).
template <class T> __device__ __forceinline__ T shuffle_xor(T value, int mask) {
  if constexpr (sizeof(T) == 1) return static_cast<T>(__shfl_xor_sync(0xffffffffu, static_cast<unsigned>(value), mask));
  else return __shfl_xor_sync(0xffffffffu, value, mask);
}

// The 32 lanes' values combined as a butterfly (a fixed tree: the result
// depends on the values only, never on timing); every lane gets it.
template <class T, class Combine> __device__ __forceinline__ T warp_reduce(T value, Combine combine) {
#pragma unroll
  for (int mask = warp_size / 2; mask > 0; mask /= 2) value = combine(value, shuffle_xor(value, mask));
  return value;
}

// The values of a block's `threads` threads combined in a fixed tree (each
// warp's butterfly, then one over the warps' results); every thread gets the
// result. `shared` holds threads / 32 values. Ends with a barrier, so it may
// be called again at once.
template <int threads, class T, class Combine>
__device__ __forceinline__ T block_reduce(T value, T identity, T* shared, Combine combine) {
  constexpr int warps = threads / warp_size;
  const int lane = threadIdx.x % warp_size, warp = threadIdx.x / warp_size;
  value = warp_reduce(value, combine);
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  value = lane < warps ? shared[lane] : identity;
  value = warp_reduce(value, combine);
  __syncthreads();
  return value;
}

// ---- tensor cores (flash attention kernels: attention_kernel.cpp) -------------------------

// x rounded to TF32 (10 mantissa bits, to nearest, ties away from zero: cvt.rna), as an f32's bits: what the
// tensor cores multiply. NaN and infinities pass through.
__device__ __forceinline__ unsigned to_tf32(float x) {
#if defined(__CUDA_ARCH__)
  unsigned bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
  return bits;
#else
  return kiln_simulated_to_tf32(x);
#endif
}

// One warp's d += a b on the tensor cores (mma.sync m16n8k8, TF32 operands, f32 sums): a is 16 x 8, b 8 x 8, d
// 16 x 8, spread over the lanes as the PTX ISA lays them out. With g = lane / 4 and t = lane % 4:
//   a[0] = A(g, t), a[1] = A(g + 8, t), a[2] = A(g, t + 4), a[3] = A(g + 8, t + 4);
//   b[0] = B(t, g), b[1] = B(t + 4, g);
//   d[0] = D(g, 2t), d[1] = D(g, 2t + 1), d[2] = D(g + 8, 2t), d[3] = D(g + 8, 2t + 1).
// Every lane of the warp must call it together.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  kiln_simulated_mma_m16n8k8_tf32(d, a, b);
#endif
}

// Two bf16 as one operand word of mma_bf16: `low` the lower-numbered element of the pair.
__device__ __forceinline__ unsigned pack_bf16(uint16_t low, uint16_t high) {
  return static_cast<unsigned>(low) | static_cast<unsigned>(high) << 16;
}

// One warp's d += a b on the tensor cores (mma.sync m16n8k16, bf16 operands, f32 sums): a is 16 x 16, b 16 x 8, d
// 16 x 8, two bf16 to a word (pack_bf16). With g = lane / 4 and t = lane % 4, each word holds columns (of a) or
// rows (of b) 2t and 2t + 1 of its eight:
//   a[0] = A(g, 2t..2t+1), a[1] = A(g + 8, 2t..2t+1), a[2] = A(g, 8+2t..8+2t+1), a[3] = A(g + 8, 8+2t..8+2t+1);
//   b[0] = B(2t..2t+1, g), b[1] = B(8+2t..8+2t+1, g);
//   d as mma_tf32's. Every lane of the warp must call it together.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
#if defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  kiln_simulated_mma_m16n8k16_bf16(d, a, b);
#endif
}

}  // namespace kiln::jit
