#pragma once
// The order of sort, argsort and top_k as unsigned integer keys, shared by the CPU kernels (kernels/cpu/sort.cpp)
// and the CUDA kernels (kernels/cuda/sort.cu, also compiled as host C++ by the CUDA simulator), so that both order
// by the very same keys.
//
// sort_key(x, descending) maps an element to an unsigned integer whose ascending order is the wanted one:
//   - floats: NaN above every number (all NaNs one key), -0 the key of +0, then the usual bit trick (negative
//     numbers' bits inverted, positive ones' sign bit set), which orders IEEE numbers as integers;
//   - signed integers: the sign bit flipped; bools: 0 and 1;
//   - descending: every bit inverted, which reverses the order and keeps equal elements equal.
// Sorting (key, index) pairs lexicographically then gives one answer, whatever the algorithm: equal keys in the
// order of their indices, which is a stable sort, descending too. Values are read back at the sorted indices, so
// a sort returns its input's own bits (NaN payloads, -0).

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__) || defined(__host__)
#define KILN_SORT_KEY_FUNCTION __host__ __device__ inline
#else
#define KILN_SORT_KEY_FUNCTION inline
#endif

namespace kiln::kernels {

// The key type of element type T: as wide as T, and at least 32 bits.
template <class T>
using SortKey = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;

template <class T>
KILN_SORT_KEY_FUNCTION SortKey<T> sort_key(T value, bool descending) {
  using Key = SortKey<T>;
  Key key;
  if constexpr (std::is_floating_point_v<T>) {
    constexpr Key sign = Key{1} << (8 * sizeof(T) - 1);
    // One NaN for all (the quiet NaN with a clear sign bit), and zero without its sign.
    T canonical = value;
    if (value != value) {
      Key quiet_nan = sizeof(T) == 8 ? static_cast<Key>(0x7ff8000000000000ull) : static_cast<Key>(0x7fc00000u);
      std::memcpy(&canonical, &quiet_nan, sizeof(T));
    } else if (value == 0) {
      canonical = T{0};
    }
    std::memcpy(&key, &canonical, sizeof(T));
    key = (key & sign) ? ~key : key | sign;
  } else if constexpr (std::is_signed_v<T>) {
    constexpr Key sign = Key{1} << (8 * sizeof(T) - 1);
    key = static_cast<Key>(value) ^ sign;
  } else {
    key = static_cast<Key>(value);  // bool, stored as one byte holding 0 or 1
  }
  return descending ? static_cast<Key>(~key) : key;
}

}  // namespace kiln::kernels
