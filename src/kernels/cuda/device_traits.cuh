#pragma once
// Traits of kiln's element types for device code, written without the
// standard library: NVRTC compiles the JIT's generated CUDA without
// <type_traits> or <limits>, and elementwise_ops.cuh, which uses these, is
// embedded into that prelude (compiler/codegen/cuda/prelude.cuh) so the
// standard kernels and generated kernels share one definition of every op.
// No includes: this header must compile on its own under nvcc and NVRTC.

namespace kiln::kernels::cuda {

using Bool = unsigned char;  // kiln's bool: one byte, 0 or 1

// Specialized for each element type kiln has (int64_t is `long` on the host
// and `long long` in NVRTC's prelude: both are covered).
template <class T> struct ElementTraits;
template <> struct ElementTraits<unsigned char> {
  using unsigned_type = unsigned char;
  static constexpr bool is_float = false, is_integer = false;  // bool is not arithmetic
};
template <> struct ElementTraits<int> {
  using unsigned_type = unsigned int;
  static constexpr bool is_float = false, is_integer = true;
  static constexpr int lowest = -2147483647 - 1, highest = 2147483647;
};
template <> struct ElementTraits<long> {
  using unsigned_type = unsigned long;
  static constexpr bool is_float = false, is_integer = true;
  static_assert(sizeof(long) == 8, "kiln's i64 is `long` only where long has 64 bits");
  static constexpr long lowest = -9223372036854775807L - 1, highest = 9223372036854775807L;
};
template <> struct ElementTraits<long long> {
  using unsigned_type = unsigned long long;
  static constexpr bool is_float = false, is_integer = true;
  static constexpr long long lowest = -9223372036854775807LL - 1, highest = 9223372036854775807LL;
};
template <> struct ElementTraits<float> {
  static constexpr bool is_float = true, is_integer = false;
};
template <> struct ElementTraits<double> {
  static constexpr bool is_float = true, is_integer = false;
};

// Integer arithmetic is computed in the unsigned type: it wraps modulo 2^bits
// like the CPU kernels, never undefined.
template <class T> using Unsigned = typename ElementTraits<T>::unsigned_type;
template <class A, class B> inline constexpr bool same_type = false;
template <class A> inline constexpr bool same_type<A, A> = true;

}  // namespace kiln::kernels::cuda
