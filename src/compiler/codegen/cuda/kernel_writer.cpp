#include "compiler/codegen/cuda/kernel_writer.h"

#include "ir/printer.h"

#include <kiln/error.h>

#include <cctype>

namespace kiln::compiler::cuda {

ReductionInfo reduction_info(const ir::Node& reduction) {
  // Bool (any and all as reduce_max and reduce_min) combines as bytes of 0
  // and 1; lowest<Bool>() and highest<Bool>() are 0 and 1 (prelude.cuh).
  const std::string type = codegen::storage_type(reduction.type.dtype);
  const codegen::ReductionForm form = codegen::reduction_form(reduction.op);
  const std::string combine = "scalar::" + std::string(form.combine_name()) + "{}";
  switch (form.identity) {
    case codegen::Identity::zero:
      return {combine, "splat<" + type + ">(0)"};
    case codegen::Identity::one:
      return {combine, "splat<" + type + ">(1)"};
    case codegen::Identity::lowest:
      return {combine, "lowest<" + type + ">()"};
    case codegen::Identity::highest:
      return {combine, "highest<" + type + ">()"};
  }
  return {combine, ""};
}

std::string literal(const ir::Node& constant) {
  std::string type = codegen::storage_type(constant.type.dtype);
  if (is_floating(constant.type.dtype) && !is_half_precision(constant.type.dtype)) {  // 16 bits: their bits
    double value = constant.attributes.float_value;
    if (value != value) return "not_a_number<" + type + ">()";
    if (value > 1.7976931348623157e308) return "infinity<" + type + ">()";
    if (value < -1.7976931348623157e308) return "-infinity<" + type + ">()";
  }
  return "splat<" + type + ">(" + codegen::literal(constant) + ")";
}

KernelWriter::KernelWriter(KernelEmitter& emitter) : emitter_(emitter) {
  if (kernel().kind == KernelKind::attention) {
    // The row kernel's result, the second product's left operand, over the whole space (the scores' shape).
    const ir::ValueId probabilities = emitter.graph().node(attention_products().second).operands[0];
    outputs_.emplace_back(probabilities, emitter.instance(probabilities, emitter.broadcast_map(kernel().space)));
    return;
  }
  for (ir::ValueId value : emitter.kernel().outputs)
    outputs_.emplace_back(value, emitter.instance(value, emitter.output_map(value)));
}

std::pair<ir::ValueId, ir::ValueId> KernelWriter::attention_products() const {
  std::vector<ir::ValueId> matmuls;  // in graph order: the first product, then the second
  for (ir::ValueId member : kernel().members)
    if (emitter_.graph().node(member).op == ir::Op::matmul) matmuls.push_back(member);
  if (matmuls.size() != 2)
    throw InternalError("matmul", "an attention kernel with " + std::to_string(matmuls.size()) + " matmuls",
                        std::string());
  return {matmuls.front(), matmuls.back()};
}

bool KernelWriter::is_row_output(ir::ValueId value) const { return kernel().stores_per_row(value); }

Linear KernelWriter::output_address(ir::ValueId value) const {
  return emitter_.linear_address(emitter_.graph().type(value).shape, emitter_.output_map(value));
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
    if (item.kind == Instance::Kind::load ||
        (item.kind == Instance::Kind::compute && !item.address.coefficients.empty()))
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

namespace {

// The strides of the mixed-radix index `sizes` (the last varies fastest),
// as "c<t> = index / stride % size" declarations named `prefix`<t>.
std::vector<IndexVariable> mixed_radix(const std::vector<std::int64_t>& sizes, const std::string& index,
                                       const std::string& prefix) {
  std::vector<IndexVariable> variables(sizes.size());
  std::int64_t stride = 1;
  for (std::size_t t = sizes.size(); t-- > 0;) {
    std::string value = index;
    if (stride != 1) value += " / " + std::to_string(stride);
    if (t > 0) value += " % " + std::to_string(sizes[t]);
    variables[t] = {prefix + std::to_string(t), value};
    stride *= sizes[t];
  }
  return variables;
}

bool is_identifier_character(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// True when identifier `name` occurs in `code` outside its // comments.
bool reads(const std::string& code, const std::string& name) {
  std::size_t line_begin = 0;
  while (line_begin < code.size()) {
    std::size_t line_end = code.find('\n', line_begin);
    if (line_end == std::string::npos) line_end = code.size();
    std::size_t comment = code.find("//", line_begin);
    std::size_t end = comment < line_end ? comment : line_end;
    for (std::size_t at = code.find(name, line_begin); at != std::string::npos && at + name.size() <= end;
         at = code.find(name, at + 1)) {
      bool starts = at == 0 || !is_identifier_character(code[at - 1]);
      bool ends = at + name.size() == code.size() || !is_identifier_character(code[at + name.size()]);
      if (starts && ends) return true;
    }
    line_begin = line_end + 1;
  }
  return false;
}

}  // namespace

std::string declarations_used_by(const std::vector<IndexVariable>& variables, const std::string& code,
                                 const std::string& indent) {
  // From the last to the first: a variable's value can read only those
  // before it, so each one's readers are settled when it is reached.
  std::string readers = code;
  std::vector<bool> kept(variables.size(), false);
  for (std::size_t k = variables.size(); k-- > 0;) {
    if (!reads(readers, variables[k].name)) continue;
    kept[k] = true;
    readers += "\n" + variables[k].value;
  }
  std::string text;
  for (std::size_t k = 0; k < variables.size(); ++k)
    if (kept[k])
      text += indent + "const " + variables[k].type + " " + variables[k].name + " = " + variables[k].value + ";\n";
  return text;
}

std::vector<IndexVariable> KernelWriter::row_coordinates(const Layout& layout) const {
  return mixed_radix(layout.outer_sizes, "row", "c");
}

std::vector<IndexVariable> KernelWriter::middle_coordinates(const Layout& layout) const {
  return mixed_radix(layout.middle_sizes, "middle", "d");
}

std::string KernelWriter::offset(const Linear& linear, const Layout& layout, const std::string& inner) const {
  std::string text = emitter_.row_offset(linear, layout) + emitter_.middle_offset(linear, layout);
  std::int64_t step = emitter_.inner_coefficient(linear, layout);
  if (step == 1)
    text += " + " + inner;
  else if (step != 0)
    text += " + " + std::to_string(step) + " * " + inner;
  if (text.starts_with("0 + ")) text = text.substr(4);
  // "1 * c0" reads as "c0".
  for (std::size_t at = text.find(" 1 * "); at != std::string::npos; at = text.find(" 1 * ", at)) text.erase(at + 1, 4);
  if (text.starts_with("1 * ")) text = text.substr(4);
  return text;
}

Linear KernelWriter::product_address() const {
  const Shape& space = kernel().space;
  Linear address{0, std::vector<std::int64_t>(static_cast<std::size_t>(space.rank()), 0)};
  std::int64_t stride = 1;
  for (int axis = space.rank() - 1; axis >= 0; --axis) {
    address.coefficients[static_cast<std::size_t>(axis)] = stride;
    stride *= space[axis];
  }
  return address;
}

std::string KernelWriter::declaration(int id, const Layout& layout, const std::string& inner,
                                      const std::string& indent) const {
  const Instance& item = at(id);
  const ir::Node& node = emitter_.graph().node(item.value);
  std::string value, comment;
  if (item.kind == Instance::Kind::load) {
    value = emitter_.input_name(item.buffer) + "[" + offset(item.address, layout, inner) + "]";
    // A padded input read in place: the padding's constant where the element falls outside the source.
    const std::string condition = emitter_.inside_condition(item, layout, inner);
    if (!condition.empty()) value = condition + " ? " + value + " : " + literal(emitter_.graph().node(item.padding));
  } else if (item.kind == Instance::Kind::tile) {
    const bool attention = kernel().kind == KernelKind::attention;
    if (attention)
      value = score_value_.empty() ? scores_row_ + "[" + inner + "]" : score_value_;
    else
      value = "product[" + offset(product_address(), layout, inner) + "]";
    // A 16-bit product: f32 sums (the scores above, or cuBLAS's: run_matmul in cuda_executable.cpp), rounded once
    // here, as the standard executor's matmul rounds its output.
    if (node.type.dtype == DType::bf16) value = "round_to_bf16(" + value + ")";
    if (node.type.dtype == DType::f16) value = "round_to_f16(" + value + ")";
    comment = indent + emitter_.describe(item.value) +
              (attention ? ", the scores computed above\n" : ", computed by cuBLAS\n");
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
