#include "compiler/codegen/cuda/kernel_writer.h"

#include "ir/printer.h"

#include <kiln/error.h>

namespace kiln::compiler::cuda {

ReductionInfo reduction_info(const ir::Node& reduction) {
  // Bool (any and all as reduce_max and reduce_min) combines as bytes of 0
  // and 1; lowest<Bool>() and highest<Bool>() are 0 and 1 (prelude.cuh).
  std::string type = cpu::storage_type(reduction.type.dtype);
  switch (reduction.op) {
    case ir::Op::reduce_sum:
    case ir::Op::reduce_mean: return {"ops::Add{}", "splat<" + type + ">(0)"};
    case ir::Op::reduce_prod: return {"ops::Multiply{}", "splat<" + type + ">(1)"};
    case ir::Op::reduce_max: return {"ops::Maximum{}", "lowest<" + type + ">()"};
    case ir::Op::reduce_min: return {"ops::Minimum{}", "highest<" + type + ">()"};
    default:
      throw CompileError(std::string(ir::name(reduction.op)), "has no generated CUDA reduction", reduction.location);
  }
}

std::string literal(const ir::Node& constant) {
  std::string type = cpu::storage_type(constant.type.dtype);
  if (is_floating(constant.type.dtype)) {
    double value = constant.attributes.float_value;
    if (value != value) return "not_a_number<" + type + ">()";
    if (value > 1.7976931348623157e308) return "infinity<" + type + ">()";
    if (value < -1.7976931348623157e308) return "-infinity<" + type + ">()";
  }
  return "splat<" + type + ">(" + cpu::literal(constant) + ")";
}

KernelWriter::KernelWriter(KernelEmitter& emitter) : emitter_(emitter) {
  const ir::Graph& graph = emitter.graph();
  const FusedKernel& kernel = emitter.kernel();
  const Shape& space = kernel.space;
  int split = space.rank() - kernel.reduced_axes;
  for (ir::ValueId value : kernel.outputs) {
    const Shape& shape = graph.type(value).shape;
    bool element = shape == space;
    std::vector<std::int64_t> kept(space.dims().begin(), space.dims().begin() + split);
    std::vector<std::int64_t> dims(shape.dims().begin(), shape.dims().end());
    while (dims.size() > kept.size() && dims.back() == 1) dims.pop_back();
    bool row = kernel.kind == KernelKind::reduction && dims == kept;
    // The one row's result returned in any shape of one element (a reshape
    // of a single-row reduction to a scalar): element 0, whatever the shape.
    std::int64_t rows = 1;
    for (std::int64_t dim : kept) rows *= dim;
    if (kernel.kind == KernelKind::reduction && rows == 1 && shape.numel() == 1) row = true;
    if (kernel.kind == KernelKind::gemm) row = ir::is_reduction(graph.node(value).op) && shape.numel() == 1;
    if (!element && !row)
      throw CompileError(std::string(ir::name(graph.node(value).op)),
                         "output " + graph.type(value).to_string() + " does not match the kernel's space " +
                             space.to_string(),
                         graph.node(value).location);
    outputs_.emplace_back(value, emitter.instance(value, emitter.broadcast_map(shape)));
  }
}

bool KernelWriter::is_row_output(ir::ValueId value, int id) const {
  return at(id).kind == Instance::Kind::reduction || !(emitter_.graph().type(value).shape == kernel().space);
}

Linear KernelWriter::output_address(ir::ValueId value) const {
  const Shape& shape = emitter_.graph().type(value).shape;
  bool per_row = !(shape == kernel().space);
  return emitter_.linear_address(shape, per_row ? emitter_.row_map(shape) : emitter_.broadcast_map(shape));
}

std::string KernelWriter::parameters() const {
  std::string text;
  auto add = [&](const std::string& parameter) { text += (text.empty() ? "" : ", ") + parameter; };
  for (std::size_t i = 0; i < kernel().inputs.size(); ++i)
    add("const " + emitter_.storage_type(kernel().inputs[i]) + "* __restrict__ " +
        emitter_.input_name(static_cast<int>(i)));
  for (ir::ValueId value : kernel().outputs)
    add(emitter_.storage_type(value) + "* __restrict__ " + emitter_.output_name(value));
  if (kernel().kind == KernelKind::gemm) add("const float* __restrict__ product");
  return text;
}

int KernelWriter::parameter_count() const {
  return static_cast<int>(kernel().inputs.size() + kernel().outputs.size()) +
         (kernel().kind == KernelKind::gemm ? 1 : 0);
}

void KernelWriter::mark_varying(const Layout& layout) {
  varying_.assign(static_cast<std::size_t>(emitter_.instance_count()), false);
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    const Instance& item = at(id);
    bool varies = item.kind == Instance::Kind::tile;
    if (item.kind == Instance::Kind::load || (item.kind == Instance::Kind::compute && !item.address.coefficients.empty()))
      varies = emitter_.inner_coefficient(item.address, layout) != 0 || emitter_.varies_in_middle(item.address, layout);
    if (item.kind == Instance::Kind::compute)
      for (int operand : item.operands) varies = varies || varying(operand);
    varying_[static_cast<std::size_t>(id)] = varies;
  }
}

void KernelWriter::collect_elements(int root, std::set<int>& needed) const {
  if (!varying(root) || needed.count(root)) return;
  needed.insert(root);
  for (int operand : at(root).operands) collect_elements(operand, needed);
}

std::string KernelWriter::row_coordinates(const Layout& layout, const std::string& indent) const {
  std::size_t axes = layout.outer_sizes.size();
  if (axes == 0) return "";
  if (axes == 1) return indent + "const int64_t c0 = row;\n";
  std::string text = indent + "int64_t rest = row;\n";
  for (std::size_t t = axes; t-- > 1;) {
    std::string size = std::to_string(layout.outer_sizes[t]);
    text += indent + "const int64_t c" + std::to_string(t) + " = rest % " + size + ";\n" + indent + "rest /= " + size + ";\n";
  }
  return text + indent + "const int64_t c0 = rest;\n";
}

std::string KernelWriter::middle_coordinates(const Layout& layout, const std::string& indent) const {
  std::size_t axes = layout.middle_sizes.size();
  if (axes == 0) return "";
  if (axes == 1) return indent + "const int64_t d0 = middle;\n";
  std::string text = indent + "int64_t middle_rest = middle;\n";
  for (std::size_t t = axes; t-- > 1;) {
    std::string size = std::to_string(layout.middle_sizes[t]);
    text += indent + "const int64_t d" + std::to_string(t) + " = middle_rest % " + size + ";\n" + indent +
            "middle_rest /= " + size + ";\n";
  }
  return text + indent + "const int64_t d0 = middle_rest;\n";
}

std::string KernelWriter::offset(const Linear& linear, const Layout& layout, const std::string& inner) const {
  std::string text = emitter_.row_offset(linear, layout) + emitter_.middle_offset(linear, layout);
  std::int64_t step = emitter_.inner_coefficient(linear, layout);
  if (step == 1) text += " + " + inner;
  else if (step != 0) text += " + " + std::to_string(step) + " * " + inner;
  if (text.starts_with("0 + ")) text = text.substr(4);
  // "1 * c0" reads as "c0".
  for (std::size_t at = text.find(" 1 * "); at != std::string::npos; at = text.find(" 1 * ", at)) text.erase(at + 1, 4);
  if (text.starts_with("1 * ")) text = text.substr(4);
  return text;
}

std::string KernelWriter::declaration(int id, const Layout& layout, const std::string& inner,
                                      const std::string& indent) const {
  const Instance& item = at(id);
  const ir::Node& node = emitter_.graph().node(item.value);
  std::string value, comment;
  if (item.kind == Instance::Kind::load) {
    value = emitter_.input_name(item.buffer) + "[" + offset(item.address, layout, inner) + "]";
  } else if (item.kind == Instance::Kind::tile) {
    Linear position{0, {layout.inner_size, 1}};
    value = "product[" + offset(position, layout, inner) + "]";
    comment = indent + emitter_.describe(item.value) + ", computed by cuBLAS\n";
  } else if (node.op == ir::Op::iota) {
    value = "static_cast<" + type(id) + ">(" + offset(item.address, layout, inner) + ")";
  } else if (node.op == ir::Op::constant) {
    value = literal(node);
  } else {
    comment = indent + emitter_.describe(item.value) + "\n";
    value = emitter_.expression(id);
  }
  return comment + indent + "const " + type(id) + " " + item.name + " = " + value + ";\n";
}

}  // namespace kiln::compiler::cuda
