#include "kernels/kernels.h"

#include "ir/type_rules.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_bf16.h"
#include "runtime/float_environment.h"
#if KILN_HAVE_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_context.h"
#endif

#include <kiln/error.h>

#include <optional>
#include <string>
#include <vector>

namespace kiln::kernels {
namespace {

void throw_if_out_of_range(const ir::Node& node, const std::optional<OutOfRangeIndex>& bad, std::int64_t size) {
  if (bad) throw ir::gather_index_error(node, bad->value, bad->position, size);
}

runtime::Array run_cpu(const ir::Node& node, std::span<const runtime::Array> inputs) {
  using ir::Op;
  switch (node.op) {
    case Op::reshape:
    case Op::expand_dims:
    case Op::squeeze:
      // Same elements in the same order: share the buffer.
      return runtime::Array{inputs[0].buffer, node.type.dtype, node.type.shape};
    case Op::nonzero: return cpu::nonzero(inputs[0]);
    case Op::parameter:
    case Op::host_call:
      throw InternalError(std::string(ir::name(node.op)), "has no kernel; the executor handles it", node.location);
    default: break;
  }
  runtime::Array output = runtime::allocate_array(node.type.dtype, node.type.shape, Device::cpu());
  const ir::Attributes& attributes = node.attributes;
  switch (node.op) {
    case Op::constant: cpu::fill(attributes, output); break;
    case Op::iota: cpu::iota(attributes.axis, output); break;
    case Op::cast: cpu::cast(inputs[0], output); break;
    case Op::where: cpu::select(inputs[0], inputs[1], inputs[2], output); break;
    case Op::argmax:
    case Op::argmin: cpu::arg_reduce(node.op, attributes.axis, inputs[0], output); break;
    case Op::cumsum:
    case Op::cumprod:
    case Op::cummax:
    case Op::cummin:
      cpu::scan(node.op, attributes, inputs[0], output);
      break;
    case Op::sort:
    case Op::argsort:
      cpu::sort(node.op, attributes, inputs[0], output);
      break;
    case Op::top_k:
      cpu::top_k(attributes.k, inputs[0], output);
      break;
    case Op::matmul: cpu::matmul(attributes.transpose_a, attributes.transpose_b, inputs[0], inputs[1], output); break;
    case Op::transpose: cpu::transpose(attributes.axes, inputs[0], output); break;
    case Op::broadcast_to: cpu::broadcast_to(inputs[0], output); break;
    case Op::slice: cpu::slice(attributes.start, attributes.step, inputs[0], output); break;
    case Op::concat: cpu::concat(attributes.axis, inputs, output); break;
    case Op::gather:
      throw_if_out_of_range(node, cpu::gather(attributes.axis, inputs[0], inputs[1], output),
                            inputs[0].shape[static_cast<int>(attributes.axis)]);
      break;
    case Op::take_along_axis:
      throw_if_out_of_range(node, cpu::take_along_axis(attributes.axis, inputs[0], inputs[1], output),
                            inputs[0].shape[static_cast<int>(attributes.axis)]);
      break;
    case Op::scatter_add:
      throw_if_out_of_range(node, cpu::scatter_add(attributes.axis, inputs[0], inputs[1], inputs[2], output),
                            inputs[0].shape[static_cast<int>(attributes.axis)]);
      break;
    default:
      if (ir::is_reduction(node.op)) cpu::reduce(node.op, attributes.axes, inputs[0], output);
      else if (ir::is_elementwise(node.op) && inputs.size() == 1) cpu::unary(node.op, inputs[0], output);
      else if (ir::is_elementwise(node.op) && inputs.size() == 2) cpu::binary(node.op, inputs[0], inputs[1], output);
      else throw InternalError(std::string(ir::name(node.op)), "has no CPU kernel", node.location);
  }
  return output;
}

#if KILN_HAVE_CUDA
// kiln-cuda: the same dispatch for a CUDA device (kernels/cuda/cuda_kernels.h).
runtime::Array run_cuda(const ir::Node& node, std::span<const runtime::Array> inputs, Device device) {
  using ir::Op;
  namespace cuda = kernels::cuda;
  // A missing GPU or a bad index reads as such, naming the op and the user's line.
  runtime::cuda::context(device, std::string(ir::name(node.op)), node.location);
  switch (node.op) {
    case Op::reshape:
    case Op::expand_dims:
    case Op::squeeze: return runtime::Array{inputs[0].buffer, node.type.dtype, node.type.shape};
    case Op::nonzero: return cuda::nonzero(inputs[0]);
    case Op::parameter:
    case Op::host_call:
      throw InternalError(std::string(ir::name(node.op)), "has no kernel; the executor handles it", node.location);
    default: break;
  }
  runtime::Array output = runtime::allocate_array(node.type.dtype, node.type.shape, device);
  const ir::Attributes& attributes = node.attributes;
  switch (node.op) {
    case Op::constant: cuda::fill(attributes, output); break;
    case Op::iota: cuda::iota(attributes.axis, output); break;
    case Op::cast: cuda::cast(inputs[0], output); break;
    case Op::where: cuda::select(inputs[0], inputs[1], inputs[2], output); break;
    case Op::argmax:
    case Op::argmin: cuda::arg_reduce(node.op, attributes.axis, inputs[0], output); break;
    case Op::cumsum:
    case Op::cumprod:
    case Op::cummax:
    case Op::cummin:
      cuda::scan(node.op, attributes, inputs[0], output);
      break;
    case Op::sort:
    case Op::argsort:
      cuda::sort(node.op, attributes, inputs[0], output);
      break;
    case Op::top_k:
      cuda::top_k(attributes.k, inputs[0], output);
      break;
    case Op::matmul: cuda::matmul(attributes.transpose_a, attributes.transpose_b, inputs[0], inputs[1], output); break;
    case Op::transpose: cuda::transpose(attributes.axes, inputs[0], output); break;
    case Op::broadcast_to: cuda::broadcast_to(inputs[0], output); break;
    case Op::slice: cuda::slice(attributes.start, attributes.step, inputs[0], output); break;
    case Op::concat: cuda::concat(attributes.axis, inputs, output); break;
    case Op::gather:
      throw_if_out_of_range(node, cuda::gather(attributes.axis, inputs[0], inputs[1], output),
                            inputs[0].shape[static_cast<int>(attributes.axis)]);
      break;
    case Op::take_along_axis:
      throw_if_out_of_range(node, cuda::take_along_axis(attributes.axis, inputs[0], inputs[1], output),
                            inputs[0].shape[static_cast<int>(attributes.axis)]);
      break;
    case Op::scatter_add:
      throw_if_out_of_range(node, cuda::scatter_add(attributes.axis, inputs[0], inputs[1], inputs[2], output),
                            inputs[0].shape[static_cast<int>(attributes.axis)]);
      break;
    default:
      if (ir::is_reduction(node.op)) cuda::reduce(node.op, attributes.axes, inputs[0], output);
      else if (ir::is_elementwise(node.op) && inputs.size() == 1) cuda::unary(node.op, inputs[0], output);
      else if (ir::is_elementwise(node.op) && inputs.size() == 2) cuda::binary(node.op, inputs[0], inputs[1], output);
      else throw InternalError(std::string(ir::name(node.op)), "has no CUDA kernel", node.location);
  }
  return output;
}

// Every input must live on the device the op runs on (the api layer checks
// tensors; this catches arrays handed over by other paths).
void check_inputs_on(const ir::Node& node, std::span<const runtime::Array> inputs, Device device) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].buffer && inputs[i].device() != device)
      throw DeviceError(std::string(ir::name(node.op)),
                        "operand " + std::to_string(i) + " is on " + inputs[i].device().to_string() +
                            " but the op runs on " + device.to_string(),
                        node.location);
}
#endif

}  // namespace

namespace {

bool touches_half_precision(const ir::Node& node, std::span<const runtime::Array> inputs) {
  if (is_half_precision(node.type.dtype)) return true;
  for (const runtime::Array& input : inputs)
    if (is_half_precision(input.dtype)) return true;
  return false;
}

// Whether a matmul of `a` and `b` on `device` multiplies their 16-bit values as they are: bf16 in the CPU's AMX tiles
// or AVX512_BF16 dot products (kernels/cpu/gemm_bf16.h), bf16 or f16 on a GPU's tensor cores (kernels/cuda/matmul.cu).
bool multiplies_half_precision(DType a, DType b, Device device) {
  if (a != b) return false;
  if (device.is_cuda()) return is_half_precision(a);
  return device.is_cpu() && a == DType::bf16 && cpu::has_bf16_products();
}

// `array` cast to `dtype` by the cast kernel.
runtime::Array cast_array(const runtime::Array& array, DType dtype, const ir::Node& node, Device device) {
  ir::Node cast;
  cast.op = ir::Op::cast;
  cast.type = {dtype, array.shape};
  cast.location = node.location;
  const runtime::Array operands[] = {array};
  return run(cast, operands, device);
}

// An op on bf16 or f16 (kiln/dtype.h): run in f32 on the operands' exact f32 values, its result rounded once to
// its dtype, as XLA and PyTorch compute elementwise ops; reductions, scans and matmul so accumulate in f32.
// Constants and iotas are made in f64, so that their values too are rounded once.
runtime::Array run_through_f32(const ir::Node& node, std::span<const runtime::Array> inputs, Device device) {
  if (node.op == ir::Op::matmul && multiplies_half_precision(inputs[0].dtype, inputs[1].dtype, device)) {
    // The 16-bit operands multiplied as they are (AMX tiles, AVX512_BF16, tensor cores), summed in f32 as the
    // widened operands' would be. On the CPU a bf16 product is rounded block by block as gemm_bf16 finishes it.
    if (device.is_cpu() && node.type.dtype == DType::bf16) {
      runtime::Array product = runtime::allocate_array(DType::bf16, node.type.shape, device);
      cpu::matmul(node.attributes.transpose_a, node.attributes.transpose_b, inputs[0], inputs[1], product);
      return product;
    }
    runtime::Array product = runtime::allocate_array(DType::f32, node.type.shape, device);
#if KILN_HAVE_CUDA
    if (device.is_cuda())
      cuda::matmul(node.attributes.transpose_a, node.attributes.transpose_b, inputs[0], inputs[1], product);
    else
#endif
      cpu::matmul(node.attributes.transpose_a, node.attributes.transpose_b, inputs[0], inputs[1], product);
    return is_half_precision(node.type.dtype) ? cast_array(product, node.type.dtype, node, device) : product;
  }
  std::vector<runtime::Array> widened;
  widened.reserve(inputs.size());
  for (const runtime::Array& input : inputs)
    widened.push_back(is_half_precision(input.dtype) ? cast_array(input, DType::f32, node, device) : input);
  ir::Node wide = node;
  if (is_half_precision(node.type.dtype))
    wide.type.dtype = node.op == ir::Op::constant || node.op == ir::Op::iota ? DType::f64 : DType::f32;
  runtime::Array result = run(wide, widened, device);
  return is_half_precision(node.type.dtype) ? cast_array(result, node.type.dtype, node, device) : result;
}

}  // namespace

runtime::Array run(const ir::Node& node, std::span<const runtime::Array> inputs, Device device) {
  if (node.op != ir::Op::cast && touches_half_precision(node, inputs)) return run_through_f32(node, inputs, device);
#if KILN_HAVE_CUDA
  check_inputs_on(node, inputs, device);
  if (device.is_cuda()) return run_cuda(node, inputs, device);
#endif
  if (device.is_cpu()) {
    const runtime::ScopedFloatControl environment(runtime::computing_control());
    return run_cpu(node, inputs);
  }
  throw DeviceError(std::string(ir::name(node.op)), "kiln was built without kernels for " + device.to_string(),
                    node.location);
}

}  // namespace kiln::kernels
