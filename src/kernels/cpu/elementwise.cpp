// CPU kernels: unary elementwise ops, cast, fill and iota.
//
// Every kernel splits its output into contiguous pieces across the thread
// pool (elementwise_loops.h) and runs plain loops over each piece that GCC
// vectorizes with the widest vectors (checked in the assembly), except where
// GCC cannot: float transcendentals use vector_math.h (f32) and sqrt, rsqrt,
// floor and ceil use AVX-512 intrinsics (GCC keeps std::sqrt scalar because
// of errno and std::floor/ceil because of -ftrapping-math).
//
// Integer arithmetic wraps modulo 2^bits (computed in unsigned types, so it
// is never undefined behaviour): neg and abs of the most negative value give
// that value back, as two's complement hardware does.

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/vector_math_f64.h"

#include <kiln/error.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace kiln::kernels::cpu {
namespace {

using ir::Op;
using runtime::Array;
namespace vm = kiln::vector_math;

template <class T> using Unsigned = std::make_unsigned_t<T>;

[[noreturn]] void no_kernel(Op op, DType dtype) {
  throw InternalError(std::string(ir::name(op)), "has no CPU kernel for " + std::string(to_string(dtype)) +
                                                     " (the type rules should have rejected it)",
                      std::string());
}

void check_same_shape(Op op, const Array& input, const Array& output) {
  if (!(input.shape == output.shape))
    throw InternalError(std::string(ir::name(op)),
                        "input " + input.shape.to_string() + " and output " + output.shape.to_string() + " differ",
                        std::string());
}

// out[i] = function(in[i]) over all elements, in contiguous pieces across
// the thread pool.
template <class In, class Out, class Function>
void map(const Array& input, const Array& output, std::int64_t grain, Function function) {
  const In* in = input.data<In>();
  Out* out = output.mutable_data<Out>();
  runtime::parallel_for(output.shape.numel(), grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out[i] = function(in[i]);
  });
}

// map for f32 and f64 with a vector_math function of vm::kLanes lanes; the tail goes
// through a partial vector, so every element sees the same code. These
// functions are compute-bound (two cores cannot evaluate them as fast as
// memory streams), so the main loop works on 4 independent vectors at a
// time, which measured 5-10% faster than one (more independent work for the
// out-of-order core between the long dependency chains).
template <class T, class VectorFunction>
void map_vector_math(const Array& input, const Array& output, VectorFunction function) {
  const T* in = input.data<T>();
  T* out = output.mutable_data<T>();
  runtime::parallel_for(output.shape.numel(), elementwise::costly_grain, [&](std::int64_t begin, std::int64_t end) {
    constexpr int unroll = 4;
    using Vector = decltype(vm::load(in));
    std::int64_t i = begin;
    constexpr int lanes = vm::kLanes;
    for (; i + lanes * unroll <= end; i += lanes * unroll) {
      Vector results[unroll];
      for (int u = 0; u < unroll; ++u) results[u] = function(vm::load(in + i + lanes * u));
      for (int u = 0; u < unroll; ++u) vm::store(out + i + lanes * u, results[u]);
    }
    for (; i + lanes <= end; i += lanes) vm::store(out + i, function(vm::load(in + i)));
    if (i < end) {
      int rest = static_cast<int>(end - i);
      vm::store_partial(out + i, function(vm::load_partial(in + i, rest)), rest);
    }
  });
}

// ---- sqrt, rsqrt, floor, ceil, round: correctly rounded / exact, so vector and
// scalar code agree bit for bit and the tail may run scalar.

enum class ExactMath { sqrt, rsqrt, floor, ceil, round };

template <class T> T exact_scalar(ExactMath kind, T x) {
  switch (kind) {
    case ExactMath::sqrt: return std::sqrt(x);
    case ExactMath::rsqrt: return T(1) / std::sqrt(x);
    case ExactMath::floor: return std::floor(x);
    case ExactMath::round:
      return __builtin_roundeven(x);  // whatever the rounding mode
    case ExactMath::ceil: break;
  }
  return std::ceil(x);
}

#if defined(__AVX512F__)
// The zero-masked forms with a full mask: the unmasked intrinsics trip GCC 12's
// -Wmaybe-uninitialized (a false positive on _mm512_undefined_*); the code is the same.
template <class T> struct Avx512;
template <> struct Avx512<float> {
  using Vector = __m512;
  static constexpr int lanes = 16;
  static constexpr __mmask16 all = 0xffff;
  static Vector load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, Vector v) { _mm512_storeu_ps(p, v); }
  static Vector sqrt(Vector v) { return _mm512_maskz_sqrt_ps(all, v); }
  static Vector rsqrt(Vector v) { return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_maskz_sqrt_ps(all, v)); }
  static Vector floor(Vector v) { return _mm512_maskz_roundscale_ps(all, v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static Vector ceil(Vector v) { return _mm512_maskz_roundscale_ps(all, v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
  static Vector round(Vector v) {
    return _mm512_maskz_roundscale_ps(all, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
};
template <> struct Avx512<double> {
  using Vector = __m512d;
  static constexpr int lanes = 8;
  static constexpr __mmask8 all = 0xff;
  static Vector load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, Vector v) { _mm512_storeu_pd(p, v); }
  static Vector sqrt(Vector v) { return _mm512_maskz_sqrt_pd(all, v); }
  static Vector rsqrt(Vector v) { return _mm512_div_pd(_mm512_set1_pd(1.0), _mm512_maskz_sqrt_pd(all, v)); }
  static Vector floor(Vector v) { return _mm512_maskz_roundscale_pd(all, v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }
  static Vector ceil(Vector v) { return _mm512_maskz_roundscale_pd(all, v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC); }
  static Vector round(Vector v) {
    return _mm512_maskz_roundscale_pd(all, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
};

template <class T, class VectorFunction>
void map_exact(ExactMath kind, const Array& input, const Array& output, VectorFunction function) {
  using Isa = Avx512<T>;
  const T* in = input.data<T>();
  T* out = output.mutable_data<T>();
  runtime::parallel_for(output.shape.numel(), elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
    std::int64_t i = begin;
    for (; i + Isa::lanes <= end; i += Isa::lanes) Isa::store(out + i, function(Isa::load(in + i)));
    for (; i < end; ++i) out[i] = exact_scalar(kind, in[i]);
  });
}

template <class T> void exact_math(ExactMath kind, const Array& input, const Array& output) {
  using Isa = Avx512<T>;
  using Vector = typename Isa::Vector;
  switch (kind) {
    case ExactMath::sqrt: return map_exact<T>(kind, input, output, [](Vector v) { return Isa::sqrt(v); });
    case ExactMath::rsqrt: return map_exact<T>(kind, input, output, [](Vector v) { return Isa::rsqrt(v); });
    case ExactMath::floor: return map_exact<T>(kind, input, output, [](Vector v) { return Isa::floor(v); });
    case ExactMath::ceil: return map_exact<T>(kind, input, output, [](Vector v) { return Isa::ceil(v); });
    case ExactMath::round:
      return map_exact<T>(kind, input, output, [](Vector v) { return Isa::round(v); });
  }
}
#else
template <class T> void exact_math(ExactMath kind, const Array& input, const Array& output) {
  map<T, T>(input, output, elementwise::cheap_grain, [kind](T x) { return exact_scalar(kind, x); });
}
#endif

// ---- unary ops by dtype family ----------------------------------------------

// Ops every numeric dtype has; returns false if `op` is not one of them.
template <class T> bool unary_numeric(Op op, const Array& input, const Array& output) {
  constexpr auto grain = elementwise::cheap_grain;
  if constexpr (std::is_integral_v<T>) {
    using U = Unsigned<T>;
    switch (op) {
      case Op::neg: map<T, T>(input, output, grain, [](T x) { return static_cast<T>(U(0) - static_cast<U>(x)); }); return true;
      case Op::abs:
        map<T, T>(input, output, grain, [](T x) { return x < 0 ? static_cast<T>(U(0) - static_cast<U>(x)) : x; });
        return true;
      case Op::sign: map<T, T>(input, output, grain, [](T x) { return static_cast<T>((x > 0) - (x < 0)); }); return true;
      case Op::square:
        map<T, T>(input, output, grain, [](T x) { return static_cast<T>(static_cast<U>(x) * static_cast<U>(x)); });
        return true;
      case Op::relu:
        map<T, T>(input, output, grain, [](T x) { return x <= 0 ? T(0) : x; });
        return true;
      case Op::floor:
      case Op::ceil:
      case Op::round:
        map<T, T>(input, output, grain, [](T x) { return x; });
        return true;
      case Op::bitwise_not:
        map<T, T>(input, output, grain, [](T x) { return static_cast<T>(~x); });
        return true;
      default: return false;
    }
  } else {
    switch (op) {
      case Op::neg: map<T, T>(input, output, grain, [](T x) { return -x; }); return true;
      case Op::abs: map<T, T>(input, output, grain, [](T x) { return std::abs(x); }); return true;
      // Zeros keep their sign and NaN stays NaN.
      case Op::sign: map<T, T>(input, output, grain, [](T x) { return x > 0 ? T(1) : x < 0 ? T(-1) : x; }); return true;
      case Op::square: map<T, T>(input, output, grain, [](T x) { return x * x; }); return true;
      // relu(-0) = +0 (as max(-0, +0) with +0 above -0, and the reference); relu(NaN) = NaN: the comparison is
      // false for NaN, which passes through.
      case Op::relu:
        map<T, T>(input, output, grain, [](T x) { return x <= 0 ? T(0) : x; });
        return true;
      case Op::floor: exact_math<T>(ExactMath::floor, input, output); return true;
      case Op::ceil: exact_math<T>(ExactMath::ceil, input, output); return true;
      case Op::round:
        exact_math<T>(ExactMath::round, input, output);
        return true;
      case Op::sqrt: exact_math<T>(ExactMath::sqrt, input, output); return true;
      case Op::rsqrt: exact_math<T>(ExactMath::rsqrt, input, output); return true;
      default: return false;
    }
  }
}

// Transcendentals: vector_math.h for f32 and vector_math_f64.h for f64, the
// functions the JIT's generated code uses too. The lambdas are always
// inlined: without AVX-512 (KILN_NATIVE=OFF) a function returning a 64- or
// 128-byte vector would otherwise trip GCC's -Wpsabi, an error under -Werror.
template <class T>
bool unary_transcendental(Op op, const Array& input, const Array& output) {
  using Vector = decltype(vm::load(static_cast<const T*>(nullptr)));
#define KILN_MAP_VECTOR_MATH(name) \
  map_vector_math<T>(              \
      input, output, [](Vector x) __attribute__((always_inline)) { return vm::name(x); })
  switch (op) {
    case Op::sin:
      KILN_MAP_VECTOR_MATH(sin);
      return true;
    case Op::cos:
      KILN_MAP_VECTOR_MATH(cos);
      return true;
    case Op::exp:
      KILN_MAP_VECTOR_MATH(exp);
      return true;
    case Op::log:
      KILN_MAP_VECTOR_MATH(log);
      return true;
    case Op::tanh:
      KILN_MAP_VECTOR_MATH(tanh);
      return true;
    case Op::sigmoid:
      KILN_MAP_VECTOR_MATH(sigmoid);
      return true;
    case Op::erf:
      KILN_MAP_VECTOR_MATH(erf);
      return true;
    case Op::erfc:
      KILN_MAP_VECTOR_MATH(erfc);
      return true;
    case Op::log1p:
      KILN_MAP_VECTOR_MATH(log1p);
      return true;
    case Op::expm1:
      KILN_MAP_VECTOR_MATH(expm1);
      return true;
    case Op::atan:
      KILN_MAP_VECTOR_MATH(atan);
      return true;
    default: return false;
  }
#undef KILN_MAP_VECTOR_MATH
}

// ---- cast -------------------------------------------------------------------

// Float to integer: truncation toward zero where the value fits; values
// beyond the integer's range saturate to its minimum or maximum and NaN
// becomes 0 (C++ leaves all three undefined; this is what NumPy's and TF's
// CPU kernels produce for most inputs, made well-defined for all).
template <class To, class From> To saturating_truncate(From x) {
  // -(minimum) = 2^31 or 2^63, exact in both float and double.
  constexpr From limit = -static_cast<From>(std::numeric_limits<To>::min());
  if (x != x) return To(0);
  if (x >= limit) return std::numeric_limits<To>::max();
  if (x < -limit) return std::numeric_limits<To>::min();
  return static_cast<To>(x);
}

template <class To, class From> To convert(From x) {
  if constexpr (std::is_same_v<To, std::uint8_t>) return x != From(0);  // to bool (NaN is != 0: true)
  else if constexpr (std::is_floating_point_v<From> && std::is_integral_v<To>) return saturating_truncate<To>(x);
  else return static_cast<To>(x);  // bool 0/1 to 0/1; integers wrap modulo 2^bits; floats round to nearest
}

}  // namespace

void unary(Op op, const Array& input, const Array& output) {
  check_same_shape(op, input, output);
  if (input.dtype != output.dtype)
    throw InternalError(std::string(ir::name(op)), "input and output dtypes differ", std::string());
  bool done = false;
  switch (input.dtype) {
    case DType::f32:
      done = unary_numeric<float>(op, input, output) || unary_transcendental<float>(op, input, output);
      break;
    case DType::f64:
      done = unary_numeric<double>(op, input, output) || unary_transcendental<double>(op, input, output);
      break;
    case DType::i32: done = unary_numeric<std::int32_t>(op, input, output); break;
    case DType::i64: done = unary_numeric<std::int64_t>(op, input, output); break;
    case DType::boolean:
      if (op == Op::logical_not || op == Op::bitwise_not) {  // on bools, bitwise_not is logical_not
        map<std::uint8_t, std::uint8_t>(input, output, elementwise::cheap_grain,
                                        [](std::uint8_t x) { return static_cast<std::uint8_t>(x == 0); });
        done = true;
      }
      break;
  }
  if (!done) no_kernel(op, input.dtype);
}

void cast(const Array& input, const Array& output) {
  check_same_shape(Op::cast, input, output);
  visit_dtype(input.dtype, [&]<class From>() {
    visit_dtype(output.dtype, [&]<class To>() {
      map<From, To>(input, output, elementwise::cheap_grain, [](From x) { return convert<To>(x); });
    });
  });
}

void fill(const ir::Attributes& attributes, const Array& output) {
  visit_dtype(output.dtype, [&]<class T>() {
    T value;
    if constexpr (std::is_same_v<T, std::uint8_t>) value = attributes.int_value != 0;
    else if constexpr (std::is_floating_point_v<T>) value = static_cast<T>(attributes.float_value);
    else value = static_cast<T>(attributes.int_value);
    T* out = output.mutable_data<T>();
    runtime::parallel_for(output.shape.numel(), elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = value;
    });
  });
}

void iota(std::int64_t axis, const Array& output) {
  const Shape& shape = output.shape;
  if (axis < 0 || axis >= shape.rank())
    throw InternalError("iota", "axis " + std::to_string(axis) + " is out of range for " + shape.to_string(),
                        std::string());
  std::int64_t length = shape[static_cast<int>(axis)];
  std::int64_t inner = 1;  // elements per step along the axis
  for (int d = static_cast<int>(axis) + 1; d < shape.rank(); ++d) inner *= shape[d];
  visit_dtype(output.dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, std::uint8_t>) {
      no_kernel(Op::iota, output.dtype);
    } else {
      T* out = output.mutable_data<T>();
      runtime::parallel_for(shape.numel(), elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
        std::int64_t i = begin;
        std::int64_t step = begin / inner;  // index of [begin, ...) along all axes up to `axis`
        std::int64_t value = step % length;
        if (inner == 1) {  // the axis is innermost: ramps 0, 1, ..., length - 1
          while (i < end) {
            std::int64_t count = std::min(end - i, length - value);
            for (std::int64_t j = 0; j < count; ++j) out[i + j] = static_cast<T>(value + j);
            i += count;
            value = 0;
          }
          return;
        }
        while (i < end) {  // runs of `inner` equal values
          std::int64_t run_end = std::min(end, (step + 1) * inner);
          for (std::int64_t j = i; j < run_end; ++j) out[j] = static_cast<T>(value);
          i = run_end;
          ++step;
          if (++value == length) value = 0;
        }
      });
    }
  });
}

}  // namespace kiln::kernels::cpu
