#include "compiler/fusion.h"

#include "compiler/codegen/cuda/row_threads.h"
#include "compiler/fusion_scheduler.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm_bf16.h"

#include <algorithm>
#include <cmath>

namespace kiln::compiler {

bool same_constant_value(const ir::Node& a, const ir::Node& b) {
  const double x = a.attributes.float_value, y = b.attributes.float_value;
  const bool same_float = std::isnan(x) ? std::isnan(y) : x == y && std::signbit(x) == std::signbit(y);
  return a.type.dtype == b.type.dtype && same_float && a.attributes.int_value == b.attributes.int_value;
}

std::optional<Padding> padding_of(const ir::Graph& graph, ir::ValueId value) {
  const ir::Node& node = graph.node(value);
  if (node.op != ir::Op::concat) return std::nullopt;
  Padding padding;
  padding.axis = static_cast<int>(node.attributes.axis);
  for (ir::ValueId operand : node.operands) {
    const ir::Node& each = graph.node(operand);
    if (each.op != ir::Op::constant) {
      if (padding.inner >= 0) return std::nullopt;
      padding.inner = operand;
      continue;
    }
    if (padding.constant < 0) padding.constant = operand;
    if (!same_constant_value(graph.node(padding.constant), each)) return std::nullopt;
    if (padding.inner < 0) padding.before += each.type.shape[padding.axis];
  }
  if (padding.inner < 0 || padding.constant < 0) return std::nullopt;
  return padding;
}

bool is_reshape(ir::Op op) { return op == ir::Op::reshape || op == ir::Op::expand_dims || op == ir::Op::squeeze; }

bool is_unit_reshape(const ir::Graph& graph, const ir::Node& node) {
  if (!is_reshape(node.op)) return false;
  auto without_ones = [](const Shape& shape) {
    std::vector<std::int64_t> dims;
    for (std::int64_t dim : shape.dims())
      if (dim != 1) dims.push_back(dim);
    return dims;
  };
  return without_ones(node.type.shape) == without_ones(graph.type(node.operands[0]).shape);
}

int trailing_reduced_axes(const ir::Graph& graph, const ir::Node& node) {
  int rank = graph.type(node.operands[0]).shape.rank();
  const auto& axes = node.attributes.axes;
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int>(axes.size()) + static_cast<int>(i)) return -1;
  return static_cast<int>(axes.size());
}

bool is_generated_gemm(const ir::Graph& graph, const ir::Node& matmul, const BackendCapabilities& capabilities) {
  if (matmul.op != ir::Op::matmul || !capabilities.multiplies(matmul.type.dtype)) return false;
  const int left = graph.type(matmul.operands[0]).shape.rank(), right = graph.type(matmul.operands[1]).shape.rank();
  return right == 2 && (left == 2 || (left > 2 && !matmul.attributes.transpose_a));
}

bool is_cheap(const ir::Graph& graph, ir::ValueId value) {
  const ir::Node& node = graph.node(value);
  switch (node.op) {
    case ir::Op::constant:
    case ir::Op::iota:
      return true;
    case ir::Op::broadcast_to:
    case ir::Op::transpose:
    case ir::Op::slice: {
      const ir::Node& operand = graph.node(node.operands[0]);
      return operand.op == ir::Op::parameter || is_cheap(graph, node.operands[0]);
    }
    case ir::Op::concat: {
      // A padding of such a value: a masked read wherever it is used. A depthwise convolution's windows, read by
      // its forward sum and by its filter gradient's reductions, were written nine times over instead.
      const std::optional<Padding> padding = padding_of(graph, value);
      return padding && (graph.node(padding->inner).op == ir::Op::parameter || is_cheap(graph, padding->inner));
    }
    case ir::Op::reshape:
    case ir::Op::expand_dims:
    case ir::Op::squeeze: {
      // Any reshape of memory is a view; through a computed index map only
      // size-1 axes can be added or removed.
      const ir::Node& operand = graph.node(node.operands[0]);
      return operand.op == ir::Op::parameter || (is_unit_reshape(graph, node) && is_cheap(graph, node.operands[0]));
    }
    default:
      return false;
  }
}

bool is_loop_fusible(ir::Op op) {
  switch (op) {
    case ir::Op::broadcast_to:
    case ir::Op::transpose:
    case ir::Op::slice:
    case ir::Op::reshape:
    case ir::Op::expand_dims:
    case ir::Op::squeeze:
    case ir::Op::iota:
    case ir::Op::constant:
      return true;
    default:
      return ir::is_elementwise(op);
  }
}

std::optional<ReductionNest> reduction_nest(const ir::Graph& graph, const ir::Node& node,
                                            const BackendCapabilities& capabilities) {
  if (!ir::is_reduction(node.op) || ir::is_arg_reduction(node.op)) return std::nullopt;
  const ir::Type& input = graph.type(node.operands[0]);
  const int rank = input.shape.rank();
  const std::vector<std::int64_t>& axes = node.attributes.axes;
  for (std::size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1) return std::nullopt;
  const int begin = axes.empty() ? rank : static_cast<int>(axes.front());
  const int end = axes.empty() ? rank : static_cast<int>(axes.back()) + 1;
  if (end == rank) return ReductionNest{KernelKind::reduction, {input.shape, begin, end}};
  // A column kernel keeps one axis innermost and accumulates in the input's dtype.
  if (end == rank - 1 && capabilities.column_kernels && input.dtype == node.type.dtype)
    return ReductionNest{KernelKind::column, {input.shape, begin, end}};
  return std::nullopt;
}

BackendCapabilities capabilities(Device device) {
  if (!device.is_cpu()) {
    // CUDA: an attention kernel keeps each of its block's rows of scores in shared memory (codegen/cuda/
    // row_threads.h), of f32 or bf16 products (the flash-style variant of a softmax's multiplies bf16 on the tensor
    // cores: flash_attention_kernel.cpp), a reduction over leading axes is the standard kernel after its producers'
    // loop kernel, cuBLAS reads a GEMM's operands from memory, and a concat copies its operands (so an op sunk into
    // them would add kernels). Transposes stay index maps (not measured on a GPU).
    return {.attention = AttentionMemory{.name = "shared memory per block",
                                         .bytes = [](std::int64_t n, std::int64_t,
                                                     std::int64_t) { return cuda::attention_shared_bytes(n); },
                                         .limit_bytes = cuda::attention_shared_limit_bytes,
                                         .bf16 = true},
            .bf16_products = true,
            .f16_products = true};
  }
  // On the CPU, transposes from 64 KiB: at 2048^2 floats a loop kernel's transpose took 11x the standard
  // kernel's time (12.3 against 1.1 ms), 2-12x from 128^2 to 4096^2 (a lane per cache line; at power-of-two
  // strides the lines of a vector share a cache set), and at 100^2 (40 KiB) it was faster (2.1 against 3.1 us;
  // Zen 4, 2026-12-01). An attention kernel's scratch per thread (packed operands and two strips of score rows,
  // kernels/cpu/attention.h) up to 16 MiB: about 27k keys with a head size of 64.
  return {.strided_transpose_bytes = std::int64_t{64} << 10,
          .column_kernels = true,
          .attention = AttentionMemory{.name = "scratch per thread",
                                       .bytes = kernels::cpu::attention_scratch_bytes,
                                       .limit_bytes = std::int64_t{16} << 20,
                                       .writes_probabilities = true,
                                       .bf16 = kernels::cpu::has_amx_bf16()},
          .gathered_gemm_operands = true,
          .epilogues_as_loops = true,
          .concats_in_place = true,
          .concat_pieces = true,
          .gathers_in_kernels = true,
          .bf16_products = kernels::cpu::has_bf16_products()};
}

FusionPlan fuse(const ir::Graph& graph, const BackendCapabilities& capabilities) {
  return Scheduler(graph, capabilities).run();
}

}  // namespace kiln::compiler
