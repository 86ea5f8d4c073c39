// CUDA kernels: binary elementwise ops and where(), with NumPy broadcasting.
//
// Broadcasting is planned once per call on the host (plan.h): when every
// operand is contiguous or a single element (same shapes, a scalar operand)
// a flat kernel moves 16-byte packs; otherwise a strided kernel finds each
// operand's element from the output index through the collapsed loop nest
// ([4096,4096] + [4096] is rank 2: one 32-bit division per element).

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/scalar_dispatch.h"

namespace kiln::kernels::cuda {
namespace {

using ir::Op;
using runtime::Array;

// ---- binary ---------------------------------------------------------------------------

template <class In, class Out, class Function>
__global__ void binary_flat_kernel(const In* __restrict__ a, const In* __restrict__ b, Out* __restrict__ out,
                                   std::int64_t count, bool a_scalar, bool b_scalar, bool packed,
                                   Function function) {
  constexpr int width = pack_width<In, Out>;
  std::int64_t done = 0;
  if (packed) {
    std::int64_t packs = count / width;
#pragma unroll 4  // several 16-byte loads in flight per thread
    for (std::int64_t p = thread_index(); p < packs; p += thread_count()) {
      Pack<In, width> x = load_operand<width>(a, a_scalar, p);
      Pack<In, width> y = load_operand<width>(b, b_scalar, p);
      Pack<Out, width> z;
#pragma unroll
      for (int j = 0; j < width; ++j) z.value[j] = function(x.value[j], y.value[j]);
      store_pack<width>(out, p, z);
    }
    done = packs * width;
  }
  for (std::int64_t i = done + thread_index(); i < count; i += thread_count())
    out[i] = function(a[a_scalar ? 0 : i], b[b_scalar ? 0 : i]);
}

template <class Index, class In, class Out, class Function>
__global__ void binary_strided_kernel(const In* __restrict__ a, const In* __restrict__ b, Out* __restrict__ out,
                                      Index count, BroadcastPlan<2> plan, Function function) {
  for (Index i = static_cast<Index>(thread_index()); i < count; i += static_cast<Index>(thread_count())) {
    Index offsets[2];
    broadcast_offsets(plan, i, offsets);
    out[i] = function(a[offsets[0]], b[offsets[1]]);
  }
}

template <class In, class Out, class Function>
void broadcast_binary(const char* name, const Array& a, const Array& b, const Array& output, Function function) {
  std::int64_t count = output.shape.numel();
  if (count == 0) return;
  auto& context = context_of(output, name);
  const In* a_data = a.data<In>();
  const In* b_data = b.data<In>();
  Out* out = output.mutable_data<Out>();
  const BroadcastPlan<2> plan = plan_broadcast<2>(output.shape, {&a.shape, &b.shape});
  if (plan.flat()) {
    bool a_scalar = plan.scalar(0), b_scalar = plan.scalar(1);
    bool packed = aligned_16(out) && (a_scalar || aligned_16(a_data)) && (b_scalar || aligned_16(b_data));
    launch(name, context, packed ? count / pack_width<In, Out> + 1 : count, &binary_flat_kernel<In, Out, Function>,
           a_data, b_data, out, count, a_scalar, b_scalar, packed, function);
  } else if (fits_32_bits(count)) {
    launch(name, context, count, &binary_strided_kernel<std::uint32_t, In, Out, Function>, a_data, b_data, out,
           static_cast<std::uint32_t>(count), plan, function);
  } else {
    launch(name, context, count, &binary_strided_kernel<std::int64_t, In, Out, Function>, a_data, b_data, out, count,
           plan, function);
  }
}

// Every binary op of meaning `scalar` in the op table (ir/ops.def): its scalar meaning (kernels/scalar_ops.h); false
// if `op` is not one or does not take T. Comparisons and logical ops give bool.
template <class T>
bool binary_typed(Op op, const Array& a, const Array& b, const Array& output) {
  const std::string name(ir::name(op));
  return visit_scalar_op<2>(op, [&](auto function) {
    if constexpr (!accepts<decltype(function), T, T>) {
      return false;
    } else if constexpr (std::is_same_v<decltype(function(T{}, T{})), bool>) {
      if (output.dtype != DType::boolean) internal_error(name, "output must be bool");
      broadcast_binary<T, Bool>(name.c_str(), a, b, output, function);
      return true;
    } else {
      if (output.dtype != a.dtype) internal_error(name, "output dtype differs from the operands'");
      broadcast_binary<T, T>(name.c_str(), a, b, output, function);
      return true;
    }
  });
}

// ---- where ------------------------------------------------------------------------------

template <class T>
__global__ void select_flat_kernel(const Bool* __restrict__ condition, const T* __restrict__ a,
                                   const T* __restrict__ b, T* __restrict__ out, std::int64_t count,
                                   bool condition_scalar, bool a_scalar, bool b_scalar, bool packed) {
  constexpr int width = pack_width<T>;
  std::int64_t done = 0;
  if (packed) {
    std::int64_t packs = count / width;
#pragma unroll 4  // several 16-byte loads in flight per thread
    for (std::int64_t p = thread_index(); p < packs; p += thread_count()) {
      Pack<Bool, width> c = load_operand<width>(condition, condition_scalar, p);
      Pack<T, width> x = load_operand<width>(a, a_scalar, p);
      Pack<T, width> y = load_operand<width>(b, b_scalar, p);
      Pack<T, width> z;
#pragma unroll
      for (int j = 0; j < width; ++j) z.value[j] = c.value[j] != 0 ? x.value[j] : y.value[j];
      store_pack<width>(out, p, z);
    }
    done = packs * width;
  }
  for (std::int64_t i = done + thread_index(); i < count; i += thread_count())
    out[i] = condition[condition_scalar ? 0 : i] != 0 ? a[a_scalar ? 0 : i] : b[b_scalar ? 0 : i];
}

template <class Index, class T>
__global__ void select_strided_kernel(const Bool* __restrict__ condition, const T* __restrict__ a,
                                      const T* __restrict__ b, T* __restrict__ out, Index count,
                                      BroadcastPlan<3> plan) {
  for (Index i = static_cast<Index>(thread_index()); i < count; i += static_cast<Index>(thread_count())) {
    Index offsets[3];
    broadcast_offsets(plan, i, offsets);
    out[i] = condition[offsets[0]] != 0 ? a[offsets[1]] : b[offsets[2]];
  }
}

bool broadcasts_to(const Shape& operand, const Shape& output) {
  if (operand.rank() > output.rank()) return false;
  for (int axis = 0; axis < operand.rank(); ++axis) {
    std::int64_t dim = operand[axis];
    if (dim != 1 && dim != output[axis + output.rank() - operand.rank()]) return false;
  }
  return true;
}

void check_operand(const std::string& op, const Array& operand, const Array& output) {
  if (!broadcasts_to(operand.shape, output.shape))
    internal_error(op, "operand " + operand.shape.to_string() + " does not broadcast to " + output.shape.to_string());
}

}  // namespace

void binary(Op op, const Array& a, const Array& b, const Array& output) {
  const std::string name(ir::name(op));
  if (a.dtype != b.dtype) internal_error(name, "operands have different dtypes");
  check_operand(name, a, output);
  check_operand(name, b, output);
  bool done = visit_dtype(a.dtype, [&]<class T>() { return binary_typed<T>(op, a, b, output); });
  if (!done) internal_error(name, "has no kernel for " + std::string(to_string(a.dtype)));
}

void select(const Array& condition, const Array& a, const Array& b, const Array& output) {
  if (condition.dtype != DType::boolean) internal_error("where", "condition must be bool");
  if (a.dtype != b.dtype || a.dtype != output.dtype) internal_error("where", "branches and output differ in dtype");
  check_operand("where", condition, output);
  check_operand("where", a, output);
  check_operand("where", b, output);
  std::int64_t count = output.shape.numel();
  if (count == 0) return;
  auto& context = context_of(output, "where");
  const BroadcastPlan<3> plan = plan_broadcast<3>(output.shape, {&condition.shape, &a.shape, &b.shape});
  visit_dtype(output.dtype, [&]<class T>() {
    const Bool* c_data = condition.data<Bool>();
    const T* a_data = a.data<T>();
    const T* b_data = b.data<T>();
    T* out = output.mutable_data<T>();
    if (plan.flat()) {
      bool c_scalar = plan.scalar(0), a_scalar = plan.scalar(1), b_scalar = plan.scalar(2);
      bool packed = aligned_16(out) && (c_scalar || aligned_16(c_data)) && (a_scalar || aligned_16(a_data)) &&
                    (b_scalar || aligned_16(b_data));
      launch("where", context, packed ? count / pack_width<T> + 1 : count, &select_flat_kernel<T>, c_data, a_data,
             b_data, out, count, c_scalar, a_scalar, b_scalar, packed);
    } else if (fits_32_bits(count)) {
      launch("where", context, count, &select_strided_kernel<std::uint32_t, T>, c_data, a_data, b_data, out,
             static_cast<std::uint32_t>(count), plan);
    } else {
      launch("where", context, count, &select_strided_kernel<std::int64_t, T>, c_data, a_data, b_data, out, count,
             plan);
    }
  });
}

}  // namespace kiln::kernels::cuda
