#pragma once
// left_shift and right_shift of one pair of integers: shared by the standard CPU kernels and the CPU JIT's prelude
// (which embeds this header), so that both executors compute the same bits. Builtins only, no standard header.
//
// A count in [0, bits) shifts as C++20 defines it on two's complement (left: zeros in, the bits shifted out lost;
// right: arithmetic, copies of the sign in). C leaves any other count undefined; here it gives what shifting one
// bit at a time would, as XLA and JAX define it: 0 to the left, the sign (0 or -1) to the right. NumPy's and
// PyTorch's results for such counts depend on the CPU.

namespace kiln::shifts {

template <class T>
[[gnu::always_inline]] inline bool in_range(T count) {
  return count >= 0 && count < static_cast<T>(sizeof(T) * 8);
}

template <class T>
[[gnu::always_inline]] inline T left_shift(T x, T count) {
  // Through the unsigned value: a left shift of a negative signed value is undefined before C++20.
  return in_range(count) ? static_cast<T>(static_cast<unsigned long long>(x) << count) : T(0);
}

template <class T>
[[gnu::always_inline]] inline T right_shift(T x, T count) {
  return in_range(count) ? static_cast<T>(x >> count) : (x < 0 ? T(-1) : T(0));
}

}  // namespace kiln::shifts
