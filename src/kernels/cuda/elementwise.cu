// CUDA kernels: unary elementwise ops, cast, fill and iota.
//
// One grid-stride kernel maps a function over contiguous elements; when the
// arrays are 16-byte aligned (always, for buffers of the caching allocator)
// each thread moves 16 bytes per access of the wider type (4 f32, 2 f64, 16
// bools), and the tail past the last whole pack goes element by element.

#include "core/half_precision_bits.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/scalar_dispatch.h"

#include <type_traits>

namespace kiln::kernels::cuda {
namespace {

using ir::Op;
using runtime::Array;

template <class In, class Out, class Function>
__global__ void map_kernel(const In* __restrict__ in, Out* __restrict__ out, std::int64_t count, bool packed,
                           Function function) {
  constexpr int width = pack_width<In, Out>;
  std::int64_t done = 0;
  if (packed) {
    std::int64_t packs = count / width;
#pragma unroll 4  // several 16-byte loads in flight per thread
    for (std::int64_t p = thread_index(); p < packs; p += thread_count()) {
      Pack<In, width> x = load_pack<width>(in, p);
      Pack<Out, width> y;
#pragma unroll
      for (int j = 0; j < width; ++j) y.value[j] = function(x.value[j]);
      store_pack<width>(out, p, y);
    }
    done = packs * width;
  }
  for (std::int64_t i = done + thread_index(); i < count; i += thread_count()) out[i] = function(in[i]);
}

template <class In, class Out, class Function>
void map(const char* name, const Array& input, const Array& output, Function function) {
  std::int64_t count = output.shape.numel();
  if (count == 0) return;
  auto& context = context_of(output, name);
  const In* in = input.data<In>();
  Out* out = output.mutable_data<Out>();
  bool packed = aligned_16(in) && aligned_16(out);
  launch(name, context, packed ? count / pack_width<In, Out> + 1 : count, &map_kernel<In, Out, Function>, in, out,
         count, packed, function);
}

// Every unary op of the op table (ir/ops.def) that is a function of its element: its scalar meaning
// (kernels/scalar_ops.h) or the GPU's math function (device_math.cuh); false if `op` is neither or does not take T.
template <class T> bool unary_typed(Op op, const Array& input, const Array& output) {
  const std::string name(ir::name(op));
  auto run = [&](auto function) {
    if constexpr (!accepts<decltype(function), T>) {
      return false;
    } else {
      map<T, T>(name.c_str(), input, output, function);
      return true;
    }
  };
  if (visit_scalar_op<1>(op, run)) return true;
  switch (op) {
#define KILN_CASE_scalar(op_name)
#define KILN_CASE_math(op_name) \
  case Op::op_name:             \
    return run(device_math::op_name{});
#define KILN_CASE_own(op_name)
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

template <class T, int width> __global__ void fill_kernel(T* __restrict__ out, std::int64_t count, T value) {
  Pack<T, width> pack;
#pragma unroll
  for (int j = 0; j < width; ++j) pack.value[j] = value;
  std::int64_t packs = count / width;
  for (std::int64_t p = thread_index(); p < packs; p += thread_count()) store_pack<width>(out, p, pack);
  for (std::int64_t i = packs * width + thread_index(); i < count; i += thread_count()) out[i] = value;
}

template <class T>
__global__ void iota_kernel(T* __restrict__ out, std::int64_t count, std::int64_t length, std::int64_t inner) {
  for (std::int64_t i = thread_index(); i < count; i += thread_count()) out[i] = static_cast<T>(i / inner % length);
}

// ---- casts from and to bf16 and f16 -----------------------------------------------------
// Their elements are bits (uint16_t); every conversion rounds as the CPU's cast kernel does, through the one
// header both use (core/half_precision_bits.h), so the two devices agree to the bit.

// The exact f32 value of a bf16 (`brain`) or f16 element.
template <bool brain>
__host__ __device__ __forceinline__ float widen_half(std::uint16_t bits) {
  return __builtin_bit_cast(float, brain ? half_bits::f32_from_bf16(bits) : half_bits::f32_from_f16(bits));
}

// x rounded once to a bf16 (`brain`) or f16: from f32 directly, from f64, integers and bool through their double
// value (half_bits::bf16_from_f64 rounds that once, as the CPU kernel does).
template <bool brain>
struct round_to_half {
  template <class From>
  __host__ __device__ std::uint16_t operator()(From x) const {
    if constexpr (std::is_same_v<From, float>) {
      // (Not a const variable: nvcc 13 fails on a constant-folding attempt of a bit cast.)
      std::uint32_t bits = __builtin_bit_cast(std::uint32_t, x);
      return brain ? half_bits::bf16_from_f32(bits) : half_bits::f16_from_f32(bits);
    } else {
      const double value = static_cast<double>(x);
      return brain ? half_bits::bf16_from_f64(value) : half_bits::f16_from_f64(value);
    }
  }
};

// A bf16 or f16 element widened (exactly) and then given to `then`: a conversion to another dtype.
template <bool brain, class Then>
struct from_half {
  Then then;
  __host__ __device__ auto operator()(std::uint16_t bits) const { return then(widen_half<brain>(bits)); }
};

// Calls `function` with std::true_type for bf16 and std::false_type for f16.
template <class Function>
void visit_half(DType dtype, Function&& function) {
  if (dtype == DType::bf16)
    function(std::true_type{});
  else
    function(std::false_type{});
}

void cast_half_precision(const Array& input, const Array& output) {
  if (is_half_precision(input.dtype)) {
    visit_half(input.dtype, [&](auto from_brain) {
      constexpr bool brain = decltype(from_brain)::value;
      if (is_half_precision(output.dtype))
        visit_half(output.dtype, [&](auto to_brain) {
          using Round = round_to_half<decltype(to_brain)::value>;
          map<std::uint16_t, std::uint16_t>("cast", input, output, from_half<brain, Round>{Round{}});
        });
      else
        visit_dtype(output.dtype, [&]<class To>() {
          map<std::uint16_t, To>("cast", input, output, from_half<brain, scalar::convert<To>>{scalar::convert<To>{}});
        });
    });
    return;
  }
  visit_half(output.dtype, [&](auto to_brain) {
    using Round = round_to_half<decltype(to_brain)::value>;
    visit_dtype(input.dtype, [&]<class From>() { map<From, std::uint16_t>("cast", input, output, Round{}); });
  });
}

}  // namespace

void unary(Op op, const Array& input, const Array& output) {
  if (!(input.shape == output.shape) || input.dtype != output.dtype)
    internal_error(std::string(ir::name(op)), "input and output differ in shape or dtype");
  bool done = visit_dtype(input.dtype, [&]<class T>() { return unary_typed<T>(op, input, output); });
  if (!done) internal_error(std::string(ir::name(op)), "has no kernel for " + std::string(to_string(input.dtype)));
}

void cast(const Array& input, const Array& output) {
  if (!(input.shape == output.shape)) internal_error("cast", "input and output shapes differ");
  if (is_half_precision(input.dtype) || is_half_precision(output.dtype)) {
    cast_half_precision(input, output);
    return;
  }
  visit_dtype(input.dtype, [&]<class From>() {
    visit_dtype(output.dtype, [&]<class To>() { map<From, To>("cast", input, output, scalar::convert<To>{}); });
  });
}

void fill(const ir::Attributes& attributes, const Array& output) {
  std::int64_t count = output.shape.numel();
  if (count == 0) return;
  auto& context = context_of(output, "constant");
  visit_dtype(output.dtype, [&]<class T>() {
    T value;
    if constexpr (std::is_same_v<T, Bool>) value = attributes.int_value != 0;
    else if constexpr (std::is_floating_point_v<T>) value = static_cast<T>(attributes.float_value);
    else value = static_cast<T>(attributes.int_value);
    T* out = output.mutable_data<T>();
    if (aligned_16(out))
      launch("constant", context, count / pack_width<T> + 1, &fill_kernel<T, pack_width<T>>, out, count, value);
    else
      launch("constant", context, count, &fill_kernel<T, 1>, out, count, value);
  });
}

void iota(std::int64_t axis, const Array& output) {
  const Shape& shape = output.shape;
  if (axis < 0 || axis >= shape.rank()) internal_error("iota", "axis " + std::to_string(axis) + " is out of range");
  std::int64_t count = shape.numel();
  if (count == 0) return;
  std::int64_t length = shape[static_cast<int>(axis)];
  std::int64_t inner = 1;
  for (int d = static_cast<int>(axis) + 1; d < shape.rank(); ++d) inner *= shape[d];
  auto& context = context_of(output, "iota");
  visit_dtype(output.dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, Bool>) internal_error("iota", "has no kernel for bool");
    else launch("iota", context, count, &iota_kernel<T>, output.mutable_data<T>(), count, length, inner);
  });
}

}  // namespace kiln::kernels::cuda
