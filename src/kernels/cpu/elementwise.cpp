// CPU kernels: unary elementwise ops, cast, fill and iota.
//
// Every kernel splits its output into contiguous pieces across the thread
// pool (elementwise_loops.h) and runs plain loops over each piece: an op's
// scalar meaning (kernels/scalar_ops.h, found through the op table), which GCC
// vectorizes with the widest vectors (checked in the assembly), except where
// GCC cannot: float transcendentals use vector_math.h (f32) and sqrt, rsqrt,
// floor, ceil and round use AVX-512 intrinsics (GCC keeps the builtins scalar
// because of errno and -ftrapping-math), exact operations that give the scalar
// meaning's bits.

#include "core/half_precision.h"
#include "core/half_precision_bits.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/vector_math_f64.h"
#include "kernels/scalar_dispatch.h"

#include <kiln/error.h>

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

// ---- sqrt, rsqrt, floor, ceil, round of floats: correctly rounded or exact, so
// AVX-512's instructions give the scalar meaning's bits and the tail may run
// the scalar meaning.

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

template <class T, class Scalar, class VectorFunction>
void map_exact(const Array& input, const Array& output, Scalar scalar_function, VectorFunction vector_function) {
  using Isa = Avx512<T>;
  const T* in = input.data<T>();
  T* out = output.mutable_data<T>();
  runtime::parallel_for(output.shape.numel(), elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
    std::int64_t i = begin;
    for (; i + Isa::lanes <= end; i += Isa::lanes) Isa::store(out + i, vector_function(Isa::load(in + i)));
    for (; i < end; ++i) out[i] = scalar_function(in[i]);
  });
}

// Runs `op` with AVX-512 if it is one of these; returns false otherwise.
template <class T>
bool exact_math(Op op, const Array& input, const Array& output) {
  using Isa = Avx512<T>;
  using Vector = typename Isa::Vector;
  switch (op) {
    case Op::sqrt:
      map_exact<T>(input, output, scalar::sqrt{}, [](Vector v) { return Isa::sqrt(v); });
      return true;
    case Op::rsqrt:
      map_exact<T>(input, output, scalar::rsqrt{}, [](Vector v) { return Isa::rsqrt(v); });
      return true;
    case Op::floor:
      map_exact<T>(input, output, scalar::floor{}, [](Vector v) { return Isa::floor(v); });
      return true;
    case Op::ceil:
      map_exact<T>(input, output, scalar::ceil{}, [](Vector v) { return Isa::ceil(v); });
      return true;
    case Op::round:
      map_exact<T>(input, output, scalar::round{}, [](Vector v) { return Isa::round(v); });
      return true;
    default:
      return false;
  }
}
#else
template <class T>
bool exact_math(Op, const Array&, const Array&) {
  return false;
}
#endif

// ---- unary ops by meaning (ir/ops.def) ----------------------------------------

// Ops of meaning `scalar`; returns false if `op` is not one of them or does not take T.
template <class T>
bool unary_scalar(Op op, const Array& input, const Array& output) {
  if constexpr (std::is_floating_point_v<T>)
    if (exact_math<T>(op, input, output)) return true;
  const std::int64_t grain = elementwise::grain_for(ir::flops_per_element(op));
  return visit_scalar_op<1>(op, [&](auto function) {
    if constexpr (!accepts<decltype(function), T>) {
      return false;
    } else {
      map<T, T>(input, output, grain, function);
      return true;
    }
  });
}

// Ops of meaning `math`: vector_math.h for f32 and vector_math_f64.h for f64,
// the functions the JIT's generated code uses too. The lambdas are always
// inlined: without AVX-512 (KILN_NATIVE=OFF) a function returning a 64- or
// 128-byte vector would otherwise trip GCC's -Wpsabi, an error under -Werror.
template <class T>
bool unary_math(Op op, const Array& input, const Array& output) {
  if constexpr (!std::is_floating_point_v<T>) {
    return false;
  } else {
    using Vector = decltype(vm::load(static_cast<const T*>(nullptr)));
    switch (op) {
#define KILN_CASE_scalar(name)
#define KILN_CASE_math(name)                                                                 \
  case Op::name:                                                                             \
    map_vector_math<T>(                                                                      \
        input, output, [](Vector x) __attribute__((always_inline)) { return vm::name(x); }); \
    return true;
#define KILN_CASE_own(name)
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) KILN_CASE_##meaning(name)
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_CASE_own
#undef KILN_CASE_math
#undef KILN_CASE_scalar
      default:
        return false;
    }
  }
}

}  // namespace

void unary(Op op, const Array& input, const Array& output) {
  check_same_shape(op, input, output);
  if (input.dtype != output.dtype)
    throw InternalError(std::string(ir::name(op)), "input and output dtypes differ", std::string());
  const bool done = visit_dtype(
      input.dtype, [&]<class T>() { return unary_scalar<T>(op, input, output) || unary_math<T>(op, input, output); });
  if (!done) no_kernel(op, input.dtype);
}

namespace {

// Element i of a bf16 or f16 array, exactly.
float half_value(const Array& array, std::int64_t i) {
  return half_precision_value(array.dtype, array.data<std::uint16_t>()[i]);
}

// A cast from or to bf16 or f16: through their exact f32 values, to a value rounded once (to_bfloat16 and
// to_float16 take a double: from f64 and integers too, one rounding).
void cast_half_precision(const Array& input, const Array& output) {
  const std::int64_t count = input.shape.numel();
  if (is_half_precision(output.dtype)) {
    auto* out = output.mutable_data<std::uint16_t>();
    const bool brain = output.dtype == DType::bf16;
    auto round = [&](double value) { return half_precision_bits(output.dtype, value); };
    if (is_half_precision(input.dtype)) {
      runtime::parallel_for(count, elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) out[i] = round(half_value(input, i));
      });
      return;
    }
    if (input.dtype == DType::f32 && brain) {
      // From f32 one rounding is all there is, on the upper half of the bits, which GCC vectorizes: what every op
      // on bf16 pays at its output, 5x faster than through to_bfloat16's double.
      const auto* in = input.data<std::uint32_t>();
      runtime::parallel_for(count, elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) out[i] = half_bits::bf16_from_f32(in[i]);
      });
      return;
    }
    visit_dtype(input.dtype, [&]<class From>() {
      const From* in = input.data<From>();
      runtime::parallel_for(count, elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t i = begin; i < end; ++i) out[i] = round(static_cast<double>(in[i]));
      });
    });
    return;
  }
  if (input.dtype == DType::bf16 && output.dtype == DType::f32) {  // exact: the bits moved up (vectorized)
    const auto* in = input.data<std::uint16_t>();
    auto* out = output.mutable_data<std::uint32_t>();
    runtime::parallel_for(count, elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = static_cast<std::uint32_t>(in[i]) << 16;
    });
    return;
  }
  visit_dtype(output.dtype, [&]<class To>() {
    To* out = output.mutable_data<To>();
    runtime::parallel_for(count, elementwise::cheap_grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) out[i] = scalar::convert<To>{}(half_value(input, i));
    });
  });
}

}  // namespace

// scalar_ops.h's convert: float to integer truncates and saturates, NaN to 0.
void cast(const Array& input, const Array& output) {
  check_same_shape(Op::cast, input, output);
  if (is_half_precision(input.dtype) || is_half_precision(output.dtype)) {
    cast_half_precision(input, output);
    return;
  }
  visit_dtype(input.dtype, [&]<class From>() {
    visit_dtype(output.dtype,
                [&]<class To>() { map<From, To>(input, output, elementwise::cheap_grain, scalar::convert<To>{}); });
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
