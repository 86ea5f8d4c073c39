// The flash-style variant of an attention kernel (attention_kernel.cpp): both products on the tensor cores, the
// scores of a tile of keys in registers, and the softmax computed online, so that a row of any length costs no
// shared memory and no pass over memory. Two kinds, by the products' operands:
//   f32   mma.sync m16n8k8 of TF32 operands, f32 sums: launched while config::allow_tf32 holds (`_tf32`);
//   bf16  mma.sync m16n8k16 of bf16 operands, f32 sums: launched always (`_bf16`). Its products are exact, as the
//         standard executor's are; the probabilities it multiplies are exp(t - m) rounded to bf16 where the standard
//         executor rounds exp(t - m) / l (the row code's bf16 result), within a rounding of each other.
//
// It applies where the row code between the products is a softmax of an elementwise function of the scores:
//   t = f(scores, anything read per element or per row: a scale, a mask, a causal comparison of iotas)
//   probabilities = exp(t - reduce_max(t)) / reduce_sum(exp(t - reduce_max(t)))   (along the keys; for bf16
//                   products rounded to bf16)
// with Q K^T (K stored key by key) and P V (V stored key by key), and depths (multiples of 8 for f32, 16 for bf16)
// and output widths (multiples of 8) up to 128. Elsewhere the module keeps only the exact kernel.
//
// A block of 8 warps takes 128 rows (queries) of one batch item; each warp 16 of them, the rows of its mma tiles.
// For each tile of keys the block stages K and V in shared memory; each warp computes its 16 x keys scores (Q stays
// in registers), applies f to each, and updates per row the running maximum m, the running sum l of
// exp(t - m), and the output accumulator o, rescaled by exp(m_old - m_new) whenever the maximum grows. The output
// is o / l. Compared with the exact kernel's p = e / l then p V, this divides once per output element instead of
// once per score; both are within the products' rounding of each other.

#include "compiler/codegen/cuda/kernel_writer.h"

#include <kiln/error.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

namespace kiln::compiler::cuda {
namespace {

constexpr int warps_per_block = 8;
constexpr int rows_per_warp = 16;  // an mma tile's rows
constexpr int block_rows = warps_per_block * rows_per_warp;
constexpr std::int64_t widest_operand = 128;  // depth and output width: registers for Q and o

// The instances of the row code's structure, or nothing where the kernel is not a softmax of its scores.
// `bf16`: the products' operands are bf16, the probabilities the softmax rounded to bf16.
struct SoftmaxRows {
  int elementwise = -1;                // t: the instance both reductions start from
  std::vector<int> elementwise_parts;  // the instances t is computed from, in dependency order (the scores' tile
                                       // included), per element
};

bool is_node(const KernelWriter& writer, int id, ir::Op op) {
  return writer.emitter().graph().node(writer.at(id).value).op == op;
}

std::optional<SoftmaxRows> softmax_rows(const KernelWriter& writer, bool bf16) {
  const ir::Graph& graph = writer.emitter().graph();
  if (writer.outputs().size() != 1) return std::nullopt;
  int probabilities = writer.outputs().front().second;
  if (bf16) {
    if (!is_node(writer, probabilities, ir::Op::cast) ||
        graph.type(writer.at(probabilities).value).dtype != DType::bf16)
      return std::nullopt;
    probabilities = writer.at(probabilities).operands[0];
  }
  if (!is_node(writer, probabilities, ir::Op::div)) return std::nullopt;
  const std::vector<int>& quotient = writer.at(probabilities).operands;
  const int exponential = quotient[0], sum = quotient[1];
  if (!is_node(writer, exponential, ir::Op::exp) || writer.at(sum).kind != Instance::Kind::reduction ||
      !is_node(writer, sum, ir::Op::reduce_sum) || writer.at(sum).operands[0] != exponential)
    return std::nullopt;
  const int difference = writer.at(exponential).operands[0];
  if (!is_node(writer, difference, ir::Op::sub)) return std::nullopt;
  const int elementwise = writer.at(difference).operands[0], maximum = writer.at(difference).operands[1];
  if (writer.at(maximum).kind != Instance::Kind::reduction || !is_node(writer, maximum, ir::Op::reduce_max) ||
      writer.at(maximum).operands[0] != elementwise)
    return std::nullopt;
  // t and what it reads: loads, computations and the scores, never a reduction (t is known per element before
  // any row's end) nor a gather (whose index errors the exact kernel reports); every value f32 or narrower
  // integers and bools, and for bf16 products bf16 too (the scores, and f's roundings as the standard executor's).
  std::set<int> parts;
  bool supported = true;
  std::function<void(int)> collect = [&](int id) {
    if (!parts.insert(id).second) return;
    const Instance& item = writer.at(id);
    if (item.kind == Instance::Kind::reduction || item.kind == Instance::Kind::gather) supported = false;
    const DType dtype = graph.type(item.value).dtype;
    if (dtype == DType::f64 || (is_half_precision(dtype) && !(bf16 && dtype == DType::bf16))) supported = false;
    if (item.kind == Instance::Kind::compute)
      for (int operand : item.operands) collect(operand);
  };
  collect(elementwise);
  if (!supported || graph.type(writer.at(elementwise).value).dtype != DType::f32) return std::nullopt;
  SoftmaxRows rows;
  rows.elementwise = elementwise;
  rows.elementwise_parts.assign(parts.begin(), parts.end());  // instances are created operands first
  return rows;
}

std::string text_of(std::int64_t value) { return std::to_string(value); }

// Blocks of block_rows queries per batch item of m queries.
std::int64_t strips_per_item(std::int64_t m) { return (m + block_rows - 1) / block_rows; }

// "#pragma unroll" and the head of a loop of `variable` over [0, count), at `indent`.
std::string unrolled(const std::string& variable, std::int64_t count, const std::string& indent) {
  return "#pragma unroll\n" + indent + "for (int " + variable + " = 0; " + variable + " < " + text_of(count) + "; ++" +
         variable + ")";
}

}  // namespace

std::string emit_flash_attention_kernel(KernelWriter& writer, KernelLaunch& launch) {
  const KernelEmitter& emitter = writer.emitter();
  const ir::Graph& graph = emitter.graph();
  const auto [first_value, second_value] = writer.attention_products();
  const ir::Node& first = graph.node(first_value);
  const ir::Node& second = graph.node(second_value);
  if (first.attributes.transpose_a || !first.attributes.transpose_b || second.attributes.transpose_a ||
      second.attributes.transpose_b)
    return "";
  const DType dtype = second.type.dtype;
  if (dtype != DType::f32 && dtype != DType::bf16) return "";
  const bool bf16 = dtype == DType::bf16;
  for (ir::ValueId operand : {first.operands[0], first.operands[1], first_value, second.operands[1]})
    if (graph.type(operand).dtype != dtype) return "";
  const Shape& scores = first.type.shape;
  const int rank = scores.rank();
  std::int64_t batch = 1;
  for (int axis = 0; axis + 2 < rank; ++axis) batch *= scores[axis];
  const AttentionOperand queries = attention_operand(writer, first.operands[0], false, batch);
  const AttentionOperand keys = attention_operand(writer, first.operands[1], true, batch);
  const AttentionOperand values = attention_operand(writer, second.operands[1], false, batch);
  const std::int64_t m = scores[rank - 2], n = scores[rank - 1];
  const std::int64_t depth = queries.columns, width = values.columns;
  // Depth per mma: 8 TF32 values, 16 bf16.
  const std::int64_t depth_step = bf16 ? 16 : 8;
  if (m == 0 || n == 0 || batch == 0 || depth == 0 || width == 0) return "";  // the exact kernel's cases
  if (depth % depth_step != 0 || width % 8 != 0 || depth > widest_operand || width > widest_operand) return "";
  if (writer.kernel().reduced_axes != 1) return "";
  const Layout layout =
      emitter.layout(writer.kernel().space.rank() - 1, {writer.output_address(writer.outputs().front().first)});
  if (!layout.middle_sizes.empty() || layout.inner_size != n || layout.rows() != batch * m) return "";
  writer.mark_varying(layout);
  const std::optional<SoftmaxRows> rows = softmax_rows(writer, bf16);
  if (!rows) return "";

  // Keys per tile: 64, or 32 where Q and o take 256 of a thread's registers between them (f32).
  const std::int64_t tile_keys = depth + width <= 128 || bf16 ? 64 : 32;
  const std::string &q = queries.input, &k = keys.input, &v = values.input, out = emitter.output_name(second_value);
  const std::string q_item = text_of(queries.item_stride), k_item = text_of(keys.item_stride),
                    v_item = text_of(values.item_stride);
  const std::string D = text_of(depth), W = text_of(width), N = text_of(n), M = text_of(m), BN = text_of(tile_keys);
  const std::string steps = text_of(depth / depth_step);

  // f at one of the thread's scores: `score` at row `row` (batch item and query) and key `j`, into `t`.
  writer.set_score_value("score");
  std::string element;
  for (int id : rows->elementwise_parts) element += writer.declaration(id, layout, "j", "          ");
  element += "          t = " + writer.at(rows->elementwise).name + ";\n";
  writer.set_score_value("");
  // The element's row (batch item and query), key and score, and the row's coordinates: those f reads.
  std::vector<IndexVariable> variables{{"row", text_of(m) + " * item + rows[e / 2]"},
                                       {"j", "key < " + text_of(n) + " ? key : " + text_of(n - 1)},
                                       {"score", "scores[keys8][e]", "float"}};
  for (IndexVariable& coordinate : writer.row_coordinates(layout)) variables.push_back(std::move(coordinate));
  element = declarations_used_by(variables, element, "          ") + element;

  launch.tensor_core_function = launch.function + (bf16 ? "_bf16" : "_tf32");
  launch.tensor_core_needs_tf32 = !bf16;
  launch.tensor_core_threads = warps_per_block * 32;
  launch.tensor_core_blocks = batch * strips_per_item(m);
  const std::string threads = text_of(launch.tensor_core_threads);

  std::string s;
  s += bf16 ? "\n// The same attention on the tensor cores (bf16 products, f32 sums), launched in its place:\n"
            : "\n// The same attention on the tensor cores (TF32 products, f32 sums), launched while\n"
              "// config::allow_tf32 holds:\n";
  s += "// 128 queries per block, 16 per warp, keys " + BN +
       " at a time, the softmax online (flash_attention_kernel.cpp).\n";
  s += "extern \"C\" __global__ void __launch_bounds__(" + threads + ") " + launch.tensor_core_function + "(" +
       writer.parameters() + ") {\n";
  if (bf16) {
    // K's rows as stored (a word is two depths of one key); V transposed (a word is two keys of one column). Rows
    // 8 values longer than the tile: a warp's reads of a word per lane hit 32 banks.
    s += "  // K's rows of this tile of keys as stored, V's transposed (a column's keys in a row); 0 past the\n";
    s += "  // last key.\n";
    s += "  __shared__ uint16_t key_tile[" + BN + "][" + text_of(depth + 8) + "];\n";
    s += "  __shared__ uint16_t value_tile[" + W + "][" + text_of(tile_keys + 8) + "];\n";
  } else {
    s += "  // K's and V's rows of this tile of keys, rounded to TF32 once for every warp (0 past the last key).\n";
    s += "  __shared__ float key_tile[" + BN + "][" + text_of(depth + 8) + "];\n";
    s += "  __shared__ float value_tile[" + BN + "][" + text_of(width + 4) + "];\n";
  }
  s += "  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n";
  s += "  const int group = lane / 4, quad = lane % 4;  // the mma layout's g and t (prelude.cuh, mma_" +
       std::string(bf16 ? "bf16" : "tf32") + ")\n";
  s += "  for (int64_t strip = blockIdx.x; strip < " + text_of(launch.tensor_core_blocks) + "; strip += gridDim.x) {\n";
  s += "    const int64_t item = strip / " + text_of(strips_per_item(m)) + ";\n";
  s += "    const int64_t query0 = strip % " + text_of(strips_per_item(m)) + " * " + text_of(block_rows) +
       " + warp * 16;  // this warp's first query\n";
  s += "    // This lane's rows: query0 + group and query0 + group + 8 (a row past the end reads the last one's\n";
  s += "    // inputs and is never stored).\n";
  s += "    const int64_t rows[2] = {query0 + group < " + M + " ? query0 + group : " + M + " - 1,\n";
  s += "                             query0 + group + 8 < " + M + " ? query0 + group + 8 : " + M + " - 1};\n";
  if (bf16) {
    s += "    // Q's tile as mma A operands, 16 depths a step: depths 2t, 2t + 1 and 2t + 8, 2t + 9 of each row.\n";
    s += "    unsigned query_words[" + steps + "][4];\n";
    s += unrolled("step", depth / depth_step, "    ") + " {\n";
    s += "      const int64_t column = step * 16 + 2 * quad;\n";
    s += unrolled("half", 2, "      ") + " {\n";
    s += "        const uint16_t* query_row = " + q + " + " + q_item + " * item + " + D + " * rows[half];\n";
    s += "        query_words[step][half] = pack_bf16(query_row[column], query_row[column + 1]);\n";
    s += "        query_words[step][half + 2] = pack_bf16(query_row[column + 8], query_row[column + 9]);\n";
    s += "      }\n    }\n";
  } else {
    s += "    // Q's tile as mma A operands, depth step by step. Depth is summed in any order, so the lane's columns "
         "t\n";
    s += "    // and t + 4 of A are depths 2t and 2t + 1 of the step, the order K's tile is read in below.\n";
    s += "    unsigned query_words[" + steps + "][4];\n";
    s += unrolled("step", depth / depth_step, "    ") + " {\n";
    s += "      const int64_t column = step * 8 + 2 * quad;\n";
    s += unrolled("half", 2, "      ") + " {\n";
    s += "        const float* query_row = " + q + " + " + q_item + " * item + " + D + " * rows[half];\n";
    s += "        query_words[step][half] = to_tf32(query_row[column]);\n";
    s += "        query_words[step][half + 2] = to_tf32(query_row[column + 1]);\n";
    s += "      }\n    }\n";
  }
  s += "    float output[" + text_of(width / 8) + "][4] = {};  // o: this lane's elements of the 16 x " + W +
       " output tile\n";
  s += "    float running_max[2] = {-infinity<float>(), -infinity<float>()};  // m per row, over the keys so far\n";
  s += "    float running_sum[2] = {0.0f, 0.0f};  // l per row: this lane's part (its keys), summed at the end\n";
  s += "    for (int64_t key0 = 0; key0 < " + N + "; key0 += " + BN + ") {\n";
  s += "      __syncthreads();  // every warp done with the previous tile\n";
  s += "      for (int e = threadIdx.x; e < " + text_of(tile_keys * depth) + "; e += " + threads + ") {\n";
  s += "        const int64_t key = key0 + e / " + D + ";\n";
  const std::string key_element = k + "[" + k_item + " * item + " + D + " * key + e % " + D + "]";
  s += "        key_tile[e / " + D + "][e % " + D + "] = key < " + N + " ? " +
       (bf16 ? key_element + " : uint16_t{0}" : "__uint_as_float(to_tf32(" + key_element + ")) : 0.0f") + ";\n";
  s += "      }\n";
  s += "      for (int e = threadIdx.x; e < " + text_of(tile_keys * width) + "; e += " + threads + ") {\n";
  s += "        const int64_t key = key0 + e / " + W + ";\n";
  const std::string value_element = v + "[" + v_item + " * item + " + W + " * key + e % " + W + "]";
  if (bf16)
    s += "        value_tile[e % " + W + "][e / " + W + "] = key < " + N + " ? " + value_element + " : uint16_t{0};\n";
  else
    s += "        value_tile[e / " + W + "][e % " + W + "] = key < " + N + " ? __uint_as_float(to_tf32(" +
         value_element + ")) : 0.0f;\n";
  s += "      }\n";
  s += "      __syncthreads();\n";
  s += "      " + emitter.describe(first_value) + ": 16 x " + BN + " scores, 8 keys per mma\n";
  s += "      float scores[" + text_of(tile_keys / 8) + "][4] = {};\n";
  s += unrolled("keys8", tile_keys / 8, "      ") + "\n";
  s += unrolled("step", depth / depth_step, "        ") + " {\n";
  if (bf16) {
    s += "          const uint16_t* key_row = &key_tile[keys8 * 8 + group][step * 16 + 2 * quad];\n";
    s += "          const unsigned key_words[2] = {pack_bf16(key_row[0], key_row[1]), pack_bf16(key_row[8], "
         "key_row[9])};\n";
    s += "          mma_bf16(scores[keys8], query_words[step], key_words);\n";
  } else {
    s += "          const float* key_row = &key_tile[keys8 * 8 + group][step * 8 + 2 * quad];\n";
    s += "          const unsigned key_words[2] = {__float_as_uint(key_row[0]), __float_as_uint(key_row[1])};\n";
    s += "          mma_tf32(scores[keys8], query_words[step], key_words);\n";
  }
  s += "        }\n";
  s += "      // The row code before its reductions, at each score: element e of keys8 is row rows[e / 2], key\n";
  s += "      // key0 + 8 keys8 + 2 quad + e % 2. Keys past the end are -inf: exp gives them no weight.\n";
  s += "      float tile_max[2] = {-infinity<float>(), -infinity<float>()};\n";
  s += unrolled("keys8", tile_keys / 8, "      ") + "\n";
  s += unrolled("e", 4, "        ") + " {\n";
  s += "          const int64_t key = key0 + keys8 * 8 + 2 * quad + e % 2;\n";
  s += "          float t;  // f at this score\n";
  s += "          {\n" + element + "          }\n";
  s += "          scores[keys8][e] = key < " + N + " ? t : -infinity<float>();\n";
  s += "          tile_max[e / 2] = maximum(tile_max[e / 2], scores[keys8][e]);\n";
  s += "        }\n";
  s += "      // The online softmax: each row's maximum over its four lanes, the rescaling of what came before.\n";
  s += unrolled("half", 2, "      ") + " {\n";
  s += "        tile_max[half] = maximum(tile_max[half], shuffle_xor(tile_max[half], 1));\n";
  s += "        tile_max[half] = maximum(tile_max[half], shuffle_xor(tile_max[half], 2));\n";
  s += "        const float new_max = maximum(running_max[half], tile_max[half]);\n";
  s += "        // 1 while the maximum stays (also at -inf, where exp(-inf - -inf) would be NaN); NaN stays NaN.\n";
  s += "        const float rescale = new_max == running_max[half] ? 1.0f : exp(sub(running_max[half], new_max));\n";
  s += "        running_max[half] = new_max;\n";
  s += "        // Subtracted from the scores: the maximum, or 0 while every score so far is -inf (their exp is 0).\n";
  s += "        tile_max[half] = new_max == -infinity<float>() ? 0.0f : new_max;\n";
  s += "        running_sum[half] = mul(running_sum[half], rescale);\n";
  s += unrolled("columns8", width / 8, "        ") + " {\n";
  s += "          output[columns8][2 * half] = mul(output[columns8][2 * half], rescale);\n";
  s += "          output[columns8][2 * half + 1] = mul(output[columns8][2 * half + 1], rescale);\n";
  s += "        }\n      }\n";
  s += unrolled("keys8", tile_keys / 8, "      ") + "\n";
  s += unrolled("e", 4, "        ") + " {\n";
  s += "          scores[keys8][e] = exp(sub(scores[keys8][e], tile_max[e / 2]));\n";
  s += "          running_sum[e / 2] = add(running_sum[e / 2], scores[keys8][e]);\n";
  s += "        }\n";
  if (bf16) {
    s += "      " + emitter.describe(second_value) + ": o += exp(t - m) V, 16 keys per mma.\n";
    s += "      // The lane's weights of two tiles of 8 keys are A's elements as they lie (keys 2t, 2t + 1 of each,\n";
    s += "      // rows g and g + 8), rounded to bf16; V's transposed tile gives each word two keys of a column.\n";
    s += unrolled("keys16", tile_keys / 16, "      ") + " {\n";
    s += "        const float* low = scores[2 * keys16];\n";
    s += "        const float* high = scores[2 * keys16 + 1];\n";
    s += "        const unsigned weights[4] = {pack_bf16(round_to_bf16(low[0]), round_to_bf16(low[1])),\n";
    s += "                                     pack_bf16(round_to_bf16(low[2]), round_to_bf16(low[3])),\n";
    s += "                                     pack_bf16(round_to_bf16(high[0]), round_to_bf16(high[1])),\n";
    s += "                                     pack_bf16(round_to_bf16(high[2]), round_to_bf16(high[3]))};\n";
    s += unrolled("columns8", width / 8, "        ") + " {\n";
    s += "          const uint16_t* column_keys = &value_tile[columns8 * 8 + group][keys16 * 16 + 2 * quad];\n";
    s += "          const unsigned value_words[2] = {pack_bf16(column_keys[0], column_keys[1]),\n";
    s += "                                           pack_bf16(column_keys[8], column_keys[9])};\n";
    s += "          mma_bf16(output[columns8], weights, value_words);\n";
    s += "        }\n      }\n";
  } else {
    s += "      " + emitter.describe(second_value) + ": o += exp(t - m) V, 8 keys per mma.\n";
    s += "      // The lane's scores are A's elements as they lie (keys 2t and 2t + 1 of the 8 as A's columns t and\n";
    s += "      // t + 4), so V's rows are read in that order.\n";
    s += unrolled("keys8", tile_keys / 8, "      ") + " {\n";
    s += "        const unsigned weights[4] = {to_tf32(scores[keys8][0]), to_tf32(scores[keys8][2]), "
         "to_tf32(scores[keys8][1]), to_tf32(scores[keys8][3])};\n";
    s += unrolled("columns8", width / 8, "        ") + " {\n";
    s += "          const int key = keys8 * 8 + 2 * quad, column = columns8 * 8 + group;\n";
    s += "          const unsigned value_words[2] = {__float_as_uint(value_tile[key][column]),\n";
    s += "                                           __float_as_uint(value_tile[key + 1][column])};\n";
    s += "          mma_tf32(output[columns8], weights, value_words);\n";
    s += "        }\n      }\n";
  }
  s += "    }\n";
  s += "    // l: the four lanes' parts of each row; the output o / l" + std::string(bf16 ? ", rounded to bf16" : "") +
       ".\n";
  s += unrolled("half", 2, "    ") + " {\n";
  s += "      running_sum[half] = add(running_sum[half], shuffle_xor(running_sum[half], 1));\n";
  s += "      running_sum[half] = add(running_sum[half], shuffle_xor(running_sum[half], 2));\n";
  s += "      const int64_t query = query0 + group + 8 * half;\n";
  s += "      if (query >= " + M + ") continue;\n";
  s += "      " + std::string(bf16 ? "uint16_t" : "float") + "* output_row = " + out + " + " + W + " * (" + M +
       " * item + query);\n";
  s += unrolled("columns8", width / 8, "      ") + " {\n";
  const auto stored = [&](const std::string& value) { return bf16 ? "round_to_bf16(" + value + ")" : value; };
  s += "        output_row[columns8 * 8 + 2 * quad] = " + stored("div(output[columns8][2 * half], running_sum[half])") +
       ";\n";
  s += "        output_row[columns8 * 8 + 2 * quad + 1] = " +
       stored("div(output[columns8][2 * half + 1], running_sum[half])") + ";\n";
  s += "      }\n    }\n";
  s += "  }\n}\n";
  return s;
}

}  // namespace kiln::compiler::cuda
