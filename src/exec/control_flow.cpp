#include "exec/control_flow.h"

#include "exec/executable.h"
#include "kernels/cpu/gemm_invariant.h"

#include <kiln/error.h>

#if KILN_HAVE_CUDA
#include "runtime/cuda/cuda_context.h"
#endif

#include <algorithm>
#include <cstring>
#include <optional>

namespace kiln::exec {
namespace {

void copy_bytes(void* destination, const void* source, std::size_t bytes, Device device) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    std::memcpy(destination, source, bytes);
    return;
  }
#if KILN_HAVE_CUDA
  runtime::cuda::copy_device_to_device(destination, source, bytes, device);
#else
  throw DeviceError("control flow", "kiln was built without CUDA support", std::string());
#endif
}

std::vector<runtime::Array> run_cond(const ir::Node& node, std::span<const runtime::Array> operands,
                                     const RegionRunner& run_region) {
  // Out of range picks the nearest branch, as JAX's lax.switch clamps.
  const auto last = static_cast<std::int64_t>(node.regions.size()) - 1;
  const std::int64_t branch =
      std::clamp<std::int64_t>(read_scalar(operands[0], std::string(ir::name(node.op)), node.location), 0, last);
  return run_region(static_cast<std::size_t>(branch), operands.subspan(1));
}

std::vector<runtime::Array> run_while(const ir::Node& node, std::span<const runtime::Array> operands,
                                      const RegionRunner& run_region) {
  const auto carried = static_cast<std::size_t>(node.attributes.carry_count);
  std::vector<runtime::Array> inputs(operands.begin(), operands.end());
  while (read_scalar(run_region(0, inputs).at(0), std::string(ir::name(node.op)), node.location) != 0) {
    std::vector<runtime::Array> carries = run_region(1, inputs);
    std::move(carries.begin(), carries.end(), inputs.begin());
  }
  inputs.resize(carried);
  return inputs;
}

// Element `step` of a sequence (its leading axis dropped): a window into it where that keeps the 64-byte alignment
// kernels expect, a copy otherwise.
runtime::Array element(const runtime::Array& sequence, std::int64_t step, Device device) {
  const Shape shape(sequence.shape.dims().subspan(1));
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * size_of(sequence.dtype);
  const std::size_t offset = static_cast<std::size_t>(step) * bytes;
  if (offset % 64 == 0 && bytes > 0)
    return runtime::Array{runtime::Buffer::view(sequence.buffer, offset, bytes), sequence.dtype, shape};
  runtime::Array copy = runtime::allocate_array(sequence.dtype, shape, device);
  copy_bytes(copy.mutable_raw(), static_cast<const char*>(sequence.raw()) + offset, bytes, device);
  return copy;
}

std::vector<runtime::Array> run_scan(const ir::Graph& graph, ir::ValueId value,
                                     std::span<const runtime::Array> operands, Device device,
                                     const RegionRunner& run_region) {
  const ir::Node& node = graph.node(value);
  const auto carried = static_cast<std::size_t>(node.attributes.carry_count);
  const auto sequences = static_cast<std::size_t>(node.attributes.sequence_count);
  const std::int64_t length = node.attributes.length;
  const std::vector<ir::Type> types = ir::result_types(graph, value);
  // The stacked outputs, filled one row per step.
  std::vector<runtime::Array> results(types.size());
  for (std::size_t index = carried; index < types.size(); ++index)
    results[index] = runtime::allocate_array(types[index].dtype, types[index].shape, device);
  std::vector<runtime::Array> inputs(operands.begin(), operands.end());
  for (std::int64_t count = 0; count < length; ++count) {
    const std::int64_t step = node.attributes.reverse ? length - 1 - count : count;
    for (std::size_t sequence = 0; sequence < sequences; ++sequence)
      inputs[carried + sequence] = element(operands[carried + sequence], step, device);
    std::vector<runtime::Array> outputs = run_region(0, inputs);
    for (std::size_t index = carried; index < outputs.size(); ++index) {
      const std::size_t bytes = outputs[index].bytes();
      copy_bytes(static_cast<char*>(results[index].mutable_raw()) + static_cast<std::size_t>(step) * bytes,
                 outputs[index].raw(), bytes, device);
    }
    std::move(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(carried), inputs.begin());
  }
  std::copy(inputs.begin(), inputs.begin() + static_cast<std::ptrdiff_t>(carried), results.begin());
  return results;
}

}  // namespace

std::int64_t read_scalar(const runtime::Array& scalar, const std::string& op, const std::string& location) {
  runtime::Array host = scalar;
#if KILN_HAVE_CUDA
  if (!scalar.device().is_cpu()) host = runtime::cuda::copy_to(scalar, Device::cpu(), op, location);
#endif
  switch (host.dtype) {
    case DType::boolean:
      return *host.data<std::uint8_t>() != 0;
    case DType::i32:
      return *host.data<std::int32_t>();
    case DType::i64:
      return *host.data<std::int64_t>();
    default:
      break;
  }
  throw InternalError(op, "reads a scalar of " + std::string(to_string(host.dtype)), location);
}

std::vector<std::span<const std::byte>> captured_ranges(std::span<const runtime::Array> captures) {
  std::vector<std::span<const std::byte>> ranges;
  for (const runtime::Array& capture : captures)
    ranges.emplace_back(static_cast<const std::byte*>(capture.raw()), capture.bytes());
  return ranges;
}

std::vector<runtime::Array> run_control(const ir::Graph& graph, ir::ValueId value,
                                        std::span<const runtime::Array> operands, Device device,
                                        const RegionRunner& run_region) {
  const ir::Node& node = graph.node(value);
  // A loop's captures stay as they are until it ends: products with them as B pack it once (gemm_invariant.h). A
  // cond runs once and opens none, leaving an enclosing loop's scope in force for its branches.
  std::optional<kernels::cpu::InvariantOperands> invariant;
  if (device.is_cpu() && node.op != ir::Op::cond)
    invariant.emplace(captured_ranges(
        operands.subspan(static_cast<std::size_t>(node.attributes.carry_count + node.attributes.sequence_count))));
  switch (node.op) {
    case ir::Op::cond:
      return run_cond(node, operands, run_region);
    case ir::Op::while_loop:
      return run_while(node, operands, run_region);
    case ir::Op::scan_loop:
      return run_scan(graph, value, operands, device, run_region);
    default:
      break;
  }
  throw InternalError("control flow", std::string(ir::name(node.op)) + " is not a control node", node.location);
}

void store_results(const ir::Graph& graph, ir::ValueId value, std::vector<runtime::Array> results,
                   const std::vector<ir::ValueId>& readers, std::vector<runtime::Array>& values) {
  for (ir::ValueId reader : readers)
    values[static_cast<std::size_t>(reader)] =
        results.at(static_cast<std::size_t>(graph.node(reader).attributes.index));
  values[static_cast<std::size_t>(value)] = std::move(results.at(0));
}

void run_compiled_control(const ir::Graph& graph, ir::ValueId value,
                          const std::vector<std::shared_ptr<const Executable>>& regions,
                          const std::vector<ir::ValueId>& readers, std::vector<runtime::Array>& values,
                          const runtime::Buffer* arena, Device device) {
  std::vector<runtime::Array> operands;
  for (ir::ValueId operand : graph.node(value).operands) operands.push_back(values[static_cast<std::size_t>(operand)]);
  const RegionRunner run_region = [&](std::size_t region, std::span<const runtime::Array> inputs) {
    if (region >= regions.size())
      throw InternalError("control flow", "a control node's region was not compiled", graph.node(value).location);
    return regions[region]->run(inputs);
  };
  store_compiled_results(graph, value, run_control(graph, value, operands, device, run_region), readers, values, arena,
                         device);
}

void store_compiled_results(const ir::Graph& graph, ir::ValueId value, std::vector<runtime::Array> results,
                            const std::vector<ir::ValueId>& readers, std::vector<runtime::Array>& values,
                            const runtime::Buffer* arena, Device device) {
  const auto* begin = arena ? static_cast<const char*>(arena->data()) : nullptr;
  for (runtime::Array& result : results) {
    const auto* data = static_cast<const char*>(result.raw());
    if (!arena || data < begin || data >= begin + arena->bytes()) continue;
    runtime::Array copy = runtime::allocate_array(result.dtype, result.shape, device);
    copy_bytes(copy.mutable_raw(), result.raw(), result.bytes(), device);
    result = std::move(copy);
  }
  store_results(graph, value, std::move(results), readers, values);
}

}  // namespace kiln::exec
