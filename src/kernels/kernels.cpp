#include "kernels/kernels.h"

#include "kernels/cpu/cpu_kernels.h"

#include <kiln/error.h>

namespace kiln::kernels {
namespace {

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
    case Op::argmax: cpu::argmax(attributes.axis, inputs[0], output); break;
    case Op::matmul: cpu::matmul(attributes.transpose_a, attributes.transpose_b, inputs[0], inputs[1], output); break;
    case Op::transpose: cpu::transpose(attributes.axes, inputs[0], output); break;
    case Op::broadcast_to: cpu::broadcast_to(inputs[0], output); break;
    case Op::slice: cpu::slice(attributes.start, attributes.step, inputs[0], output); break;
    case Op::concat: cpu::concat(attributes.axis, inputs, output); break;
    default:
      if (ir::is_reduction(node.op)) cpu::reduce(node.op, attributes.axes, inputs[0], output);
      else if (ir::is_elementwise(node.op) && inputs.size() == 1) cpu::unary(node.op, inputs[0], output);
      else if (ir::is_elementwise(node.op) && inputs.size() == 2) cpu::binary(node.op, inputs[0], inputs[1], output);
      else throw InternalError(std::string(ir::name(node.op)), "has no CPU kernel", node.location);
  }
  return output;
}

}  // namespace

runtime::Array run(const ir::Node& node, std::span<const runtime::Array> inputs, Device device) {
  if (device.is_cpu()) return run_cpu(node, inputs);
  throw DeviceError(std::string(ir::name(node.op)), "kiln was built without kernels for " + device.to_string(),
                    node.location);
}

}  // namespace kiln::kernels
