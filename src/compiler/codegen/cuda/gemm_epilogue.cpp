// Gemm kernels that cuBLASLt computes whole: relu(x @ w + b), x @ w + b and
// relu(x @ w), the dense layers of most models. cuBLASLt applies the bias
// and the relu to each tile of the product before writing it, so the product
// never goes to memory and no kernel is launched after it. Anything more in
// the epilogue (gelu's polynomial, a reduction, a second output) is a
// generated kernel over the product instead.

#include "compiler/codegen/cuda/kernel_writer.h"

#include <algorithm>

namespace kiln::compiler::cuda {
namespace {

using kernels::cuda::GemmEpilogue;

// True for an f32 vector of n values (leading axes of size 1 allowed): a bias
// that broadcasts along the rows of an [m, n] product.
bool is_row_bias(const ir::Type& type, std::int64_t n) {
  if (type.dtype != DType::f32 || type.shape.rank() < 1 || type.shape[type.shape.rank() - 1] != n) return false;
  for (int axis = 0; axis + 1 < type.shape.rank(); ++axis)
    if (type.shape[axis] != 1) return false;
  return true;
}

}  // namespace

bool fit_library_epilogue(const ir::Graph& graph, const FusedKernel& kernel, KernelLaunch& launch) {
  if (kernel.kind != KernelKind::gemm || kernel.outputs.size() != 1 || kernel.members.size() < 2) return false;
  const ir::Node& product = graph.node(kernel.members.front());
  // An f32 product (cuBLASLt's epilogues here are f32's), 2-D or rows with leading axes times a matrix
  // (is_generated_gemm): those rows are one product.
  if (product.type.dtype != DType::f32 || !is_generated_gemm(graph, product, BackendCapabilities{}) ||
      graph.type(product.operands[0]).shape.rank() < 2)
    return false;
  const std::int64_t n = product.type.shape[product.type.shape.rank() - 1];
  ir::ValueId current = kernel.members.front();
  bool bias = false, relu = false;
  int bias_input = -1;
  for (std::size_t i = 1; i < kernel.members.size(); ++i) {
    ir::ValueId member = kernel.members[i];
    const ir::Node& node = graph.node(member);
    if (!(node.type.shape == product.type.shape) || node.type.dtype != DType::f32) return false;
    if (node.op == ir::Op::add && !bias && !relu && node.operands.size() == 2) {
      // product + bias or bias + product (addition is commutative in IEEE arithmetic).
      ir::ValueId other = node.operands[0] == current ? node.operands[1] : node.operands[0];
      if ((node.operands[0] != current && node.operands[1] != current) || other == current) return false;
      auto position = std::find(kernel.inputs.begin(), kernel.inputs.end(), other);
      if (position == kernel.inputs.end() || !is_row_bias(graph.type(other), n)) return false;
      bias_input = static_cast<int>(position - kernel.inputs.begin());
      bias = true;
    } else if (node.op == ir::Op::relu && !relu && node.operands.size() == 1 && node.operands[0] == current) {
      relu = true;
    } else {
      return false;
    }
    current = member;
  }
  if (current != kernel.outputs.front()) return false;
  launch.epilogue = bias && relu ? GemmEpilogue::bias_relu : bias ? GemmEpilogue::bias : GemmEpilogue::relu;
  launch.bias_input = bias_input;
  return true;
}

}  // namespace kiln::compiler::cuda
