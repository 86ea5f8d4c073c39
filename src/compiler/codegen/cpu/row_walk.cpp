// The walk over rows of loop and reduction kernels: per-row values, vector loops over the inner axis, one
// pass per reduction and the element pass, and the stores of element and row outputs.

#include "compiler/codegen/cpu/row_kernel.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace kiln::compiler::cpu {

std::string RowKernel::digits(const std::vector<std::int64_t>& sizes, const std::string& variable,
                              const std::string& prefix, const std::string& indent) {
  if (sizes.empty()) return "";
  if (sizes.size() == 1) return indent + "const int64_t " + prefix + "0 = " + variable + ";\n";
  std::string text = indent + "int64_t rest = " + variable + ";\n";
  for (std::size_t t = sizes.size(); t-- > 1;) {
    const std::string size = std::to_string(sizes[t]);
    text += indent + "const int64_t " + prefix + std::to_string(t) + " = rest % " + size + ";\n" + indent +
            "rest /= " + size + ";\n";
  }
  return text + indent + "const int64_t " + prefix + "0 = rest;\n";
}

std::string RowKernel::row_setup_pointers() const {
  std::string text;
  padding_rows_.clear();  // declared anew in each items function
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    const Instance& item = at(id);
    if (item.kind != Instance::Kind::load && item.kind != Instance::Kind::gather) continue;
    const std::string type = emitter_.storage_type(kernel_.inputs[static_cast<std::size_t>(item.buffer)]);
    if (reads_strip(id)) {
      text += "    const " + type + "* " + pointer(item) + " = " + strip_name(item) + " + (row - first_row) * " +
              std::to_string(strip_columns()) + " - column_begin;\n";
      continue;
    }
    if (!item.bounds.empty()) {
      text += padded_row_setup(item);
      continue;
    }
    text += "    const " + type + "* " + pointer(item) + " = state." + emitter_.input_name(item.buffer) + " + (" +
            emitter_.row_offset(item.address, layout_) + ");\n";
  }
  for (const auto& [value, id] : outputs_) {
    // The product itself is written by sgemm (gemm_writes_product); a shape op of it that moves nothing (a
    // reversed slice of a size-1 axis) is stored by the epilogue.
    const ir::Node& node = emitter_.graph().node(value);
    const bool product = at(id).kind == Instance::Kind::tile && node.op == ir::Op::matmul && gemm_writes_product(node);
    const bool gemm_or_column = kernel_.kind == KernelKind::gemm || kernel_.kind == KernelKind::column;
    if (product || (gemm_or_column && at(id).kind == Instance::Kind::reduction)) continue;
    if (kernel_.kind == KernelKind::attention) {  // the driver's strip of P (see emit_attention)
      const std::string type = emitter_.storage_type(value);
      text += "    " + type + "* row_" + emitter_.output_name(value) + " = static_cast<" + type +
              "*>(probabilities) + (row - row_begin) * ld;\n";
      continue;
    }
    Linear address = output_address(value);
    text += "    " + emitter_.storage_type(value) + "* row_" + emitter_.output_name(value) + " = state." +
            emitter_.output_name(value) + " + (" + emitter_.row_offset(address, layout_) + ");\n";
  }
  return text;
}

std::string RowKernel::row_values(int phase, bool shared_only) const {
  std::string text;
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    const Instance& item = at(id);
    if (varying(id) || item.kind == Instance::Kind::reduction || ready_phase(id) != phase) continue;
    if (shared_only && depends_on_row(id)) continue;
    text += "    " + emitter_.describe(item.value) + "\n";
    text += "    const " + vector_type(emitter_, item.value) + " " + item.name + " = " + row_value(id) + ";\n";
    text += reciprocal(id);
  }
  return text;
}

bool RowKernel::exponent_is_nonpositive(int id) const {
  const Instance& item = at(id);
  const ir::Graph& graph = emitter_.graph();
  if (item.kind != Instance::Kind::compute || graph.node(item.value).op != ir::Op::exp ||
      graph.type(item.value).dtype != DType::f32)
    return false;
  // x - m <= 0 rounds to <= 0 wherever m >= x, which a maximum of x over some axes, kept and broadcast back along
  // them, is at every element of x; NaN where either is NaN (an infinite maximum of an infinite x too). Ops on
  // bf16 or f16 round each result (widen_half_precision: a cast to the 16-bit type and back), which keeps a
  // difference <= 0; a maximum of values widened from that type is one of them, so its rounding is exact.
  auto rounded_from = [&](ir::ValueId value) {  // the f32 value that `value` rounds to 16 bits and back, or -1
    const ir::Node& widened = graph.node(value);
    if (widened.op != ir::Op::cast || !is_half_precision(graph.type(widened.operands[0]).dtype)) return ir::ValueId{-1};
    const ir::Node& narrowed = graph.node(widened.operands[0]);
    return narrowed.op == ir::Op::cast && graph.type(narrowed.operands[0]).dtype == DType::f32 ? narrowed.operands[0]
                                                                                               : ir::ValueId{-1};
  };
  ir::ValueId argument = graph.node(item.value).operands[0];
  if (const ir::ValueId unrounded = rounded_from(argument); unrounded >= 0) argument = unrounded;
  const ir::Node& difference = graph.node(argument);
  if (difference.op != ir::Op::sub) return false;
  ir::ValueId subtracted = difference.operands[1];
  if (const ir::ValueId unrounded = rounded_from(subtracted); unrounded >= 0) {
    const ir::Node& maximum = graph.node(unrounded);
    if (maximum.op != ir::Op::reduce_max) return false;
    const ir::Node& source = graph.node(maximum.operands[0]);
    const DType rounded_to = graph.type(graph.node(subtracted).operands[0]).dtype;
    if (source.op != ir::Op::cast || graph.type(source.operands[0]).dtype != rounded_to) return false;
    subtracted = unrounded;
  }
  const ir::Node& maximum = graph.node(subtracted);
  return maximum.op == ir::Op::reduce_max && maximum.attributes.keepdims &&
         maximum.operands[0] == difference.operands[0];
}

bool RowKernel::maximum_may_skip_nan(int id) const {
  const ir::Graph& graph = emitter_.graph();
  const ir::ValueId maximum = at(id).value;
  const ir::Node& node = graph.node(maximum);
  if (node.op != ir::Op::reduce_max || node.type.dtype != DType::f32) return false;
  const ir::ValueId x = node.operands[0];
  // Each value's readers, and whether it is returned: a returned or otherwise read maximum keeps its NaN.
  std::vector<std::vector<ir::ValueId>> readers(static_cast<std::size_t>(graph.size()));
  for (ir::ValueId value = 0; value < graph.size(); ++value)
    for (ir::ValueId operand : graph.node(value).operands) readers[static_cast<std::size_t>(operand)].push_back(value);
  for (ir::ValueId output : graph.outputs) readers[static_cast<std::size_t>(output)].push_back(-1);
  auto readers_of = [&](ir::ValueId value) -> const std::vector<ir::ValueId>& {
    return readers[static_cast<std::size_t>(value)];
  };
  auto op_of = [&](ir::ValueId value) { return value < 0 ? ir::Op::result : graph.node(value).op; };
  auto is_view = [&](ir::ValueId value) {
    const ir::Op op = op_of(value);
    return op == ir::Op::reshape || op == ir::Op::expand_dims || op == ir::Op::squeeze || op == ir::Op::broadcast_to;
  };
  // What `value` is a view of (through any number of views), or `value` itself.
  auto unviewed = [&](ir::ValueId value) {
    while (is_view(value)) value = graph.node(value).operands[0];
    return value;
  };
  // The readers of `value` through views (a returned view reads as -1).
  std::function<void(ir::ValueId, std::vector<ir::ValueId>&)> through_views = [&](ir::ValueId value,
                                                                                  std::vector<ir::ValueId>& found) {
    for (ir::ValueId reader : readers_of(value))
      if (is_view(reader))
        through_views(reader, found);
      else
        found.push_back(reader);
  };
  auto is_sum_of = [&](ir::ValueId value, ir::ValueId exponential) {
    const ir::Node& sum = graph.node(value);
    return sum.op == ir::Op::reduce_sum && sum.operands[0] == exponential &&
           sum.attributes.axes == node.attributes.axes;
  };
  // x - maximum, read only by exp(x - maximum) and by (x - maximum) - log(sum of such exp): log_softmax; each exp
  // read only by its sum along the same axes and by exp / sum: softmax. A NaN in x makes that sum NaN, and so every
  // such output, whatever the maximum is.
  std::vector<ir::ValueId> differences, exponentials;
  through_views(maximum, differences);
  bool summed = false;
  for (ir::ValueId difference : differences) {
    if (op_of(difference) != ir::Op::sub || graph.node(difference).operands[0] != x ||
        unviewed(graph.node(difference).operands[1]) != maximum)
      return false;
    for (ir::ValueId reader : readers_of(difference)) {
      if (op_of(reader) == ir::Op::exp) {
        exponentials.push_back(reader);
        continue;
      }
      if (op_of(reader) != ir::Op::sub || graph.node(reader).operands[0] != difference) return false;
      const ir::ValueId logarithm = unviewed(graph.node(reader).operands[1]);
      if (op_of(logarithm) != ir::Op::log) return false;
      const ir::ValueId sum = unviewed(graph.node(logarithm).operands[0]);
      if (op_of(sum) != ir::Op::reduce_sum) return false;
      const ir::ValueId exponential = graph.node(sum).operands[0];
      if (op_of(exponential) != ir::Op::exp || graph.node(exponential).operands[0] != difference ||
          !is_sum_of(sum, exponential))
        return false;
    }
  }
  for (ir::ValueId exponential : exponentials)
    for (ir::ValueId reader : readers_of(exponential)) {
      if (reader >= 0 && is_sum_of(reader, exponential)) {
        summed = true;
        continue;
      }
      if (op_of(reader) != ir::Op::div || graph.node(reader).operands[0] != exponential) return false;
      if (!is_sum_of(unviewed(graph.node(reader).operands[1]), exponential)) return false;
    }
  return summed;
}

bool RowKernel::divides_by_reciprocal(int id) const {
  const Instance& item = at(id);
  if (kernel_.kind == KernelKind::column)  // a divisor per column, its reciprocal kept beside it (column_passes.cpp)
    return item.kind == Instance::Kind::compute && emitter_.graph().node(item.value).op == ir::Op::div &&
           is_floating(emitter_.graph().type(item.value).dtype) && varies_across_rows(id) &&
           is_per_column(item.operands[1]);
  if (item.kind != Instance::Kind::compute || emitter_.graph().node(item.value).op != ir::Op::div ||
      !is_floating(emitter_.graph().type(item.value).dtype))
    return false;
  const int divisor = item.operands[1];
  return varying(id) && !varying(divisor) && ready_phase(divisor) > 0;
}

std::string RowKernel::reciprocal(int id) const {
  for (int user = 0; user < emitter_.instance_count(); ++user)
    if (divides_by_reciprocal(user) && at(user).operands[1] == id) {
      const std::string type = emitter_.storage_type(at(id).value);
      const std::string& name = at(id).name;
      return "    const " + vector_type(emitter_, at(id).value) + " reciprocal_" + name + " = div(splat<" + type +
             ">(1), " + name + ");\n    const bool use_reciprocal_" + name + " = " +
             (across_lanes_ ? "has_normal_reciprocals(" + name + ", group_rows)"
                            : "has_normal_reciprocal(first_lane(" + name + "))") +
             ";\n";
    }
  return "";
}

std::string RowKernel::divide_by_row_value(const Instance& division) const {
  const std::string& divisor = at(division.operands[1]).name;
  return "divide_by_row_value(" + at(division.operands[0]).name + ", " + divisor + ", reciprocal_" + divisor +
         ", use_reciprocal_" + divisor + ")";
}

std::string RowKernel::row_value(int id) const {
  const Instance& item = at(id);
  const ir::Node& node = emitter_.graph().node(item.value);
  std::string type = emitter_.storage_type(item.value);
  if (item.kind == Instance::Kind::gather) return pick(item, pointer(item), "");
  if (item.kind == Instance::Kind::load) {
    if (across_lanes_) return read_across_lanes(type, pointer(item), row_stride(item.address));
    const std::string loaded = "splat<" + type + ">(" + pointer(item) + "[0])";
    return item.bounds.empty() ? loaded : padded_value(item, loaded, pointer(item));
  }
  if (node.op == ir::Op::iota) {
    if (across_lanes_)
      return "lane_index<" + type + ">(" + emitter_.row_offset(item.address, layout_) + ", " +
             std::to_string(row_stride(item.address)) + ")";
    return "splat<" + type + ">(static_cast<" + type + ">(" + emitter_.row_offset(item.address, layout_) + "))";
  }
  return computed(id);
}

std::string RowKernel::computed(int id) const {
  const Instance& item = at(id);
  const ir::Graph& graph = emitter_.graph();
  const ir::Node& node = graph.node(item.value);
  if ((node.op != ir::Op::maximum && node.op != ir::Op::minimum) || node.type.dtype != DType::f32)
    return emitter_.expression(id);
  auto number = [&](int operand) {
    const ir::Node& constant = graph.node(at(operand).value);
    const float value = static_cast<float>(constant.attributes.float_value);
    return at(operand).kind == Instance::Kind::compute && constant.op == ir::Op::constant && !std::isnan(value) &&
           value != 0;
  };
  const int first = item.operands[0], second = item.operands[1];
  const std::string function = node.op == ir::Op::maximum ? "maximum_of_number(" : "minimum_of_number(";
  if (number(first)) return function + at(first).name + ", " + at(second).name + ")";
  if (number(second)) return function + at(second).name + ", " + at(first).name + ")";
  return emitter_.expression(id);
}

std::string RowKernel::element_values(const std::set<int>& needed, int phase, bool filling_hoisted) const {
  std::string text;
  for (int id : needed) {
    const Instance& item = at(id);
    std::string type = emitter_.storage_type(item.value);
    std::string value;
    const bool hoisted = hoisted_.count(id) > 0;
    if (hoisted && !filling_hoisted) {
      value = "load<" + type + ">(hoisted_" + item.name + " + j, count)";
    } else if (cached_.count(id) && first_write_[static_cast<std::size_t>(id)] < phase) {
      value = "load<" + type + ">(cache_" + item.name + cache_offset() + (across_lanes_ ? "" : ", count") + ")";
    } else if (across_lanes_ && item.kind == Instance::Kind::load) {
      value = read_across_lanes(type, pointer(item) + element_offset(item.address), row_stride(item.address));
    } else if (across_lanes_ && emitter_.graph().node(item.value).op == ir::Op::iota) {
      value = "lane_index<" + type + ">(" + emitter_.row_offset(item.address, layout_) + element_offset(item.address) +
              ", " + std::to_string(row_stride(item.address)) + ")";
    } else if (item.kind == Instance::Kind::tile) {
      value = "load<float>(row_tile + j, count)";
      // A bf16 product: its f32 sums rounded once, as the standard executor rounds its matmul.
      if (emitter_.graph().type(item.value).dtype == DType::bf16) value = "round_to_bf16(" + value + ")";
    } else if (item.kind == Instance::Kind::gather) {
      value = pick(item, pointer(item) + emitter_.middle_offset(item.address, layout_), "j");
    } else if (item.kind == Instance::Kind::load) {
      std::int64_t step = reads_strip(id) ? 1 : emitter_.inner_coefficient(item.address, layout_);
      std::string base = pointer(item) + emitter_.middle_offset(item.address, layout_);
      if (!item.bounds.empty()) base = padded_base(item, base);
      value = step == 0   ? "splat<" + type + ">((" + base + ")[0])"
              : step == 1 ? "load<" + type + ">(" + base + " + j, count)"
                          : "gather<" + type + ">(" + base + " + j * " + std::to_string(step) + ", " +
                                std::to_string(step) + ", count)";
      if (!item.bounds.empty()) value = padded_value(item, value, base);
    } else if (emitter_.graph().node(item.value).op == ir::Op::iota) {
      std::int64_t step = emitter_.inner_coefficient(item.address, layout_);
      const std::string offset =
          emitter_.row_offset(item.address, layout_) + emitter_.middle_offset(item.address, layout_);
      value = step == 0 ? "splat<" + type + ">(static_cast<" + type + ">(" + offset + "))"  // a value per middle step
                        : "lane_index<" + type + ">(" + offset + " + j * " + std::to_string(step) + ", " +
                              std::to_string(step) + ")";
    } else {
      text += "        " + emitter_.describe(item.value) + "\n";
      value = divides_by_reciprocal(id)     ? divide_by_row_value(item)
              : exponent_is_nonpositive(id) ? "exp_of_nonpositive(" + at(item.operands[0]).name + ")"
                                            : computed(id);
    }
    text += "        const " + vector_type(emitter_, item.value) + " " + item.name + " = " + value + ";\n";
    if (cached_.count(id) && first_write_[static_cast<std::size_t>(id)] == phase)
      text += "        store<" + type + ">(cache_" + item.name + cache_offset() + ", " + item.name +
              (across_lanes_ ? "" : ", count") + ");\n";
    if (hoisted && filling_hoisted)
      text += "        store<" + type + ">(hoisted_" + item.name + " + j, " + item.name + ", count);\n";
  }
  return text;
}

std::string RowKernel::fill_hoisted() const {
  if (hoisted_.empty()) return "";
  std::set<int> needed;
  // Every varying value the hoisted ones are computed from (all of them the same at every row).
  std::vector<int> pending(hoisted_.begin(), hoisted_.end());
  while (!pending.empty()) {
    const int id = pending.back();
    pending.pop_back();
    if (!varying(id) || !needed.insert(id).second) continue;
    for (int operand : at(id).operands) pending.push_back(operand);
  }
  const std::string body = element_values(needed, -1, true);
  return "    if (walked == begin) {  // values every row computes alike, once per work range\n" +
         inner_vector_loop("0", std::to_string(layout_.inner_size), body, "", 1) + "    }\n";
}

std::string RowKernel::pick(const Instance& item, const std::string& base, const std::string& inner) const {
  const std::string type = emitter_.storage_type(item.value);
  const std::string& index = at(item.operands[0]).name;
  const std::string node = std::to_string(item.value), stride = std::to_string(item.gather_stride),
                    extent = std::to_string(item.gather_extent);
  const std::string position =
      emitter_.row_offset(item.index_position, layout_) + emitter_.middle_offset(item.index_position, layout_);
  if (inner.empty())
    return "pick<" + type + ">(" + base + ", first_lane(" + index + "), " + stride + ", " + extent +
           ", state.runtime, " + node + ", " + position + ")";
  const std::string step = std::to_string(emitter_.inner_coefficient(item.address, layout_));
  const std::string position_step = std::to_string(emitter_.inner_coefficient(item.index_position, layout_));
  return "pick_lanes<" + type + ">(" + base + " + " + inner + " * " + step + ", " + step + ", " + index + ", " +
         stride + ", " + extent + ", count, state.runtime, " + node + ", " + position + " + " + inner + " * " +
         position_step + ", " + position_step + ")";
}

std::string RowKernel::cache_offset() const {
  if (across_lanes_) return " + j * lanes";
  // A column kernel's cache holds its block's columns for each reduced row r.
  if (kernel_.kind == KernelKind::column) return " + r * " + std::to_string(column_block_) + " + (j - block_begin)";
  return (layout_.middle_sizes.empty() ? "" : " + middle * " + std::to_string(layout_.inner_size)) + " + j";
}

std::string RowKernel::vector_loop(const std::string& begin, const std::string& end, const std::string& body,
                                   const std::string& partial_type, int partial_count,
                                   const std::string& step_prologue) const {
  const std::string loop = inner_vector_loop(begin, end, body, partial_type, partial_count);
  if (layout_.middle_sizes.empty()) return loop;
  std::string text, index = "0";
  for (std::size_t t = 0; t < layout_.middle_sizes.size(); ++t) {
    std::string d = "d" + std::to_string(t);
    text += "      for (int64_t " + d + " = 0; " + d + " < " + std::to_string(layout_.middle_sizes[t]) + "; ++" + d +
            ") {\n";
    index = "(" + index + ") * " + std::to_string(layout_.middle_sizes[t]) + " + " + d;
  }
  if (!cached_.empty()) text += "      const int64_t middle = " + index + ";\n";
  text += step_prologue + loop;
  for (std::size_t t = 0; t < layout_.middle_sizes.size(); ++t) text += "      }\n";
  return text;
}

std::string RowKernel::inner_vector_loop(const std::string& begin, const std::string& end, const std::string& body,
                                         const std::string& partial_type, int partial_count) const {
  const bool reducing = !partial_type.empty();
  const std::string parameters =
      reducing ? "int64_t j, int count, " + partial_type + "& partial" : "int64_t j, int count";
  const std::string first = reducing ? ", partials[0]" : "";
  // GCC unrolls a loop of a known, small trip count completely (rows of up to 16 x 16 floats): with a
  // transcendental in the body that multiplied the compile time by 7 (a 512-wide softmax: 1.7 s against 0.2 s)
  // and bought nothing measurable, so the generated loops ask for no unrolling.
  const std::string no_unrolling = "      #pragma GCC unroll 1\n";
  std::string loop = "      auto step = [&](" + parameters + ") __attribute__((always_inline)) {\n" + body +
                     "      };\n      int64_t j = " + begin + ";\n";
  if (reducing && partial_count > 1) {
    loop += no_unrolling + "      for (; j + " + std::to_string(partial_count) + " * lanes <= " + end +
            "; j += " + std::to_string(partial_count) + " * lanes) {\n";
    for (int p = 0; p < partial_count; ++p)
      loop += "        step(j" + (p == 0 ? std::string() : " + " + std::to_string(p) + " * lanes") +
              ", lanes, partials[" + std::to_string(p) + "]);\n";
    loop += "      }\n";
  }
  loop += no_unrolling + "      for (; j + lanes <= " + end + "; j += lanes) step(j, lanes" + first + ");\n";
  if (whole_vectors_)
    loop += "      // no partial vector: every range is a multiple of " + std::to_string(widest_lanes) + " elements\n";
  else
    loop += "      if (j < " + end + ") step(j, static_cast<int>(" + end + " - j)" + first + ");\n";
  return loop;
}

std::string RowKernel::lanes_loop(const std::string& begin, const std::string& end, const std::string& body) {
  return "      #pragma GCC unroll 1\n      for (int64_t j = " + begin + "; j < " + end + "; ++j) {\n" + body +
         "      }\n";
}

std::string RowKernel::reduction_pass(std::size_t k, const std::string& begin, const std::string& end) const {
  const Instance& reduction = at(reductions_[k]);
  if (!varying(reduction.operands[0])) return invariant_reduction(k, begin, end);
  const ir::Node& node = emitter_.graph().node(reduction.value);
  ReductionInfo info = reduction_info(node.op, node.type.dtype);
  const Instance& operand = at(reduction.operands[0]);
  const std::string type = vector_type(emitter_, reduction.value);
  const std::string accumulator = "accumulator" + std::to_string(k);
  if (maximum_may_skip_nan(reductions_[k])) info.combine = "max_skipping_nan";
  if (across_lanes_) {  // each lane its own row's accumulator: no partial lanes, no tree at the end
    std::string body = element_values(phase_elements_[k], static_cast<int>(k));
    body += "        " + accumulator + " = " + info.combine + "(" + accumulator + ", " + operand.name + ");\n";
    return "    " + emitter_.describe(reduction.value) + "\n    " + type + " " + accumulator + " = " + info.identity +
           ";\n    {\n" + lanes_loop(begin, end, body) + "    }\n";
  }
  const int partial_count = partials_of(k);
  std::string text = "    " + emitter_.describe(reduction.value) + "\n    " + type + " " + accumulator + ";\n    {\n";
  text += "      " + type + " partials[" + std::to_string(partial_count) + "] = {";
  for (int p = 0; p < partial_count; ++p) text += (p ? ", " : "") + info.identity;
  text += "};\n";
  std::string body = element_values(phase_elements_[k], static_cast<int>(k));
  if (k > 0) body += prefetch_next_row(next_row_loads(), false);
  body += "        partial = " + std::string(info.combine) + "(partial, first_lanes(" + operand.name + ", " +
          info.identity + ", count));\n";
  text += vector_loop(begin, end, body, type, partial_count);
  std::string combined = "partials[0]";
  if (partial_count == 4)
    combined = std::string(info.combine) + "(" + info.combine + "(partials[0], partials[1]), " + info.combine +
               "(partials[2], partials[3]))";
  text += "      " + accumulator + " = " + combined + ";\n    }\n";
  return text;
}

int RowKernel::partials_of(std::size_t k) const {
  // Independent partial accumulators for rows of at least 64 elements (4 AVX-512 vectors, 8 AVX2 ones; see
  // vector_loop), combined in a fixed order, so results do not depend on threads; but one where the body
  // computes a transcendental: its dozens of instructions per vector hide the combine's latency, and four
  // copies of it made a softmax module compile 1.4x longer (0.35 -> 0.25 s) for no gain in run time.
  return layout_.inner_size >= 64 && !computes_transcendental(phase_elements_[k]) ? 4 : 1;
}

std::string RowKernel::invariant_reduction(std::size_t k, const std::string& begin, const std::string& end) const {
  const Instance& reduction = at(reductions_[k]);
  const ir::Node& node = emitter_.graph().node(reduction.value);
  const ReductionInfo info = reduction_info(node.op, node.type.dtype);
  const std::string value = at(reduction.operands[0]).name, accumulator = "accumulator" + std::to_string(k);
  const std::string count = "(" + end + " - " + begin + ") * " + std::to_string(layout_.middle_count());
  const std::string type = emitter_.storage_type(reduction.value);
  std::string text = "    " + emitter_.describe(reduction.value) + "\n    " + vector_type(emitter_, reduction.value) +
                     " " + accumulator + " = " + info.identity + ";\n    {\n      const int64_t elements = " + count +
                     ";  // each the same value\n";
  const std::string value_once = across_lanes_ ? value : "first_lanes(" + value + ", " + info.identity + ", 1)";
  const bool sum = node.op == ir::Op::reduce_sum || node.op == ir::Op::reduce_mean;
  if (sum && is_floating(node.type.dtype) && across_lanes_) {  // every lane its row's value times n
    text += "      if (elements > 0) " + accumulator + " = add(" + accumulator + ", cast<" + type +
            ">(mul(cast<double>(" + value + "), splat<double>(static_cast<double>(elements)))));\n";
  } else if (sum && is_floating(node.type.dtype)) {
    text += "      if (elements > 0) " + accumulator + " = add(" + accumulator + ", first_lanes(splat<" + type +
            ">(static_cast<" + type + ">(static_cast<double>(first_lane(" + value +
            ")) * static_cast<double>(elements))), " + info.identity + ", 1));\n";
  } else if (sum && node.type.dtype != DType::boolean) {  // wrapping, as n additions
    const std::string product = "mul(" + value + ", splat<" + type + ">(static_cast<" + type + ">(elements)))";
    text += "      if (elements > 0) " + accumulator + " = add(" + accumulator + ", " +
            (across_lanes_ ? product : "first_lanes(" + product + ", " + info.identity + ", 1)") + ");\n";
  } else if (node.op == ir::Op::reduce_max || node.op == ir::Op::reduce_min) {
    text += "      if (elements > 0) " + accumulator + " = " + info.combine + "(" + accumulator + ", " + value_once +
            ");\n";
  } else {
    text += "      for (int64_t j = 0; j < elements; ++j) " + accumulator + " = " + info.combine + "(" + accumulator +
            ", " + value_once + ");\n";
  }
  text += "    }\n";
  return text;
}

std::string RowKernel::finish_reduction(std::size_t k, const std::string& accumulator) const {
  const Instance& reduction = at(reductions_[k]);
  const ir::Node& node = emitter_.graph().node(reduction.value);
  ReductionInfo info = reduction_info(node.op, node.type.dtype);
  std::string type = emitter_.storage_type(reduction.value);
  const std::string count = std::to_string(layout_.inner_size * layout_.middle_count());
  if (across_lanes_)  // each lane holds its row's result already
    return node.op == ir::Op::reduce_mean
               ? "div(" + accumulator + ", splat<" + type + ">(static_cast<" + type + ">(" + count + ")))"
               : accumulator;
  std::string value = info.finish + std::string("(") + accumulator + ")";
  if (node.op == ir::Op::reduce_mean)
    value = "div(splat<" + type + ">(" + value + "), splat<" + type + ">(static_cast<" + type + ">(" + count + ")))[0]";
  return "splat<" + type + ">(" + value + ")";
}

std::string RowKernel::emit_kernel() {
  std::string prefix = emitter_.prefix();
  std::string text;
  text += "struct " + prefix + "_state {\n" + state_fields(emitter_);
  if (split_reduction_) text += "  " + emitter_.storage_type(at(reductions_[0]).value) + "* partials;\n";
  text += "};\n\n";
  if (!strips_.empty()) return text + strip_items() + entry(1);
  std::int64_t chunks = chunked_ || split_reduction_ ? (layout_.inner_size + chunk_size - 1) / chunk_size : 1;
  text += "void " + prefix + "_items(void* context, int64_t begin, int64_t end) {\n";
  text += state_from_context();
  text += allocate_row_caches();
  text +=
      "  const bool backward = (state.runtime->step & 1) != 0;  // an odd iteration of a loop: the rows last "
      "read come first\n";
  if (row_groups_) text += group_walk();
  text += "  for (int64_t walked = begin; walked < end; ++walked) {\n";
  text += "    const int64_t item = backward ? begin + end - 1 - walked : walked;\n";
  std::string range_begin = "0", range_end = std::to_string(layout_.inner_size);
  bool has_rows = !layout_.outer_sizes.empty();
  if (chunks > 1) {
    if (has_rows) text += "    const int64_t row = item / " + std::to_string(chunks) + ";\n";
    text +=
        "    const int64_t chunk_begin = item % " + std::to_string(chunks) + " * " + std::to_string(chunk_size) + ";\n";
    text += "    const int64_t chunk_end = chunk_begin + " + std::to_string(chunk_size) + " < " +
            std::to_string(layout_.inner_size) + " ? chunk_begin + " + std::to_string(chunk_size) + " : " +
            std::to_string(layout_.inner_size) + ";\n";
    range_begin = "chunk_begin";
    range_end = "chunk_end";
  } else if (across_lanes_) {
    const std::string rows = std::to_string(layout_.rows());
    text += "    const int64_t row = item * lanes;  // rows [row, row + group_rows), row + l in lane l\n";
    text += "    const int group_rows = row + lanes <= " + rows + " ? lanes : static_cast<int>(" + rows + " - row);\n";
  } else if (has_rows) {
    text += "    const int64_t row = item;\n";
  }
  text += row_setup();
  text += row_values(0);
  text += fill_hoisted();
  text += reduction_passes(range_begin, range_end);
  if (!split_reduction_) text += element_pass(range_begin, range_end) + row_outputs();
  text += "  }\n";
  if (!streamed_.empty()) text += "  end_streaming();\n";
  text += release_row_caches() + "}\n\n";
  text += entry(chunks);
  return text;
}

std::string RowKernel::allocate_row_caches() const {
  std::string text;
  for (int id : cached_)
    text += "  " + emitter_.storage_type(at(id).value) + "* cache_" + at(id).name + " = static_cast<" +
            emitter_.storage_type(at(id).value) + "*>(state.runtime->allocate(" +
            std::to_string(layout_.inner_size * layout_.middle_count()) + (across_lanes_ ? " * lanes" : "") +
            " * sizeof(" + emitter_.storage_type(at(id).value) + ")));\n";
  for (int id : hoisted_) {
    const std::string type = emitter_.storage_type(at(id).value);
    text += "  " + type + "* hoisted_" + at(id).name + " = static_cast<" + type + "*>(state.runtime->allocate(" +
            std::to_string(layout_.inner_size) + " * sizeof(" + type + ")));\n";
  }
  return text;
}

std::string RowKernel::row_caches_in_scratch(std::int64_t& bytes) const {
  std::string text;
  bytes = 0;
  for (int id : cached_) {
    const std::string type = emitter_.storage_type(at(id).value);
    text += "  " + type + "* cache_" + at(id).name + " = reinterpret_cast<" + type +
            "*>(static_cast<char*>(scratch) + " + std::to_string(bytes) + ");\n";
    const auto element_bytes = static_cast<std::int64_t>(size_of(emitter_.graph().type(at(id).value).dtype));
    bytes += (layout_.inner_size * layout_.middle_count() * element_bytes + 63) / 64 * 64;
  }
  return text;
}

std::string RowKernel::release_row_caches() const {
  std::string text;
  for (int id : cached_) text += "  state.runtime->deallocate(cache_" + at(id).name + ");\n";
  for (int id : hoisted_) text += "  state.runtime->deallocate(hoisted_" + at(id).name + ");\n";
  return text;
}

std::string RowKernel::reduction_passes(const std::string& begin, const std::string& end) const {
  std::string text;
  for (std::size_t k = 0; k < reductions_.size(); ++k) {
    text += reduction_pass(k, begin, end);
    if (split_reduction_) {
      text += "    state.partials[item] = " +
              std::string(reduction_info(emitter_.graph().node(at(reductions_[k]).value).op,
                                         emitter_.graph().type(at(reductions_[k]).value).dtype)
                              .finish) +
              "(accumulator" + std::to_string(k) + ");\n";
      continue;
    }
    text += "    const " + vector_type(emitter_, at(reductions_[k]).value) + " " + at(reductions_[k]).name + " = " +
            finish_reduction(k, "accumulator" + std::to_string(k)) + ";\n";
    text += reciprocal(reductions_[k]) + row_values(static_cast<int>(k) + 1);
  }
  return text;
}

std::string RowKernel::element_pass(const std::string& begin, const std::string& end) const {
  const int phase = static_cast<int>(phase_elements_.size()) - 1;
  // Values per middle step before the inner loop, the others per element.
  std::set<int> needed, per_step;
  for (int id : phase_elements_.back()) (step_values_.count(id) ? per_step : needed).insert(id);
  std::string body = prefetch_ahead(needed) + element_values(needed, phase);
  body += prefetch_next_row(next_row_loads(), true);
  bool any = false;
  for (const auto& [value, id] : outputs_) {
    if (is_row_output(value)) continue;
    any = true;
    body += element_store(value, id);
  }
  if (!any) return "";
  if (across_lanes_) return "    {\n" + lanes_loop(begin, end, body) + "    }\n";
  return "    {\n" + vector_loop(begin, end, body, "", 1, element_values(per_step, phase)) + "    }\n";
}

std::string RowKernel::element_store(ir::ValueId value, int id) const {
  const Linear address = output_address(value);
  if (across_lanes_)
    return "        " + write_across_lanes(emitter_.storage_type(value),
                                           "row_" + emitter_.output_name(value) + element_offset(address),
                                           row_stride(address), at(id).name);
  const std::string base = "row_" + emitter_.output_name(value) + emitter_.middle_offset(address, layout_);
  const std::int64_t step = emitter_.inner_coefficient(address, layout_);
  if (step != 1)  // a placed output whose inner axis is not the innermost of the value it is placed into
    return "        scatter<" + emitter_.storage_type(value) + ">(" + base + " + j * " + std::to_string(step) + ", " +
           std::to_string(step) + ", " + at(id).name + ", count);\n";
  const bool stream = streamed_.count(value) > 0;
  return std::string("        ") + (stream ? "store_streaming<" : "store<") + emitter_.storage_type(value) + ">(" +
         base + " + j, " + at(id).name + ", count);\n";
}

std::string RowKernel::row_outputs() const {
  std::string text;
  for (const auto& [value, id] : outputs_) {
    if (!is_row_output(value)) continue;
    const std::string base = "row_" + emitter_.output_name(value);
    if (across_lanes_)
      text += "    " +
              write_across_lanes(emitter_.storage_type(value), base, row_stride(output_address(value)), at(id).name);
    else
      text += "    " + base + "[0] = first_lane(" + at(id).name + ");\n";
  }
  return text;
}

}  // namespace kiln::compiler::cpu
