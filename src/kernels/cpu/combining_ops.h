#pragma once
// The combining operations of the reductions and the scans (reduction.cpp, scan.cpp), written once for scalars and
// GCC vectors: sum, product, and maximum and minimum where a NaN wins. Integer sums and products accumulate in the
// unsigned type (Accumulator), so that they wrap instead of overflowing.

#include "kernels/cpu/vector_math.h"
#include "kernels/scalar_ops.h"

#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>

namespace kiln::kernels::cpu {

// The combining operations, written once for scalars and vectors. `V` is the
// accumulation type: unsigned for integer sum/prod (wraparound), the element
// type otherwise.
struct SumOp {
  template <class X>
  static X apply(X a, X b) {
    return a + b;
  }
  template <class V>
  static V identity() {
    return V(0);
  }
};
struct ProdOp {
  template <class X>
  static X apply(X a, X b) {
    return a * b;
  }
  template <class V>
  static V identity() {
    return V(1);
  }
};
// The element type of a scalar or of a GCC vector.
template <class X>
struct ElementOf {
  using type = X;
};
template <class X>
requires requires(X x) { x[0]; }
struct ElementOf<X> {
  using type = std::remove_cvref_t<decltype(std::declval<X>()[0])>;
};
template <class X>
constexpr bool is_float_like = std::is_floating_point_v<typename ElementOf<X>::type>;

// Of float vectors, b where compare(b, a) holds or b is NaN, else a (the scalar maximum(b, a) or minimum(b, a)),
// register by register. GCC 12 compiles a comparison or a `mask ? b : a` of a vector wider than the registers (a
// 64-byte Vec with AVX2) lane by lane: a float max ran 13x slower than a sum, 2026-12-01. Split into register-wide
// halves (vector_math.h's), it is a compare, an unordered compare, an or and a blend per register.
template <class X, class Compare>
X float_choice(X a, X b, Compare compare) {
  if constexpr (sizeof(X) > vector_math::kRegisterBytes) {
    namespace halves = vector_math::halves;
    return halves::join(float_choice(halves::low(a), halves::low(b), compare),
                        float_choice(halves::high(a), halves::high(b), compare));
  } else {
    return (compare(b, a) | (b != b)) ? b : a;
  }
}

// b wins if it is larger or NaN; a NaN in `a` compares false and stays: of elements, the elementwise maximum(b, a)
// (kernels/scalar_ops.h).
struct MaxOp {
  template <class X>
  static X apply(X a, X b) {
    if constexpr (std::is_arithmetic_v<X>)
      return scalar::maximum{}(b, a);
    else if constexpr (is_float_like<X>)
      return float_choice(a, b, [](auto x, auto y) { return x > y; });
    else
      return b > a ? b : a;
  }
  template <class V>
  static V identity() {
    if constexpr (std::numeric_limits<V>::has_infinity)
      return -std::numeric_limits<V>::infinity();
    else
      return std::numeric_limits<V>::lowest();
  }
};
struct MinOp {
  template <class X>
  static X apply(X a, X b) {
    if constexpr (std::is_arithmetic_v<X>)
      return scalar::minimum{}(b, a);
    else if constexpr (is_float_like<X>)
      return float_choice(a, b, [](auto x, auto y) { return x < y; });
    else
      return b < a ? b : a;
  }
  template <class V>
  static V identity() {
    if constexpr (std::numeric_limits<V>::has_infinity)
      return std::numeric_limits<V>::infinity();
    else if constexpr (std::is_same_v<V, std::uint8_t>)
      return 1;  // bool: all() of nothing
    else
      return std::numeric_limits<V>::max();
  }
};

// The accumulation type: unsigned for integer sum and prod so that they wrap.
template <class Op, class T>
struct AccumulatorOf {
  using type = T;
};
template <class Op, class T>
requires(std::is_integral_v<T> &&
         (std::is_same_v<Op, SumOp> || std::is_same_v<Op, ProdOp>)) struct AccumulatorOf<Op, T> {
  using type = std::make_unsigned_t<T>;
};
template <class Op, class T>
using Accumulator = typename AccumulatorOf<Op, T>::type;

}  // namespace kiln::kernels::cpu
