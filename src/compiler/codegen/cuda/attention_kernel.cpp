// Attention kernels (fusion kind `attention`, compiler/fusion_attention.cpp): for every batch item,
//   out = rows(op(A) op(B)) op(C)
// as one kernel, where `rows` is the row kernel the plan put between the two products (softmax of scaled and
// masked scores, a layer norm: whatever it fused). The kernel is that row kernel's (reduction_kernel.cpp: a warp
// per row of up to 1024 keys, 8 rows per block, else a block of 512 threads per row), and around its row code
// each row of the first product
//   1. computes its scores, a key per thread at a time, into a row of shared memory;
//   2. runs the row code, which reads the scores there and leaves its result (the probabilities) in their place;
//   3. multiplies that row by op(C), an output column per thread at a time, and writes the output row.
// Neither the scores nor the probabilities reach memory. Both products sum their contraction in order with f32
// fused multiply-adds: no TF32 whatever config::allow_tf32 says, and no tensor cores. bf16 products (operands,
// scores, probabilities and output in bf16) read their operands widened and round the f32 sums once, as the
// standard executor's bf16 matmul does. Where the row code is a softmax, the module also holds a flash-style variant
// on the tensor cores (flash_attention_kernel.cpp), which the executable launches instead: for bf16 always, for
// f32 while config::allow_tf32 holds.
// Shared memory holds a row of scores per row of the block (row_threads.h), which the scheduler keeps within
// attention_shared_limit_bytes: longer rows stay three kernels.

#include "compiler/codegen/cuda/kernel_writer.h"
#include "compiler/codegen/cuda/row_threads.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler::cuda {
namespace {

// "888 * item + 24 * query + depth": the terms whose coefficient is not 0, "0" for none.
std::string sum_of(const std::vector<std::pair<std::int64_t, std::string>>& terms) {
  std::string text;
  for (const auto& [coefficient, variable] : terms) {
    if (coefficient == 0) continue;
    text += (text.empty() ? "" : " + ") + (coefficient == 1 ? "" : std::to_string(coefficient) + " * ") + variable;
  }
  return text.empty() ? "0" : text;
}

// Element (row, column) of op(X) for this row's batch item, as f32 (a bf16 element widened); `row_is_zero` drops
// the row's term (it is always 0).
std::string element(const AttentionOperand& operand, const std::string& row, bool row_is_zero,
                    const std::string& column) {
  const std::int64_t row_stride = row_is_zero ? 0 : operand.transposed ? 1 : operand.columns;
  const std::int64_t column_stride = operand.transposed ? operand.rows : 1;
  // The outer stride first, as the matrix is stored.
  const std::string index = operand.transposed
                                ? sum_of({{operand.item_stride, "item"}, {column_stride, column}, {row_stride, row}})
                                : sum_of({{operand.item_stride, "item"}, {row_stride, row}, {column_stride, column}});
  const std::string value = operand.input + "[" + index + "]";
  return operand.bf16 ? "widen_bf16(" + value + ")" : value;
}

}  // namespace

AttentionOperand attention_operand(const KernelWriter& writer, ir::ValueId value, bool transposed, std::int64_t batch) {
  const std::vector<ir::ValueId>& inputs = writer.kernel().inputs;
  const auto position = std::find(inputs.begin(), inputs.end(), value) - inputs.begin();
  if (position == static_cast<std::ptrdiff_t>(inputs.size()))
    throw InternalError("matmul", "an attention kernel's operand %" + std::to_string(value) + " is not in memory",
                        std::string());
  const Shape& shape = writer.emitter().graph().type(value).shape;
  const int rank = shape.rank();
  AttentionOperand operand;
  operand.input = writer.emitter().input_name(static_cast<int>(position));
  // The scheduler admits operands with the product's batch axes or none (fusion_attention.cpp); with one item,
  // the item's index is always 0.
  operand.item_stride = rank == 2 || batch == 1 ? 0 : shape[rank - 2] * shape[rank - 1];
  operand.rows = shape[transposed ? rank - 1 : rank - 2];
  operand.columns = shape[transposed ? rank - 2 : rank - 1];
  operand.transposed = transposed;
  operand.bf16 = writer.emitter().graph().type(value).dtype == DType::bf16;
  return operand;
}

std::string emit_attention_kernel(KernelWriter& writer, KernelLaunch& launch) {
  const KernelEmitter& emitter = writer.emitter();
  const ir::Graph& graph = emitter.graph();
  const auto [first_value, second_value] = writer.attention_products();
  const ir::Node& first = graph.node(first_value);
  const ir::Node& second = graph.node(second_value);
  const Shape& scores = first.type.shape;
  const int rank = scores.rank();
  std::int64_t batch = 1;
  for (int axis = 0; axis + 2 < rank; ++axis) batch *= scores[axis];
  const std::int64_t m = scores[rank - 2], n = scores[rank - 1];
  const std::int64_t width = second.type.shape[rank - 1];
  const AttentionOperand queries = attention_operand(writer, first.operands[0], first.attributes.transpose_a, batch);
  const AttentionOperand keys = attention_operand(writer, first.operands[1], first.attributes.transpose_b, batch);
  const AttentionOperand values = attention_operand(writer, second.operands[1], second.attributes.transpose_b, batch);
  const std::int64_t depth = queries.columns;
  if (attention_shared_bytes(n) > attention_shared_limit_bytes)
    throw InternalError("matmul", "an attention kernel's scores exceed its shared memory (the scheduler's limit)",
                        std::string());

  const RowThreads threads = row_threads(n);
  const std::string stride = std::to_string(threads.threads_per_row), keys_text = std::to_string(n);
  const std::string barrier = threads.by_warp ? "__syncwarp();" : "__syncthreads();";
  writer.set_scores_row(threads.by_warp ? "scores[warp]" : "scores");
  const std::string& row_scores = writer.scores_row();
  const bool one_query = m == 1;  // the query's index is always 0

  RowFrame frame;
  frame.variables = {{"warp", "threadIdx.x / 32", "int"}, {"item", one_query ? "row" : "row / " + std::to_string(m)},
                     {"query", "row % " + std::to_string(m)}};
  if (n > 0) {
    frame.shared = "  // The scores of " + std::string(threads.by_warp ? "each warp's row" : "the block's row") +
                   ", key by key: the first product, then the row code's result in its place.\n";
    frame.shared += threads.by_warp ? "  __shared__ float scores[" + std::to_string(threads.rows_per_block) + "][" +
                                          keys_text + "];\n"
                                    : "  __shared__ float scores[" + keys_text + "];\n";
    frame.before = "    " + emitter.describe(first_value) + ": this thread's keys\n";
    frame.before += "    for (int64_t key = lane; key < " + keys_text + "; key += " + stride + ") {\n";
    if (depth == 0) {
      frame.before += "      " + row_scores + "[key] = 0.0f;  // a sum of no products\n";
    } else {
      frame.before += "      float score = 0.0f;\n";
      frame.before += "      for (int64_t depth = 0; depth < " + std::to_string(depth) + "; ++depth)\n";
      frame.before += "        score = fmaf(" + element(queries, "query", one_query, "depth") + ", " +
                      element(keys, "depth", false, "key") + ", score);\n";
      frame.before += "      " + row_scores + "[key] = score;\n";
    }
    frame.before += "    }\n    " + barrier + "  // the row's scores, before the row code reads them\n";
  }
  if (n > 0) frame.after = "    " + barrier + "  // every thread's probabilities, before the second product reads them\n";
  // A bf16 product's f32 sum rounded once, as the standard executor's matmul rounds it.
  const auto stored = [&](const std::string& sum) {
    return second.type.dtype == DType::bf16 ? "round_to_bf16(" + sum + ")" : sum;
  };
  frame.after += "    " + emitter.describe(second_value) + ": this thread's columns of the output row\n";
  frame.after += "    for (int64_t column = lane; column < " + std::to_string(width) + "; column += " + stride + ") {\n";
  if (n == 0) {
    frame.after += "      " + emitter.output_name(second_value) + "[" + sum_of({{width, "row"}, {1, "column"}}) +
                   "] = " + stored("0.0f") + ";  // a sum over no keys\n";
  } else {
    frame.after += "      float sum = 0.0f;\n";
    frame.after += "      for (int64_t key = 0; key < " + keys_text + "; ++key)\n";
    frame.after +=
        "        sum = fmaf(" + row_scores + "[key], " + element(values, "key", false, "column") + ", sum);\n";
    frame.after += "      " + emitter.output_name(second_value) + "[" + sum_of({{width, "row"}, {1, "column"}}) +
                   "] = " + stored("sum") + ";\n";
  }
  frame.after += "    }\n";
  if (n > 0) frame.after += "    " + barrier + "  // the row's scores read by every thread before the next row's\n";
  std::string text = emit_reduction_kernel(writer, launch, frame);
  return text + emit_flash_attention_kernel(writer, launch);  // after: it names its kernel after launch.function
}

}  // namespace kiln::compiler::cuda
