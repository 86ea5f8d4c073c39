// Loop kernels and the epilogue kernels of gemm kernels: every thread
// computes whole elements of the iteration space in a grid-stride loop. The
// `_vector` variant gives each thread a pack of 16 bytes of consecutive
// elements of one row (lanes of one 16-byte load or store per contiguous
// buffer); the executable launches it when every buffer is 16-byte aligned.
// A gemm kernel's reductions, and those of a reduction kernel over its
// whole space (is_grid_reduction), are grid reductions: per-thread accumulators,
// a block reduction, one partial per block, and the last block to finish
// combines the partials in block order.

#include "compiler/codegen/cuda/kernel_writer.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler::cuda {
namespace {

constexpr int block_threads = 256;
// The fixed grid of a gemm kernel with reductions: enough blocks to fill an
// H100/H200 (132 multiprocessors) several times, few enough partials that
// one block combines them quickly. Fixed, so the summation order (and the
// result) is the same on every GPU and in every run.
constexpr std::int64_t reduction_blocks = 1024;
// Bytes of loads a thread of a vector variant should have in flight: two
// 16-byte packs (vector_rounds).
constexpr int bytes_in_flight = 32;

class ElementKernel {
 public:
  ElementKernel(KernelWriter& writer, KernelLaunch& launch)
      : writer_(writer), emitter_(writer.emitter()), kernel_(writer.kernel()), launch_(launch) {}

  std::string emit() {
    const ir::Graph& graph = emitter_.graph();
    if (kernel_.kind == KernelKind::gemm) {
      layout_ = emitter_.product_rows();  // cuBLAS writes the product densely in the space's shape
    } else {
      std::vector<Linear> extra;
      for (const auto& [value, id] : writer_.outputs()) extra.push_back(writer_.output_address(value));
      const std::vector<Linear> padded = emitter_.padding_axes();  // padding read in place: its axes start groups
      extra.insert(extra.end(), padded.begin(), padded.end());
      layout_ = emitter_.layout(-1, extra);
    }
    for (const auto& [value, id] : writer_.outputs()) {
      const Instance& item = writer_.at(id);
      // cuBLAS writes an f32 product itself; a shape op of it that moves nothing
      // (a reversed slice of a size-1 axis) is an element output, and so is a
      // 16-bit product (cuBLAS's f32 sums, rounded here).
      if (item.kind == Instance::Kind::tile && graph.node(value).op == ir::Op::matmul &&
          !is_half_precision(graph.node(value).type.dtype))
        continue;
      if (item.kind == Instance::Kind::reduction) {
        if (kernel_.kind == KernelKind::loop)
          throw CompileError(std::string(ir::name(graph.node(value).op)), "a reduction in a loop kernel",
                             graph.node(value).location);
        reductions_.push_back(id);
        reduction_outputs_.push_back(value);
        collect(item.operands[0]);
      } else {
        element_outputs_.emplace_back(value, id);
        collect(id);
      }
    }
    launch_.function = "kiln_kernel_" + std::to_string(emitter_.index());
    launch_.threads = block_threads;
    launch_.parameter_count = writer_.parameter_count();
    if (needed_.empty() && reductions_.empty()) {
      launch_.function.clear();  // a gemm kernel whose only output is the product: cuBLAS alone
      return "// (no kernel: cuBLAS writes the product, which is the only output)\n";
    }
    total_ = kernel_.space.numel();
    width_ = vector_width();
    launch_.blocks = std::max<std::int64_t>(1, (total_ + block_threads - 1) / block_threads);
    if (!reductions_.empty()) {
      launch_.blocks = std::min(launch_.blocks, reduction_blocks);
      launch_.fixed_grid = true;
    }
    std::string text = globals();
    text += kernel(false);
    if (width_ > 1) {
      launch_.vector_function = launch_.function + "_vector";
      std::int64_t packs = total_ / width_;
      const std::int64_t per_block = std::int64_t{block_threads} * packs_per_round(pack_sources().size());
      launch_.vector_blocks =
          launch_.fixed_grid ? launch_.blocks : std::max<std::int64_t>(1, (packs + per_block - 1) / per_block);
      text += "\n" + kernel(true);
    }
    return text;
  }

 private:
  void collect(int root) {
    if (needed_.count(root)) return;
    const Instance& item = writer_.at(root);
    if (item.kind == Instance::Kind::reduction)
      throw CompileError(std::string(ir::name(emitter_.graph().node(item.value).op)),
                         "an element of this kernel depends on its own reduction",
                         emitter_.graph().node(item.value).location);
    needed_.insert(root);
    for (int operand : writer_.at(root).operands) collect(operand);
  }

  std::int64_t inner_step(const Linear& linear) const { return emitter_.inner_coefficient(linear, layout_); }

  // True when `linear` starts every pack at a multiple of `width` elements.
  bool pack_aligned(const Linear& linear, int width) const {
    if (linear.offset % width != 0) return false;
    for (int axis : layout_.outer_axes)
      if (linear.coefficients[static_cast<std::size_t>(axis)] % width != 0) return false;
    return true;
  }

  // Elements per 16-byte pack (of the widest element type read or written
  // along the row), or 1 when the kernel cannot move whole packs: a buffer
  // read with a stride, rows not a multiple of the pack, a pack straddling
  // rows or starting unaligned.
  int vector_width() const {
    if (layout_.inner_axis < 0 || !layout_.middle_sizes.empty() || total_ == 0) return 1;
    std::vector<std::pair<Linear, DType>> streams;
    for (int id : needed_) {
      const Instance& item = writer_.at(id);
      if (!item.bounds.empty()) return 1;  // a padded input read in place: element by element, each checked
      if (item.kind == Instance::Kind::tile) {
        // A 16-bit product is rounded from the f32 sums as it is read: element by element.
        if (is_half_precision(emitter_.graph().type(item.value).dtype)) return 1;
        streams.push_back({writer_.product_address(), DType::f32});
      }
      if (item.kind != Instance::Kind::load || inner_step(item.address) == 0) continue;
      streams.push_back({item.address, emitter_.graph().type(kernel_.inputs[static_cast<std::size_t>(item.buffer)]).dtype});
    }
    for (const auto& [value, id] : element_outputs_)
      streams.push_back({writer_.output_address(value), emitter_.graph().type(value).dtype});
    std::size_t widest = 0;
    for (const auto& [linear, dtype] : streams) {
      if (inner_step(linear) != 1) return 1;
      widest = std::max(widest, size_of(dtype));
    }
    if (widest == 0) return 1;
    int width = static_cast<int>(16 / widest);
    if (width < 2 || layout_.inner_size % width != 0) return 1;
    for (const auto& [linear, dtype] : streams)
      if (!pack_aligned(linear, width)) return 1;
    return width;
  }

  std::string partials_name(std::size_t k) const {
    return "kernel_" + std::to_string(emitter_.index()) + "_partials" + std::to_string(k);
  }
  std::string done_name() const { return "kernel_" + std::to_string(emitter_.index()) + "_blocks_done"; }

  // Module-global state of a grid reduction: zero when the module loads;
  // the last block resets the counter. Launches of one module queue on
  // one stream, so they never overlap.
  std::string globals() const {
    if (reductions_.empty()) return "";
    std::string text;
    for (std::size_t k = 0; k < reductions_.size(); ++k)
      text += "__device__ " + writer_.type(reductions_[k]) + " " + partials_name(k) + "[" +
              std::to_string(launch_.blocks) + "];  // one partial result per block\n";
    return text + "__device__ unsigned int " + done_name() + " = 0;  // blocks that stored their partials\n\n";
  }

  std::string kernel(bool vector) const {
    std::string function = launch_.function + (vector ? "_vector" : "");
    std::string text = "extern \"C\" __global__ void __launch_bounds__(" + std::to_string(block_threads) + ") " +
                       function + "(" + writer_.parameters() + ") {\n";
    for (std::size_t k = 0; k < reductions_.size(); ++k) {
      const ir::Node& node = emitter_.graph().node(writer_.at(reductions_[k]).value);
      text += "  " + writer_.type(reductions_[k]) + " accumulator" + std::to_string(k) + " = " +
              reduction_info(node).identity + ";\n";
    }
    if (total_ == 0) {
      // No element loop: its coordinates would divide by a zero size.
      text += "  // The space " + kernel_.space.to_string() + " has no elements.\n";
    } else if (vector) {
      text += vector_rounds();
    } else {
      std::string step = std::to_string(block_threads);
      text += "  for (int64_t element = blockIdx.x * int64_t{" + step + "} + threadIdx.x; element < " +
              std::to_string(total_) + "; element += gridDim.x * int64_t{" + step + "}) {\n";
      text += with_coordinates(false, element_body("    ", false), "    ") + "  }\n";
    }
    text += grid_reduction();
    return text + "}\n";
  }

  // `code` after the declarations it reads of the row coordinates and `j`
  // (or `j0`, the first element of pack `pack`) of `element` (the scalar
  // kernel's loop variable).
  std::string with_coordinates(bool vector, const std::string& code, const std::string& indent) const {
    std::string inner = vector ? "j0" : "j";
    std::vector<IndexVariable> variables;
    if (vector) variables.push_back({"element", "pack * " + std::to_string(width_)});
    if (layout_.outer_sizes.empty()) {
      variables.push_back({inner, "element"});
    } else {
      std::string size = std::to_string(layout_.inner_size);
      variables.push_back({"row", "element / " + size});
      variables.push_back({inner, "element - row * " + size});
      for (IndexVariable& coordinate : writer_.row_coordinates(layout_)) variables.push_back(std::move(coordinate));
    }
    return declarations_used_by(variables, code, indent) + code;
  }

  // Declarations of the needed values at element `j`, then the stores and
  // accumulations.
  std::string element_body(const std::string& indent, bool vector, const std::set<int>& from_packs = {}) const {
    std::string text;
    for (int id : needed_) {
      if (from_packs.count(id))
        text += indent + "const " + writer_.type(id) + " " + writer_.at(id).name + " = pack_" + writer_.at(id).name +
                ".value[lane];\n";
      else
        text += writer_.declaration(id, layout_, "j", indent);
    }
    for (const auto& [value, id] : element_outputs_) {
      if (vector)
        text += indent + "pack_" + emitter_.output_name(value) + ".value[lane] = " + writer_.at(id).name + ";\n";
      else
        text += indent + emitter_.output_name(value) + "[" + writer_.offset(writer_.output_address(value), layout_, "j") +
                "] = " + writer_.at(id).name + ";\n";
    }
    for (std::size_t k = 0; k < reductions_.size(); ++k) {
      const ir::Node& node = emitter_.graph().node(writer_.at(reductions_[k]).value);
      std::string accumulator = "accumulator" + std::to_string(k);
      text += indent + accumulator + " = " + reduction_info(node).combine + "(" + accumulator + ", " +
              writer_.at(writer_.at(reductions_[k]).operands[0]).name + ");\n";
    }
    return text;
  }

  // The vector variant's grid-stride loop, in rounds of packs_per_round
  // packs per thread (a grid's width apart): the first loop of a round loads
  // every pack it reads, the second computes and stores them. Issuing all
  // of a round's loads before using any keeps packs_per_round x 16 bytes per
  // thread in flight: a GPU hides memory latency only with many bytes
  // outstanding, and one 16-byte pack per thread does not fill an H100/H200's
  // memory pipeline (its compiler does not hoist the next pack's load above
  // this pack's store by itself).
  std::string vector_rounds() const {
    const std::vector<std::pair<int, std::string>> sources = pack_sources();
    const int round_packs = packs_per_round(sources.size());
    const std::string width = std::to_string(width_), rounds = std::to_string(round_packs);
    const std::string items = std::to_string(total_ / width_);
    if (round_packs == 1) return vector_loop(sources);
    auto round_loop = [&](const std::string& body) {
      // (Not `round`: that is an op's function in the prelude.)
      return "#pragma unroll\n    for (int in_round = 0; in_round < " + rounds + "; ++in_round) {\n" +
             "      const int64_t pack = first + in_round * stride;\n      if (pack >= " + items + ") break;\n" +
             with_coordinates(true, body, "      ") + "    }\n";
    };
    std::string text = "  // Rounds of " + rounds + " packs of " + width + " per thread, a grid's width apart: all of a "
                       "round's loads are issued\n  // before any is used, to keep enough memory traffic in flight.\n";
    text += "  const int64_t stride = gridDim.x * int64_t{" + std::to_string(block_threads) + "};\n";
    text += "  for (int64_t first = blockIdx.x * int64_t{" + std::to_string(block_threads) + "} + threadIdx.x; first < " +
            items + "; first += " + rounds + " * stride) {\n";
    std::set<int> from_packs;
    if (!sources.empty()) {
      for (const auto& [id, address] : sources)
        text += "    Pack<" + writer_.type(id) + ", " + width + "> loaded_" + writer_.at(id).name + "[" + rounds + "];\n";
      std::string loads;
      for (const auto& [id, address] : sources) {
        loads += "      loaded_" + writer_.at(id).name + "[in_round] = load_pack<" + width + ">(" + address + ");\n";
        from_packs.insert(id);
      }
      text += round_loop(loads);
    }
    std::string body;
    for (const auto& [id, address] : sources)
      body += "      const Pack<" + writer_.type(id) + ", " + width + "> pack_" + writer_.at(id).name + " = loaded_" +
              writer_.at(id).name + "[in_round];\n";
    text += round_loop(body + pack_body("      ", from_packs));
    return text + "  }\n";
  }

  // Instances read as packs, with the address of each one's pack at j0.
  std::vector<std::pair<int, std::string>> pack_sources() const {
    std::vector<std::pair<int, std::string>> sources;
    for (int id : needed_) {
      const Instance& item = writer_.at(id);
      if (item.kind == Instance::Kind::tile)
        sources.emplace_back(id, "product + " + writer_.offset(writer_.product_address(), layout_, "j0"));
      else if (item.kind == Instance::Kind::load && inner_step(item.address) != 0)
        sources.emplace_back(id, emitter_.input_name(item.buffer) + " + " + writer_.offset(item.address, layout_, "j0"));
    }
    return sources;
  }

  // Packs per thread per round: enough for bytes_in_flight of loads. A
  // kernel reading two or more packs per element (Adam: four) has them in
  // flight already, and more rounds would only cost registers (Adam's rise
  // from 48 to 108 with two rounds: a quarter of the threads resident).
  static int packs_per_round(std::size_t loads) {
    return std::max(1, bytes_in_flight / (16 * std::max(1, static_cast<int>(loads))));
  }

  // One pack per thread per iteration: loads, computation, stores.
  std::string vector_loop(const std::vector<std::pair<int, std::string>>& sources) const {
    const std::string width = std::to_string(width_), step = std::to_string(block_threads);
    std::string text = "  for (int64_t pack = blockIdx.x * int64_t{" + step + "} + threadIdx.x; pack < " +
                       std::to_string(total_ / width_) + "; pack += gridDim.x * int64_t{" + step + "}) {\n";
    std::set<int> from_packs;
    std::string body;
    for (const auto& [id, address] : sources) {
      from_packs.insert(id);
      body += "    const Pack<" + writer_.type(id) + ", " + width + "> pack_" + writer_.at(id).name + " = load_pack<" +
              width + ">(" + address + ");\n";
    }
    return text + with_coordinates(true, body + pack_body("    ", from_packs), "    ") + "  }\n";
  }

  // The work on one pack at j0 whose inputs `from_packs` are in pack_<name>:
  // the output packs, the per-element loop, the stores.
  std::string pack_body(const std::string& indent, const std::set<int>& from_packs) const {
    const std::string width = std::to_string(width_);
    std::string text;
    for (const auto& [value, id] : element_outputs_)
      text += indent + "Pack<" + emitter_.storage_type(value) + ", " + width + "> pack_" + emitter_.output_name(value) +
              ";\n";
    text += "#pragma unroll\n" + indent + "for (int lane = 0; lane < " + width + "; ++lane) {\n";
    const std::string body = element_body(indent + "  ", true, from_packs);
    text += declarations_used_by({{"j", "j0 + lane"}}, body, indent + "  ") + body;
    text += indent + "}\n";
    for (const auto& [value, id] : element_outputs_)
      text += indent + "store_pack<" + width + ">(" + emitter_.output_name(value) + " + " +
              writer_.offset(writer_.output_address(value), layout_, "j0") + ", pack_" + emitter_.output_name(value) +
              ");\n";
    return text;
  }

  std::string grid_reduction() const {
    if (reductions_.empty()) return "";
    std::string threads = std::to_string(block_threads), warps = std::to_string(block_threads / 32);
    std::string text = "  // Grid reduction: this block's partials, then the last block combines them in block order.\n";
    for (std::size_t k = 0; k < reductions_.size(); ++k) {
      const ir::Node& node = emitter_.graph().node(writer_.at(reductions_[k]).value);
      std::string a = "accumulator" + std::to_string(k), type = writer_.type(reductions_[k]);
      text += "  __shared__ " + type + " shared" + std::to_string(k) + "[" + warps + "];\n";
      text += "  " + a + " = block_reduce<" + threads + ">(" + a + ", " + reduction_info(node).identity + ", shared" +
              std::to_string(k) + ", " + reduction_info(node).combine + ");\n";
    }
    text += "  __shared__ bool last_block;\n  if (threadIdx.x == 0) {\n";
    for (std::size_t k = 0; k < reductions_.size(); ++k)
      text += "    " + partials_name(k) + "[blockIdx.x] = accumulator" + std::to_string(k) + ";\n";
    text += "    __threadfence();  // the partials are visible before the count says so\n";
    text += "    last_block = atomicAdd(&" + done_name() + ", 1u) == gridDim.x - 1;\n  }\n";
    text += "  __syncthreads();\n  if (!last_block) return;\n";
    text += "  __threadfence();  // and the last block reads them after seeing the count\n";
    for (std::size_t k = 0; k < reductions_.size(); ++k) {
      const Instance& reduction = writer_.at(reductions_[k]);
      const ir::Node& node = emitter_.graph().node(reduction.value);
      ReductionInfo info = reduction_info(node);
      std::string type = writer_.type(reductions_[k]), total = "total" + std::to_string(k);
      text += "  {\n    " + emitter_.describe(reduction.value) + "\n";
      text += "    const volatile " + type + "* partials = " + partials_name(k) + ";\n";
      text += "    " + type + " " + total + " = " + info.identity + ";\n";
      text += "    for (unsigned int block = threadIdx.x; block < gridDim.x; block += " + threads + ") " + total + " = " +
              info.combine + "(" + total + ", partials[block]);\n";
      text += "    " + total + " = block_reduce<" + threads + ">(" + total + ", " + info.identity + ", shared" +
              std::to_string(k) + ", " + info.combine + ");\n";
      std::string value = total;
      if (node.op == ir::Op::reduce_mean)
        value = "div(" + total + ", splat<" + type + ">(" + std::to_string(total_) + "))";
      text +=
          "    if (threadIdx.x == 0) " + emitter_.output_name(reduction_outputs_[k]) + "[0] = " + value + ";\n  }\n";
    }
    text += "  if (threadIdx.x == 0) " + done_name() + " = 0;  // ready for the next launch\n";
    return text;
  }

  KernelWriter& writer_;
  KernelEmitter& emitter_;
  const FusedKernel& kernel_;
  KernelLaunch& launch_;
  Layout layout_;
  std::set<int> needed_;  // instances computed per element, in creation (topological) order
  std::vector<int> reductions_;
  // The output each of reductions_ is stored as: the reduction itself, or a
  // shape op of its one element (a reshape, a slice) that the kernel returns.
  std::vector<ir::ValueId> reduction_outputs_;
  std::vector<std::pair<ir::ValueId, int>> element_outputs_;
  std::int64_t total_ = 0;
  int width_ = 1;
};

bool depends_on_reduction(const KernelWriter& writer, int id) {
  for (int operand : writer.at(id).operands)
    if (writer.at(operand).kind == Instance::Kind::reduction || depends_on_reduction(writer, operand)) return true;
  return false;
}

}  // namespace

bool is_grid_reduction(const KernelWriter& writer) {
  const FusedKernel& kernel = writer.kernel();
  if (kernel.kind != KernelKind::reduction || kernel.reduced_axes != kernel.space.rank()) return false;
  for (const auto& [value, id] : writer.outputs())
    if (writer.at(id).kind != Instance::Kind::reduction || !writer.is_row_output(value) ||
        depends_on_reduction(writer, id))
      return false;
  return true;
}

std::string emit_loop_kernel(KernelWriter& writer, KernelLaunch& launch) { return ElementKernel(writer, launch).emit(); }

}  // namespace kiln::compiler::cuda
