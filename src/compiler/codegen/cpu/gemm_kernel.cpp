// Gemm and attention kernels: kiln's sgemm driven from generated code, with the fused epilogue run over each tile.

#include "compiler/codegen/cpu/row_kernel.h"
#include "kernels/cpu/gemm.h"

#include <algorithm>

namespace kiln::compiler::cpu {

std::string RowKernel::emit_gemm() {
  const ir::Graph& graph = emitter_.graph();
  ir::ValueId matmul = -1;
  for (ir::ValueId member : kernel_.members)
    if (graph.node(member).op == ir::Op::matmul) matmul = member;
  const ir::Node& node = graph.node(matmul);
  // bf16 (where the CPU has AMX or AVX512_BF16): gemm_bf16 hands every block to the epilogue, which rounds the f32 sums
  // to the product's bf16 and stores the product itself where it is an output.
  const bool bf16 = !gemm_writes_product(node);
  // sgemm sees all the rows as m; the epilogue recovers each row's coordinates.
  const int rank = kernel_.space.rank();
  layout_ = emitter_.product_rows();
  mark_varying();
  std::set<int> needed;
  for (int reduction : reductions_) collect_elements(at(reduction).operands[0], {}, needed);
  bool writes_product = false;
  for (const auto& [value, id] : outputs_) {
    if (value == matmul && !bf16)
      writes_product = true;
    else if (at(id).kind != Instance::Kind::reduction)
      collect_elements(id, {}, needed);
  }
  phase_elements_ = {needed};
  first_write_.assign(static_cast<std::size_t>(emitter_.instance_count()), -1);
  bool has_epilogue = !needed.empty() || bf16;
  const Shape& a = graph.type(node.operands[0]).shape;
  const Shape& b = graph.type(node.operands[1]).shape;
  const std::int64_t m = layout_.rows(), n = kernel_.space[rank - 1];
  const std::int64_t k = node.attributes.transpose_a ? a[0] : a[a.rank() - 1];
  // The epilogue sees column blocks [p * panel_columns, min(n, (p + 1) * panel_columns)) (gemm.h), 32 wide for bf16.
  const std::int64_t panel_columns = bf16 ? 32 : kernels::cpu::plan_sgemm(m, n, k).panel_columns;
  whole_vectors_ = n % widest_lanes == 0 && panel_columns % widest_lanes == 0;

  std::string prefix = emitter_.prefix();
  std::string text = "struct " + prefix + "_state {\n" + state_fields(emitter_);
  for (std::size_t k = 0; k < reductions_.size(); ++k)
    text += "  " + emitter_.storage_type(at(reductions_[k]).value) + "* partials" + std::to_string(k) + ";\n";
  text += "};\n\n";
  if (has_epilogue) text += epilogue(prefix, writes_product, matmul);
  text += entry_opening();
  std::string sizes = std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k);
  text += bf16 ? "  const int64_t blocks = runtime->gemm_bf16_block_count(" + std::to_string(m) + ", " +
                     std::to_string(n) + ");\n  (void)blocks;\n"
              : "  const int64_t blocks = runtime->sgemm_block_count(" + sizes + ");\n  (void)blocks;\n";
  // Partial results in the reductions' own dtypes: an epilogue may cast the f32 product (to f64, say).
  for (std::size_t r = 0; r < reductions_.size(); ++r) {
    const std::string type = emitter_.storage_type(at(reductions_[r]).value);
    text += "  state.partials" + std::to_string(r) + " = static_cast<" + type +
            "*>(runtime->allocate(blocks * sizeof(" + type + ")));\n";
  }
  text += "  " + emitter_.describe(matmul) + "\n";
  // The arguments of the runtime's GEMMs: A, lda, transpose_a; B, ldb, transpose_b; C (sgemm's), ldc; the epilogue.
  const std::string left = input_field(node.operands[0]) + ", " + std::to_string(a[a.rank() - 1]) + ", " +
                           (node.attributes.transpose_a ? "1" : "0");
  const std::string right =
      input_field(node.operands[1]) + ", " + std::to_string(b[1]) + ", " + (node.attributes.transpose_b ? "1" : "0");
  const std::string product =
      (writes_product ? "state." + emitter_.output_name(matmul) : std::string("nullptr")) + ", " + std::to_string(n);
  const std::string then = (has_epilogue ? prefix + "_epilogue" : std::string("nullptr")) + ", &state);\n";
  if (bf16)
    text += "  runtime->gemm_bf16(" + sizes + ", " + left + ", " + right + ", " + then;
  else if (kernel_.gathered.empty())
    text += "  runtime->sgemm(" + sizes + ", " + left + ", " + right + ", " + product + ", " + then;
  else
    text += gathered_rows(node.operands[0]) + "  runtime->sgemm_gathered(" + sizes + ", &rows, " +
            (node.attributes.transpose_a ? "1" : "0") + ", " + right + ", " + product + ", " + then;
  for (std::size_t r = 0; r < reductions_.size(); ++r) {
    const ir::Node& reduction = graph.node(at(reductions_[r]).value);
    ReductionInfo info = reduction_info(reduction.op, reduction.type.dtype);
    std::string p = "state.partials" + std::to_string(r);
    const std::string type = emitter_.storage_type(at(reductions_[r]).value);
    text += "  {\n    " + emitter_.describe(at(reductions_[r]).value) + ": combine the blocks in order\n";
    // No blocks when the product is empty (a dimension of 0): the reduction's identity.
    text += "    vec<" + type + "> total = blocks > 0 ? splat<" + type + ">(" + p + "[0]) : " + info.identity + ";\n";
    text += "    for (int64_t block = 1; block < blocks; ++block) total = " + std::string(info.combine) +
            "(total, splat<" + type + ">(" + p + "[block]));\n";
    std::string value = "first_lane(total)";
    if (reduction.op == ir::Op::reduce_mean)
      value = "div(total, splat<" + type + ">(static_cast<" + type + ">(" + std::to_string(m * n) + ")))[0]";
    text += "    state." + emitter_.output_name(at(reductions_[r]).value) + "[0] = " + value + ";\n";
    text += "    runtime->deallocate(" + p + ");\n  }\n";
  }
  return text + "}\n";
}

std::string RowKernel::epilogue(const std::string& prefix, bool writes_product, ir::ValueId matmul) {
  std::string text = "void " + prefix +
                     "_epilogue(void* context, const float* tile, int64_t ld, int64_t row_begin, int64_t row_end, "
                     "int64_t column_begin, int64_t column_end, int64_t block) {\n";
  text += state_from_context();
  for (std::size_t k = 0; k < reductions_.size(); ++k) {
    const ir::ValueId reduction_value = at(reductions_[k]).value;
    const ir::Node& reduction = emitter_.graph().node(reduction_value);
    text += "  vec<" + emitter_.storage_type(reduction_value) + "> accumulator" + std::to_string(k) + " = " +
            reduction_info(reduction.op, reduction.type.dtype).identity + ";\n";
  }
  text += "  for (int64_t row = row_begin; row < row_end; ++row) {\n";
  text += "    const float* row_tile = tile + (row - row_begin) * ld - column_begin;\n";
  text += coordinates() + row_setup_pointers() + row_values(0);
  std::string body = element_values(phase_elements_[0], 0);
  for (std::size_t k = 0; k < reductions_.size(); ++k) {
    const Instance& reduction = at(reductions_[k]);
    const ir::Node& node = emitter_.graph().node(reduction.value);
    ReductionInfo info = reduction_info(node.op, node.type.dtype);
    body += "        accumulator" + std::to_string(k) + " = " + info.combine + "(accumulator" + std::to_string(k) +
            ", first_lanes(" + at(reduction.operands[0]).name + ", " + info.identity + ", count));\n";
  }
  // Outputs far larger than the caches, or large results of the function, go straight to memory (choose_streamed;
  // store_streaming: no read of each line before it is written). A 7x7 stem writing 25.7 MB: 7.4-7.7 -> 6.5-6.8 ms
  // in kiln-bench (the caches cleared before each warm-up call); called in a tight loop, no different. The epilogue
  // runs for every tile and does not fence: the pool does, after each piece (runtime/parallel.h). A fence per tile
  // (and the claim's locked add, which also drains the stores) waited for each tile's lines to reach memory: the
  // stem 5.64-5.85 -> 5.37-5.57 ms (best of 200 calls, six alternating rounds), with four times the strips a claim
  // (gemm.cpp, kOwnBatch).
  std::vector<std::pair<ir::ValueId, int>> stored;
  for (const auto& [value, id] : outputs_) {
    const bool written_by_gemm = value == matmul && gemm_writes_product(emitter_.graph().node(matmul));
    if (!written_by_gemm && at(id).kind != Instance::Kind::reduction) stored.emplace_back(value, id);
  }
  std::vector<ir::ValueId> stored_values;
  for (const auto& [value, id] : stored) stored_values.push_back(value);
  choose_streamed(stored_values);
  for (const auto& [value, id] : stored) {
    const bool stream = streamed_.count(value) > 0;
    body += std::string("        ") + (stream ? "store_streaming<" : "store<") + emitter_.storage_type(value) +
            ">(row_" + emitter_.output_name(value) + " + j, " + at(id).name + ", count);\n";
  }
  (void)writes_product;
  text += "    {\n" + vector_loop("column_begin", "column_end", body) + "    }\n  }\n";
  for (std::size_t k = 0; k < reductions_.size(); ++k) {
    const ir::Node& node = emitter_.graph().node(at(reductions_[k]).value);
    text += "  state.partials" + std::to_string(k) + "[block] = " + reduction_info(node.op, node.type.dtype).finish +
            "(accumulator" + std::to_string(k) + ");\n";
  }
  return text + "}\n\n";
}

namespace {

std::string braced(const std::vector<std::int64_t>& values) {
  std::string text;
  for (std::int64_t value : values) text += (text.empty() ? "" : ", ") + std::to_string(value);
  return "{" + text + "}";
}

}  // namespace

std::string RowKernel::gathered_rows(ir::ValueId operand) const {
  const ir::Graph& graph = emitter_.graph();
  const Shape& shape = graph.type(gathered_concat(graph, operand)).shape;
  const int axes = shape.rank() - 1;
  std::string text = "  " + emitter_.describe(operand) +
                     "\n  // is not in memory: sgemm gathers each strip of its rows from these parts as it packs A.\n"
                     "  // Row (i0, i1, ...) of part p, column j: source[offset + i0 * strides[0] + ... + j], or 0\n"
                     "  // where some i_t is outside [lower[t], upper[t]) (the padding).\n";
  // The parts' numbers as a constant table, their sources filled in when the kernel runs: a 7x7 convolution's 49
  // parts as one local array of aggregates took GCC 0.25 s more to compile (0.39 s against 0.14 for the module).
  const std::string count = std::to_string(kernel_.gathered.size());
  std::string sources;  // six to a line
  for (std::size_t p = 0; p < kernel_.gathered.size(); ++p)
    sources += std::string(p == 0 ? "" : p % 6 == 0 ? ",\n      " : ", ") + input_field(kernel_.gathered[p].source);
  text += "  static constexpr kiln_gathered_part layout[" + count + "] = {\n";
  for (const GatheredView& view : kernel_.gathered) {
    const Shape& source = graph.type(view.source).shape;
    const auto dense = source.strides();
    std::int64_t offset = 0;
    std::vector<std::int64_t> strides, lower, upper;
    for (int axis = 0; axis < shape.rank(); ++axis) {
      const std::size_t a = static_cast<std::size_t>(axis);
      offset += view.start[a] * dense[a];
      if (axis == axes) break;
      strides.push_back(view.step[a] * dense[a]);
      // The coordinates i with 0 <= start + i * step < source's size on this axis.
      const std::int64_t start = view.start[a], step = view.step[a], extent = shape[axis];
      const std::int64_t first = start >= 0 ? 0 : (-start + step - 1) / step;
      const std::int64_t end = source[axis] <= start ? 0 : (source[axis] - start + step - 1) / step;
      lower.push_back(std::min(first, extent));
      upper.push_back(std::clamp(end, lower.back(), extent));
    }
    text += "      " + emitter_.describe(view.part) + ": %" + std::to_string(view.source) + " at " +
            braced(view.start) + " by " + braced(view.step) + "\n";
    text += "      {nullptr, " + std::to_string(offset) + ", " + std::to_string(graph.type(view.part).shape[axes]) +
            ", " + braced(strides) + ", " + braced(lower) + ", " + braced(upper) + "},\n";
  }
  std::vector<std::int64_t> extents(shape.dims().begin(), shape.dims().end() - 1);
  text += "  };\n  const float* const sources[" + count + "] = {" + sources + "};\n  kiln_gathered_part parts[" +
          count + "];\n  for (int p = 0; p < " + count +
          "; ++p) {\n    parts[p] = layout[p];\n    parts[p].source = sources[p];\n  }\n";
  text += "  const kiln_gathered_rows rows = {" + std::to_string(axes) + ", " + braced(extents) + ", " + count +
          ", parts};\n";
  return text;
}

std::string RowKernel::emit_attention() {
  const ir::Graph& graph = emitter_.graph();
  std::vector<ir::ValueId> matmuls;  // in graph order: the first product, then the second
  for (ir::ValueId member : kernel_.members)
    if (graph.node(member).op == ir::Op::matmul) matmuls.push_back(member);
  const ir::Node& first = graph.node(matmuls.front());
  const ir::Node& second = graph.node(matmuls.back());
  const ir::ValueId probabilities = second.operands[0];
  outputs_.emplace_back(probabilities, emitter_.instance(probabilities, emitter_.broadcast_map(kernel_.space)));
  layout_ = emitter_.layout(kernel_.space.rank() - 1, {output_address(probabilities)});
  mark_varying();
  plan_phases();

  whole_vectors_ = layout_.inner_size % widest_lanes == 0;
  const std::string prefix = emitter_.prefix(), row_end = std::to_string(layout_.inner_size);
  std::string text = "struct " + prefix + "_state {\n" + state_fields(emitter_) + "};\n\n";
  const std::string type = emitter_.storage_type(probabilities);
  text +=
      "// Rows [row_begin, row_end) of the scores (the first product's f32 sums), numbered across the batch, to the "
      "same\n// rows of %" +
      std::to_string(probabilities) + " (" + type + "); both strips hold just these rows, ld elements apart.\n";
  text += "void " + prefix +
          "_rows(void* context, int64_t row_begin, int64_t row_end, const float* scores, void* probabilities, "
          "int64_t ld, void* scratch) {\n";
  text += state_from_context();
  std::int64_t row_scratch_bytes = 0;
  text += row_caches_in_scratch(row_scratch_bytes) + "  for (int64_t row = row_begin; row < row_end; ++row) {\n";
  text += "    const float* row_tile = scores + (row - row_begin) * ld;\n" + row_setup() + row_values(0);
  text += reduction_passes("0", row_end) + element_pass("0", row_end);
  // Where later kernels read the probabilities too (a training step's backward), each row also goes to memory
  // (BackendCapabilities: AttentionMemory::writes_probabilities); the scores still do not.
  const bool written =
      std::find(kernel_.outputs.begin(), kernel_.outputs.end(), probabilities) != kernel_.outputs.end();
  if (written) {
    choose_streamed({probabilities});
    const std::string store = (streamed_.empty() ? "store<" : "store_streaming<") + type + ">";
    text +=
        "    // %" + std::to_string(probabilities) + " also to memory, for the kernels after this one that read it\n";
    text += "    {\n      const " + type + "* strip_row = static_cast<const " + type +
            "*>(probabilities) + (row - row_begin) * ld;\n      " + type + "* memory_row = state." +
            emitter_.output_name(probabilities) + " + row * " + row_end + ";\n";
    text += inner_vector_loop(
                "0", row_end,
                "        " + store + "(memory_row + j, load<" + type + ">(strip_row + j, count), count);\n", "", 1) +
            "    }\n";
  }
  text += "  }\n}\n\n";

  text += entry_opening();
  text += "  " + emitter_.describe(matmuls.front()) + "\n  " + emitter_.describe(matmuls.back()) + "\n";
  const Shape& scores = first.type.shape;
  const int rank = scores.rank();
  std::int64_t batch = 1;
  for (int axis = 0; axis + 2 < rank; ++axis) batch *= scores[axis];
  const Shape& left = graph.type(first.operands[0]).shape;
  const std::int64_t k = first.attributes.transpose_a ? left[left.rank() - 2] : left[left.rank() - 1];
  text += "  kiln_attention_problem problem = {};\n";
  if (first.type.dtype == DType::bf16) text += "  problem.bf16 = 1;  // operands, probabilities and output in bf16\n";
  text += "  problem.batch = " + std::to_string(batch) + ";\n  problem.m = " + std::to_string(scores[rank - 2]) +
          ";\n  problem.n = " + std::to_string(scores[rank - 1]) + ";\n  problem.k = " + std::to_string(k) +
          ";\n  problem.d = " + std::to_string(second.type.shape[rank - 1]) + ";\n";
  text += operand_fields("a", first.operands[0], first.attributes.transpose_a);
  text += operand_fields("b", first.operands[1], first.attributes.transpose_b);
  text += operand_fields("c", second.operands[1], second.attributes.transpose_b);
  text += "  problem.out = state." + emitter_.output_name(matmuls.back()) + ";\n";
  text += "  problem.row_scratch_bytes = " + std::to_string(row_scratch_bytes) + ";\n";
  text += "  runtime->attention(&problem, " + prefix + "_rows, &state);\n}\n";
  return text;
}

std::string RowKernel::operand_fields(const std::string& name, ir::ValueId operand, bool transpose) const {
  const Shape& shape = emitter_.graph().type(operand).shape;
  const std::int64_t stride = shape.rank() == 2 ? 0 : shape[shape.rank() - 2] * shape[shape.rank() - 1];
  return "  problem." + name + " = " + input_field(operand) + ";\n  problem." + name +
         "_batch_stride = " + std::to_string(stride) + ";\n  problem.transpose_" + name + " = " +
         (transpose ? "1" : "0") + ";\n";
}

}  // namespace kiln::compiler::cpu
