// Reduction kernels: rows of the iteration space (the kept axes) reduced over
// the trailing axes, with the reductions' producers and the row-wise
// consumers in the same kernel. A row of up to 1024 elements is one warp's
// (8 rows per block of 256 threads); a longer one is one block's of 512
// threads. Each reduction is one pass over the row: thread t takes elements
// t, t + P, t + 2P, ... (P threads per row), then warp shuffles and, across
// warps, shared memory combine them in a fixed tree, so the result does not
// depend on timing or on the grid. Values that depend on a reduction
// (x - max in softmax) are computed after its pass; the element outputs in a
// last pass. Where every buffer is read and written contiguously along the
// row, a `_vector` variant gives each thread 16-byte packs of consecutive
// elements instead of single ones.
//
// Short rows (at most row_share_bytes per thread: rows of up to 16384
// floats by block, 1024 by warp) are walked by fully unrolled loops of a
// constant number of steps, and each input that more than one pass reads (x
// in softmax and layer_norm, not gamma or beta) is read from memory once,
// into a per-thread array that the unrolled loops index with constants, so
// it stays in registers (while the arrays fit row_share_bytes): the row
// crosses DRAM once, and later passes do not re-read it through L1/L2.
// What the arrays leave of that budget keeps transcendental values that a
// later pass needs again (exp(x - max) in softmax, used by the sum and by the
// output): computed once per element instead of once per pass. Longer rows
// keep a strided loop and read such inputs once per pass.

#include "compiler/codegen/cuda/kernel_writer.h"
#include "compiler/codegen/cuda/row_threads.h"
#include "compiler/fusion.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler::cuda {
namespace {

// Rows are walked by unrolled loops where this thread's share of the row, in
// the widest type the passes compute, is at most this many bytes (32 floats:
// rows of up to 16384 floats by block, 1024 by warp), and the per-thread row
// arrays hold at most as many bytes in all: 32 of the 128 registers that
// __launch_bounds__(512) leaves each thread. Larger shares spill (ptxas
// hoists the unrolled loads: softmax of f64[_, 1024] by warp spills at 256
// bytes).
constexpr std::int64_t row_share_bytes = 128;

class RowReductionKernel {
 public:
  RowReductionKernel(KernelWriter& writer, KernelLaunch& launch, const RowFrame& frame)
      : writer_(writer), emitter_(writer.emitter()), kernel_(writer.kernel()), launch_(launch), frame_(frame) {}

  std::string emit() {
    std::vector<Linear> extra;
    for (const auto& [value, id] : writer_.outputs()) extra.push_back(writer_.output_address(value));
    layout_ = emitter_.layout(kernel_.space.rank() - kernel_.reduced_axes, extra);
    writer_.mark_varying(layout_);
    for (int id = 0; id < emitter_.instance_count(); ++id)
      if (writer_.at(id).kind == Instance::Kind::reduction) {
        reductions_.push_back(id);
        std::set<int> needed;
        writer_.collect_elements(writer_.at(id).operands[0], needed);
        passes_.push_back(needed);
      }
    std::set<int> last;
    for (const auto& [value, id] : writer_.outputs())
      if (!writer_.is_row_output(value)) writer_.collect_elements(id, last);
    passes_.push_back(last);

    row_length_ = layout_.inner_size * layout_.middle_count();
    const RowThreads threads = row_threads(row_length_);
    by_warp_ = threads.by_warp;
    threads_per_row_ = threads.threads_per_row;
    const std::int64_t rows = layout_.rows();
    launch_.function = "kiln_kernel_" + std::to_string(emitter_.index());
    launch_.threads = threads.block_threads;
    launch_.blocks = std::max<std::int64_t>(1, (rows + rows_per_block() - 1) / rows_per_block());
    launch_.parameter_count = writer_.parameter_count();
    plan_row_walk();
    std::string text = kernel();
    // An attention kernel's row code reads and writes shared memory, not packs of memory.
    width_ = kernel_.kind == KernelKind::attention ? 1 : vector_width();
    if (width_ > 1) {
      vector_ = true;
      launch_.vector_function = launch_.function + "_vector";
      launch_.vector_blocks = launch_.blocks;
      plan_row_walk();
      text += "\n" + kernel();
    }
    return text;
  }

 private:
  std::int64_t rows_per_block() const { return row_threads(row_length_).rows_per_block; }

  // What a thread steps over along the row: elements, or packs of width_ in
  // the vector variant.
  std::int64_t row_items() const { return vector_ ? row_length_ / width_ : row_length_; }
  std::string item_index() const { return vector_ ? "pack" : "position"; }

  // For the variant about to be emitted: whether the row is walked in steps_
  // unrolled steps (0: a strided loop), and which loads stay in registers
  // across the passes -- the varying ones that more than one pass reads, in
  // instance order while they fit row_share_bytes.
  void plan_row_walk() {
    steps_ = 0;
    in_registers_.clear();
    computed_in_registers_.clear();
    passes_to_emit_ = passes_;
    std::int64_t steps = (row_items() + threads_per_row_ - 1) / threads_per_row_;
    std::int64_t elements = steps * (vector_ ? width_ : 1);
    std::size_t widest = 1;
    for (const std::set<int>& pass : passes_)
      for (int id : pass) widest = std::max(widest, size_of(emitter_.graph().type(writer_.at(id).value).dtype));
    if (steps == 0 || elements * static_cast<std::int64_t>(widest) > row_share_bytes) return;
    steps_ = static_cast<int>(steps);
    std::int64_t bytes = 0;
    for (int id = 0; id < emitter_.instance_count(); ++id) {
      const Instance& item = writer_.at(id);
      if (item.kind != Instance::Kind::load || !writer_.varying(id)) continue;
      std::int64_t size = elements * static_cast<std::int64_t>(size_of(emitter_.graph().type(item.value).dtype));
      if (passes_reading(id) < 2 || bytes + size > row_share_bytes) continue;
      bytes += size;
      in_registers_.insert(id);
    }
    // Then, in what is left, transcendental values that a later pass needs
    // again (exp(x - max) in softmax): computed once, kept for that pass.
    for (int id = 0; id < emitter_.instance_count(); ++id) {
      const Instance& item = writer_.at(id);
      if (item.kind != Instance::Kind::compute || !writer_.varying(id) ||
          !ir::is_transcendental_op(emitter_.graph().node(item.value).op))
        continue;
      std::int64_t size = elements * static_cast<std::int64_t>(size_of(emitter_.graph().type(item.value).dtype));
      if (passes_reading(id) < 2 || bytes + size > row_share_bytes) continue;
      bytes += size;
      computed_in_registers_.insert(id);
    }
    // The passes after the one that computes a kept value read it instead of
    // computing it, and so need none of its operands for it.
    for (std::size_t pass = 0; pass < passes_.size(); ++pass) {
      std::set<int> kept;
      for (int id : computed_in_registers_)
        if (first_pass(id) < static_cast<int>(pass)) kept.insert(id);
      if (kept.empty()) continue;
      std::set<int> needed;
      if (pass < reductions_.size()) collect_until(writer_.at(reductions_[pass]).operands[0], kept, needed);
      else
        for (const auto& [value, id] : element_outputs()) collect_until(id, kept, needed);
      passes_to_emit_[pass] = needed;
    }
    // A kept value whose readers in later passes are all kept values too
    // (erf in cos(erf(x)), where the cos is kept) is read by no later pass:
    // it is computed where it is needed and not kept.
    for (auto kept = computed_in_registers_.begin(); kept != computed_in_registers_.end();) {
      bool read_later = false;
      for (std::size_t pass = static_cast<std::size_t>(first_pass(*kept)) + 1; pass < passes_to_emit_.size(); ++pass)
        read_later = read_later || passes_to_emit_[pass].count(*kept) > 0;
      kept = read_later ? std::next(kept) : computed_in_registers_.erase(kept);
    }
  }

  int passes_reading(int id) const {
    return static_cast<int>(
        std::count_if(passes_.begin(), passes_.end(), [&](const std::set<int>& pass) { return pass.count(id) > 0; }));
  }

  // The first pass that computes `id`.
  int first_pass(int id) const {
    for (std::size_t pass = 0; pass < passes_.size(); ++pass)
      if (passes_[pass].count(id)) return static_cast<int>(pass);
    return -1;
  }

  // KernelWriter::collect_elements, stopping at the values in `kept` (read,
  // not computed).
  void collect_until(int root, const std::set<int>& kept, std::set<int>& needed) const {
    if (!writer_.varying(root) || needed.count(root)) return;
    needed.insert(root);
    if (kept.count(root)) return;
    for (int operand : writer_.at(root).operands) collect_until(operand, kept, needed);
  }

  // A kept value's array element for this thread's step (and pack element).
  std::string kept_element(int id) const {
    return "row_" + writer_.at(id).name + (vector_ ? "[step * " + std::to_string(width_) + " + element]" : "[step]");
  }

  // The declaration of needed value `id` in `pass`: from its row array when
  // kept and computed by an earlier pass; else computed (and, in the pass
  // that first computes a kept value, stored to its array).
  std::string element_value(int id, int pass, const std::string& indent) const {
    if (computed_in_registers_.count(id) && first_pass(id) < pass)
      return indent + "const " + writer_.type(id) + " " + writer_.at(id).name + " = " + kept_element(id) + ";\n";
    std::string text = writer_.declaration(id, layout_, "j", indent);
    if (computed_in_registers_.count(id)) text += indent + kept_element(id) + " = " + writer_.at(id).name + ";\n";
    return text;
  }

  // A loop over this thread's items of the row, named item_index(), around
  // `body` and the declarations of `coordinates` it reads: a strided loop,
  // or for short rows one unrolled over steps_ (`step` and the row arrays'
  // indices are constants once unrolled). Nothing for an empty row, whose
  // coordinates would divide by a zero size.
  std::string thread_loop(const std::vector<IndexVariable>& coordinates, const std::string& body) const {
    if (row_items() == 0) return "";
    std::string index = item_index(), items = std::to_string(row_items());
    std::string stride = std::to_string(threads_per_row_);
    std::string inner = declarations_used_by(coordinates, body, "      ") + body;
    if (steps_ == 0)
      return "    for (int64_t " + index + " = lane; " + index + " < " + items + "; " + index + " += " + stride +
             ") {\n" + inner + "    }\n";
    if (row_items() % threads_per_row_ != 0)
      inner = "      if (" + index + " >= " + items +
              ") continue;  // this thread's last step is past the row's end\n" + inner;
    return "#pragma unroll\n    for (int step = 0; step < " + std::to_string(steps_) + "; ++step) {\n" +
           declarations_used_by({{index, "lane + int64_t{" + stride + "} * step"}}, inner, "      ") + inner +
           "    }\n";
  }

  // The coordinates of this thread's item: j (and the middle coordinates d*)
  // of the element at `position`, or j0, the first element of `pack`.
  std::vector<IndexVariable> item_coordinates() const {
    if (vector_) return {{"j0", "pack * " + std::to_string(width_)}};
    if (layout_.middle_sizes.empty()) return {{"j", "position"}};
    std::string inner = std::to_string(layout_.inner_size);
    std::vector<IndexVariable> variables = {{"middle", "position / " + inner}, {"j", "position - middle * " + inner}};
    for (IndexVariable& coordinate : writer_.middle_coordinates(layout_)) variables.push_back(std::move(coordinate));
    return variables;
  }

  // The first step of a short row: this thread's elements of the loads in
  // in_registers_, read from memory into arrays row_<name>[steps_] once for
  // all the passes.
  std::string register_loads() const {
    std::string kept;
    if (!computed_in_registers_.empty()) {
      kept = "    // Transcendental values a later pass needs again, computed once and kept here.\n";
      for (int id : computed_in_registers_)
        kept += "    " + writer_.type(id) + " row_" + writer_.at(id).name + "[" +
                std::to_string(steps_ * (vector_ ? width_ : 1)) + "];\n";
    }
    if (in_registers_.empty()) return kept;
    std::string steps = std::to_string(steps_), width = std::to_string(width_);
    std::string text = "    // This thread's elements of the row: step s holds " + item_index() + " lane + " +
                       std::to_string(threads_per_row_) + " * s" + (vector_ ? " (a pack of " + width + ")" : "") +
                       ".\n    // Read from memory once, here; every pass below reads these arrays, which stay in\n"
                       "    // registers: the loops are unrolled, so each index is a constant.\n";
    for (int id : in_registers_) {
      std::string type = vector_ ? "Pack<" + writer_.type(id) + ", " + width + ">" : writer_.type(id);
      text += "    " + type + " row_" + writer_.at(id).name + "[" + steps + "];\n";
    }
    std::string loads;
    for (int id : in_registers_) {
      const Instance& item = writer_.at(id);
      std::string input = emitter_.input_name(item.buffer);
      loads +=
          "      row_" + item.name + "[step] = " +
          (vector_ ? "load_pack<" + width + ">(" + input + " + " + writer_.offset(item.address, layout_, "j0") + ")"
                   : input + "[" + writer_.offset(item.address, layout_, "j") + "]") +
          ";\n";
    }
    return text + thread_loop(item_coordinates(), loads) + kept;
  }

  // The pass after which a per-row value can be computed (0: at the row's start).
  int ready_phase(int id) const {
    const Instance& item = writer_.at(id);
    if (item.kind == Instance::Kind::reduction)
      return static_cast<int>(std::find(reductions_.begin(), reductions_.end(), id) - reductions_.begin()) + 1;
    int ready = 0;
    for (int operand : item.operands) ready = std::max(ready, ready_phase(operand));
    return ready;
  }

  // The per-row values ready after pass `phase`. An empty row has no
  // passes, so then only those that the row outputs read are declared.
  std::string row_values(int phase) const {
    std::set<int> stored;
    if (row_items() == 0)
      for (const auto& [value, id] : writer_.outputs())
        if (writer_.is_row_output(value)) collect_row_value(id, stored);
    std::string text;
    for (int id = 0; id < emitter_.instance_count(); ++id) {
      const Instance& item = writer_.at(id);
      if (writer_.varying(id) || item.kind == Instance::Kind::reduction || ready_phase(id) != phase) continue;
      if (row_items() == 0 && !stored.count(id)) continue;
      text += writer_.declaration(id, layout_, "j", "    ");
    }
    return text;
  }

  // `root` and the per-row values it reads, up to the reductions.
  void collect_row_value(int root, std::set<int>& values) const {
    if (!values.insert(root).second || writer_.at(root).kind == Instance::Kind::reduction) return;
    for (int operand : writer_.at(root).operands) collect_row_value(operand, values);
  }

  // The loop of one pass over the row: this thread's elements, the values
  // `needed` at each, then `tail` (an accumulation), or for the last pass
  // (`tail` empty) the stores of the element outputs.
  std::string row_loop(int pass, const std::string& tail) const {
    const std::set<int>& needed = passes_to_emit_[static_cast<std::size_t>(pass)];
    if (vector_) return vector_row_loop(pass, tail);
    std::string body;
    for (int id : needed)
      body += in_registers_.count(id) ? "      const " + writer_.type(id) + " " + writer_.at(id).name + " = row_" +
                                            writer_.at(id).name + "[step];\n"
                                      : element_value(id, pass, "      ");
    if (tail.empty())
      for (const auto& [value, id] : element_outputs()) {
        // An attention kernel's row result stays in shared memory, where the second product reads it: as f32,
        // a bf16 result widened (exactly).
        if (kernel_.kind == KernelKind::attention) {
          const bool bf16 = emitter_.graph().type(value).dtype == DType::bf16;
          const std::string& name = writer_.at(id).name;
          body += "      " + writer_.scores_row() + "[j] = " + (bf16 ? "widen_bf16(" + name + ")" : name) + ";\n";
          continue;
        }
        body += "      " + emitter_.output_name(value) + "[" +
                writer_.offset(writer_.output_address(value), layout_, "j") + "] = " + writer_.at(id).name + ";\n";
      }
    return thread_loop(item_coordinates(), body + tail);
  }

  // row_loop over packs of width_ elements (no middle loops here).
  std::string vector_row_loop(int pass, const std::string& tail) const {
    const std::set<int>& needed = passes_to_emit_[static_cast<std::size_t>(pass)];
    std::string width = std::to_string(width_);
    std::string text;
    std::set<int> from_packs;
    for (int id : needed) {
      const Instance& item = writer_.at(id);
      if (item.kind != Instance::Kind::load || emitter_.inner_coefficient(item.address, layout_) == 0) continue;
      from_packs.insert(id);
      text += "      const Pack<" + writer_.type(id) + ", " + width + "> pack_" + item.name + " = " +
              (in_registers_.count(id) ? "row_" + item.name + "[step]"
                                       : "load_pack<" + width + ">(" + emitter_.input_name(item.buffer) + " + " +
                                             writer_.offset(item.address, layout_, "j0") + ")") +
              ";\n";
    }
    if (tail.empty())
      for (const auto& [value, id] : element_outputs())
        text += "      Pack<" + emitter_.storage_type(value) + ", " + width + "> pack_" + emitter_.output_name(value) +
                ";\n";
    std::string element_code;
    for (int id : needed) {
      if (from_packs.count(id))
        element_code += "        const " + writer_.type(id) + " " + writer_.at(id).name + " = pack_" +
                        writer_.at(id).name + ".value[element];\n";
      else
        element_code += element_value(id, pass, "        ");
    }
    if (tail.empty())
      for (const auto& [value, id] : element_outputs())
        element_code +=
            "        pack_" + emitter_.output_name(value) + ".value[element] = " + writer_.at(id).name + ";\n";
    else
      element_code += "  " + tail;
    text += "#pragma unroll\n      for (int element = 0; element < " + width + "; ++element) {\n";
    text += declarations_used_by({{"j", "j0 + element"}}, element_code, "        ") + element_code + "      }\n";
    if (tail.empty())
      for (const auto& [value, id] : element_outputs())
        text += "      store_pack<" + width + ">(" + emitter_.output_name(value) + " + " +
                writer_.offset(writer_.output_address(value), layout_, "j0") + ", pack_" + emitter_.output_name(value) +
                ");\n";
    return thread_loop(item_coordinates(), text);
  }

  std::vector<std::pair<ir::ValueId, int>> element_outputs() const {
    std::vector<std::pair<ir::ValueId, int>> outputs;
    for (const auto& [value, id] : writer_.outputs())
      if (!writer_.is_row_output(value)) outputs.emplace_back(value, id);
    return outputs;
  }

  // Elements per 16-byte pack, or 1 when some buffer is not read or written
  // contiguously along the row, or rows do not split into whole aligned packs.
  int vector_width() const {
    if (!layout_.middle_sizes.empty() || layout_.inner_axis < 0) return 1;
    std::vector<std::pair<Linear, DType>> streams;
    for (const std::set<int>& pass : passes_)
      for (int id : pass) {
        const Instance& item = writer_.at(id);
        if (item.kind == Instance::Kind::load && emitter_.inner_coefficient(item.address, layout_) != 0)
          streams.push_back(
              {item.address, emitter_.graph().type(kernel_.inputs[static_cast<std::size_t>(item.buffer)]).dtype});
      }
    for (const auto& [value, id] : element_outputs())
      streams.push_back({writer_.output_address(value), emitter_.graph().type(value).dtype});
    std::size_t widest = 0;
    for (const auto& [linear, dtype] : streams) {
      if (emitter_.inner_coefficient(linear, layout_) != 1) return 1;
      widest = std::max(widest, size_of(dtype));
    }
    if (widest == 0) return 1;
    int width = static_cast<int>(16 / widest);
    if (width < 2 || row_length_ == 0 || layout_.rows() == 0 || row_length_ % width != 0) return 1;
    for (const auto& [linear, dtype] : streams) {
      if (linear.offset % width != 0) return 1;
      for (int axis : layout_.outer_axes)
        if (linear.coefficients[static_cast<std::size_t>(axis)] % width != 0) return 1;
    }
    return width;
  }

  std::string reduction_pass(std::size_t k) const {
    const Instance& reduction = writer_.at(reductions_[k]);
    const ir::Node& node = emitter_.graph().node(reduction.value);
    ReductionInfo info = reduction_info(node);
    std::string type = writer_.type(reductions_[k]), accumulator = "accumulator" + std::to_string(k);
    std::string text = "    " + emitter_.describe(reduction.value) + "\n";
    text += "    " + type + " " + accumulator + " = " + info.identity + ";\n";
    text += row_loop(static_cast<int>(k), "      " + accumulator + " = " + info.combine + "(" + accumulator + ", " +
                                     writer_.at(reduction.operands[0]).name + ");\n");
    std::string combined = by_warp_ ? "warp_reduce(" + accumulator + ", " + info.combine + ")"
                                    : "block_reduce<" + std::to_string(row_block_threads) + ">(" + accumulator + ", " +
                                          info.identity + ", shared" + std::to_string(k) + ", " + info.combine + ")";
    if (node.op == ir::Op::reduce_mean)
      combined = "div(" + combined + ", splat<" + type + ">(" + std::to_string(row_length_) + "))";
    return text + "    const " + type + " " + reduction.name + " = " + combined + ";\n";
  }

  std::string kernel() const {
    std::string threads = std::to_string(launch_.threads);
    std::string text = "extern \"C\" __global__ void __launch_bounds__(" + threads + ") " + launch_.function +
                       (vector_ ? "_vector(" : "(") + writer_.parameters() + ") {\n";
    // No row loop: its coordinates would divide by a zero size.
    if (layout_.rows() == 0) return text + "  // The space " + kernel_.space.to_string() + " has no rows.\n}\n";
    std::string row = frame_.before + register_loads() + row_values(0);
    for (std::size_t k = 0; k < reductions_.size(); ++k) {
      row += reduction_pass(k);
      row += row_values(static_cast<int>(k) + 1);
    }
    if (!element_outputs().empty() && row_items() > 0)
      row += "    // The element outputs.\n" + row_loop(static_cast<int>(passes_.size()) - 1, "");
    for (const auto& [value, id] : writer_.outputs())
      if (writer_.is_row_output(value))
        row += "    if (lane == 0) " + emitter_.output_name(value) + "[" +
               writer_.offset(writer_.output_address(value), layout_, "j") + "] = " + writer_.at(id).name + ";\n";
    row += frame_.after;
    std::vector<IndexVariable> row_variables = writer_.row_coordinates(layout_);
    row_variables.insert(row_variables.end(), frame_.variables.begin(), frame_.variables.end());
    row = declarations_used_by(row_variables, row, "    ") + row;
    // The thread's place in its row (unused when the row is empty and
    // nothing is stored per row).
    const IndexVariable lane{"lane", by_warp_ ? "threadIdx.x % 32" : "threadIdx.x", "int"};
    if (by_warp_) {
      std::string per_block = std::to_string(rows_per_block());
      text += "  // One warp per row of " + std::to_string(row_length_) + " elements.\n" + frame_.shared;
      text += declarations_used_by({lane}, row, "  ");
      text += "  for (int64_t row = blockIdx.x * int64_t{" + per_block + "} + threadIdx.x / 32; row < " +
              std::to_string(layout_.rows()) + "; row += gridDim.x * int64_t{" + per_block + "}) {\n";
    } else {
      text += "  // One block per row of " + std::to_string(row_length_) + " elements.\n" + frame_.shared;
      for (std::size_t k = 0; k < reductions_.size(); ++k)
        text += "  __shared__ " + writer_.type(reductions_[k]) + " shared" + std::to_string(k) + "[" +
                std::to_string(row_block_threads / 32) + "];\n";
      text += declarations_used_by({lane}, row, "  ");
      text += "  for (int64_t row = blockIdx.x; row < " + std::to_string(layout_.rows()) + "; row += gridDim.x) {\n";
    }
    return text + row + "  }\n}\n";
  }

  KernelWriter& writer_;
  KernelEmitter& emitter_;
  const FusedKernel& kernel_;
  KernelLaunch& launch_;
  const RowFrame& frame_;
  Layout layout_;
  std::vector<int> reductions_;        // instance ids, in creation (dependency) order
  std::vector<std::set<int>> passes_;  // per reduction, then the element outputs: the varying values computed
  std::int64_t row_length_ = 1;
  bool by_warp_ = true;
  int threads_per_row_ = 32;
  int width_ = 1;               // elements per pack of the vector variant
  bool vector_ = false;         // emitting the vector variant
  int steps_ = 0;               // this variant's unrolled steps per row (0: a strided loop)
  std::set<int> in_registers_;  // loads read once per row into row_<name>[steps_]
  std::set<int> computed_in_registers_;  // transcendental values computed once per row into row_<name>[]
  std::vector<std::set<int>> passes_to_emit_;  // passes_, reading kept values instead of computing them
};

}  // namespace

std::string emit_reduction_kernel(KernelWriter& writer, KernelLaunch& launch, const RowFrame& frame) {
  return RowReductionKernel(writer, launch, frame).emit();
}

}  // namespace kiln::compiler::cuda
