// Loop and reduction kernels. The iteration space is walked as rows times an
// inner loop of vectors (the prelude's `lanes` wide); a reduction kernel makes
// one pass over each row per reduction (max, then sum of exp(x - max), ...)
// and a last pass for the element outputs, so softmax and layer_norm read
// their input from memory once. Values that do not change along a row are
// computed once per row. Work is split into items of whole rows or, for long
// rows of a loop kernel, row chunks; every item is independent, so results do
// not depend on the thread count.

#include "compiler/codegen/cpu/kernel_emitter.h"
#include "compiler/fusion.h"
#include "kernels/cpu/gemm.h"

#include <kiln/error.h>

#include <algorithm>
#include <set>

namespace kiln::compiler::cpu {
namespace {

constexpr std::int64_t chunk_size = 16384;  // elements per work item of a long row
// A column kernel's work items: at most this many columns each, so that each reduced row's segment is 4 KiB of
// floats, read contiguously (blocks of 64 columns read 256 bytes per row at a stride of the row, crossing a page
// every row: the hardware prefetchers gave up, and the kernel ran slower than the loop kernel and the standard
// reduction it replaced); about this many items in all, the reduced rows split into blocks of at least
// column_rows_per_block where the other axes give fewer.
constexpr std::int64_t column_block = 1024;
constexpr std::int64_t column_items = 16;
constexpr std::int64_t column_rows_per_block = 64;
// A float sum's rounding errors grow with the terms folded one after another: a block's rows are summed in order,
// then the blocks' partials, so a column of n rows sees about 512 + n / 512 of them instead of n.
constexpr std::int64_t column_max_rows_per_block = 512;
// Where its body is cheap, a column kernel walks its rows this many at a time, taking each vector of columns down
// the group's rows before the next: the hardware sees that many streams at once (one row's 4 KiB segment at a
// time, a new page each, left the memory idle between them), and each column's accumulator stays in a register
// for the group. The order of every column's sum is the same. Reducing the squares of 4096^2 floats over axis
// 0: 2.5 -> 1.65 ms, the row kernel's 1.4 on the same data (Zen 4, 2 threads). A body with a transcendental is
// bound by its arithmetic, and ran slower grouped (a mean over tokens of a gelu: 1.55 -> 1.8-2.2 ms).
constexpr std::int64_t column_row_group = 8;
// The most lanes a generated vector has (the prelude's `lanes`: 16 with AVX-512, 8 with AVX2, 4 else). A
// loop whose every range is a multiple of this many elements never has a partial vector at its end, and
// leaving out that last step keeps the body from being compiled twice: with a transcendental in it, the
// second copy cost a fifth of the module's compile time (gelu's erf form: 0.35 -> 0.28 s).
constexpr std::int64_t widest_lanes = 16;
static_assert(chunk_size % widest_lanes == 0);
static_assert(column_block % widest_lanes == 0);
// A reduction kernel whose rows are shorter than this many elements, with at least this many rows, puts a row
// in each lane (rows_across_lanes): a vector per row left most of its lanes idle and paid a horizontal tree per
// reduction, while the standard kernels fold such rows in scalars. One thread, Zen 4, the two forms of the same
// kernel alternating: softmax over 65536 x 10 floats 1.32 -> 0.48-0.65 ms, over rows of 3 1.44 -> 0.19-0.20,
// sums of rows of 8 0.15 -> 0.10, layer_norm over rows of 10 0.67 -> 0.39.
constexpr std::int64_t lanes_row_limit = widest_lanes;
// Up to this many elements where a reduction is a max or a min: their trees are compare-and-select steps, far
// dearer than a sum's adds. Rows of 16-28 across lanes: max 0.46-0.60 -> 0.17-0.36 ms, softmax 1.7-1.8 -> 0.8-1.4,
// log_softmax 1.9-2.0 -> 0.9-1.3 (a tie at 31). Kernels of sums only were as fast or faster a vector per row
// from 16 on (rows of 28: sums 0.16 against 0.31 across lanes, layer_norm 0.81 against 1.19).
constexpr std::int64_t lanes_row_limit_with_comparisons = 2 * widest_lanes;
// Element outputs of a kernel that add up to this many bytes are written with
// non-temporal stores (store_streaming): far larger than the L2 caches, they
// would be evicted before anyone reads them, and a plain store first reads
// each destination line (measured on a 4096x4096 softmax: 15-20% faster).
constexpr std::int64_t streaming_bytes = std::int64_t{16} << 20;
// Rows at least this long (bytes of one input row) get their next row
// prefetched during the passes after the first: the first pass is the only one
// that reads memory, and the hardware prefetchers stop at page boundaries, so
// without help each row would start with a memory stall while the later
// passes (from L1) leave the memory idle (measured: softmax 4096x4096 1.86x
// -> 1.55x its floor together with streaming stores).
constexpr std::int64_t prefetch_row_bytes = 4096;
// Loop kernels over inputs this large (bytes, each) prefetch each input this
// far ahead into L2 (locality 2). On two cores a compute-heavy loop (gelu:
// a tanh per element) overlapped its computation badly with the memory
// stream the hardware prefetchers fetch on their own: 16M-element gelu took
// 1.7x its memory floor without, 1.3-1.5x with (A/B in one run; 8 KiB ahead
// measured best of 4, 8, 32 and 64 KiB).
constexpr std::int64_t prefetch_ahead_input_bytes = std::int64_t{16} << 20;
constexpr std::int64_t prefetch_ahead_bytes = 8192;

struct ReductionInfo {
  const char* combine;   // prelude function folding a vector into the accumulator
  const char* finish;    // horizontal reduction of the accumulator
  std::string identity;  // the accumulator's start value
};

ReductionInfo reduction_info(ir::Op op, DType dtype) {
  std::string type = storage_type(dtype);
  bool floating = is_floating(dtype);
  std::string lowest = floating                  ? "-__builtin_inf()"
                       : dtype == DType::boolean ? "0"
                       : dtype == DType::i32     ? "(-2147483647 - 1)"
                                                 : "(-9223372036854775807LL - 1)";
  std::string highest = floating                  ? "__builtin_inf()"
                        : dtype == DType::boolean ? "1"
                        : dtype == DType::i32     ? "2147483647"
                                                  : "9223372036854775807LL";
  switch (op) {
    case ir::Op::reduce_sum:
    case ir::Op::reduce_mean:
      return {"add", "reduce_add", "splat<" + type + ">(0)"};
    case ir::Op::reduce_prod:
      return {"mul", "reduce_mul", "splat<" + type + ">(1)"};
    case ir::Op::reduce_max:
      return {"maximum", "reduce_max", "splat<" + type + ">(" + lowest + ")"};
    case ir::Op::reduce_min:
      return {"minimum", "reduce_min", "splat<" + type + ">(" + highest + ")"};
    default:
      throw CompileError(std::string(ir::name(op)), "has no generated reduction", std::string());
  }
}

class RowKernel {
 public:
  explicit RowKernel(KernelEmitter& emitter) : emitter_(emitter), kernel_(emitter.kernel()) {}

  std::string emit() {
    if (kernel_.kind == KernelKind::attention) return emit_attention();
    build_instances();
    if (kernel_.kind == KernelKind::gemm) return emit_gemm();
    if (kernel_.kind == KernelKind::column) return emit_column();
    int split = kernel_.kind == KernelKind::reduction ? kernel_.space.rank() - kernel_.reduced_axes : -1;
    std::vector<Linear> extra;
    for (const auto& [value, instance] : outputs_) extra.push_back(output_address(value));
    layout_ = emitter_.layout(split, extra);
    mark_varying();
    across_lanes_ = rows_across_lanes();
    plan_phases();
    chunked_ = reductions_.empty() && layout_.inner_size > chunk_size;
    whole_vectors_ = layout_.inner_size % widest_lanes == 0;  // every row, and so every chunk (chunk_size)
    split_reduction_ = reductions_.size() == 1 && layout_.rows() < 16 && layout_.inner_size >= 2 * chunk_size &&
                       layout_.middle_sizes.empty() && only_reduction_outputs();
    streaming_ = !across_lanes_ && element_output_bytes() >= streaming_bytes;
    return emit_kernel();
  }

 private:
  const Instance& at(int id) const { return emitter_.at(id); }

  void build_instances() {
    const ir::Graph& graph = emitter_.graph();
    for (ir::ValueId value : kernel_.outputs) {
      const Shape& shape = graph.type(value).shape;
      bool element = shape == kernel_.space;
      bool row = kernel_.kind == KernelKind::reduction && is_row_of_space(shape);
      if (kernel_.kind == KernelKind::gemm || kernel_.kind == KernelKind::column)
        row = ir::is_reduction(graph.node(value).op);
      if (!element && !row)
        throw CompileError(std::string(ir::name(graph.node(value).op)),
                           "output " + graph.type(value).to_string() + " does not match the kernel's space " +
                               kernel_.space.to_string(),
                           graph.node(value).location);
      outputs_.emplace_back(value, emitter_.instance(value, emitter_.broadcast_map(shape)));
    }
  }

  // Outputs written once per row: reductions (even over size-1 axes, whose
  // result has the space's shape) and values of a smaller shape.
  bool is_row_output(ir::ValueId value, int id) const {
    return at(id).kind == Instance::Kind::reduction || !(emitter_.graph().type(value).shape == kernel_.space);
  }

  // Where an output's elements go: element outputs have the space's shape; per-row outputs follow the space's
  // leading (kept) axes. A placed output (concat_fusion.h) is an element output stored where the value it is
  // placed into has it.
  Linear output_address(ir::ValueId value) const {
    const Shape& shape = emitter_.graph().type(value).shape;
    if (const Placement* placement = placement_of(kernel_, value)) {
      IndexMap map = emitter_.broadcast_map(shape);
      map[static_cast<std::size_t>(placement->axis)].offset += placement->offset;
      return emitter_.linear_address(emitter_.graph().type(placement->into).shape, map);
    }
    bool per_row = !(shape == kernel_.space);
    return emitter_.linear_address(shape, per_row ? emitter_.row_map(shape) : emitter_.broadcast_map(shape));
  }

  // One value per row: the kept axes of the space, size 1 (or absent) on
  // the reduced ones.
  bool is_row_of_space(const Shape& shape) const {
    const Shape& space = kernel_.space;
    int split = space.rank() - kernel_.reduced_axes;
    std::vector<std::int64_t> kept(space.dims().begin(), space.dims().begin() + split);
    std::vector<std::int64_t> dims(shape.dims().begin(), shape.dims().end());
    // Trailing size-1 axes on either side change no address (row_map maps the
    // leading axes): a squeezed f32[] of a reduction over [1,1] is its one row.
    while (!dims.empty() && dims.back() == 1) dims.pop_back();
    while (!kept.empty() && kept.back() == 1) kept.pop_back();
    return dims == kept;
  }

  std::int64_t element_output_bytes() const {
    std::int64_t bytes = 0;
    for (const auto& [value, id] : outputs_)
      if (!is_row_output(value, id))
        bytes += kernel_.space.numel() * static_cast<std::int64_t>(size_of(emitter_.graph().type(value).dtype));
    return bytes;
  }

  // The loads of the first pass whose next row follows their row in memory
  // (worth prefetching during the later passes; see prefetch_row_bytes).
  std::vector<int> next_row_loads() const {
    std::vector<int> loads;
    if (reductions_.empty() || split_reduction_ || chunked_ || across_lanes_ || !layout_.middle_sizes.empty() ||
        layout_.outer_axes.empty())
      return loads;
    for (int id : phase_elements_.front()) {
      const Instance& item = at(id);
      if (item.kind != Instance::Kind::load || emitter_.inner_coefficient(item.address, layout_) != 1) continue;
      const std::int64_t element_bytes = static_cast<std::int64_t>(size_of(emitter_.graph().type(item.value).dtype));
      const auto axis = static_cast<std::size_t>(layout_.outer_axes.back());
      if (axis < item.address.coefficients.size() && item.address.coefficients[axis] == layout_.inner_size &&
          layout_.inner_size * element_bytes >= prefetch_row_bytes)
        loads.push_back(id);
    }
    return loads;
  }

  // Prefetches of the next row's element `j` of each load in `loads`, into L1
  // during the last pass and into L2 before it.
  std::string prefetch_next_row(const std::vector<int>& loads, bool last_pass) const {
    std::string text;
    for (int id : loads)
      text += "        __builtin_prefetch(" + pointer(at(id)) + " + " + std::to_string(layout_.inner_size) +
              " + j, 0, " + (last_pass ? "3" : "2") + ");\n";
    return text;
  }

  // Prefetches `prefetch_ahead_bytes` ahead of element `j` of each large,
  // contiguous input of a loop kernel (see prefetch_ahead_input_bytes).
  std::string prefetch_ahead(const std::set<int>& needed) const {
    if (!reductions_.empty() || !layout_.middle_sizes.empty()) return "";
    std::string text;
    for (int id : needed) {
      const Instance& item = at(id);
      if (item.kind != Instance::Kind::load || emitter_.inner_coefficient(item.address, layout_) != 1) continue;
      const ir::Type& type = emitter_.graph().type(kernel_.inputs[static_cast<std::size_t>(item.buffer)]);
      const auto element_bytes = static_cast<std::int64_t>(size_of(type.dtype));
      if (type.shape.numel() * element_bytes < prefetch_ahead_input_bytes) continue;
      text += "        __builtin_prefetch(" + pointer(item) + " + j + " +
              std::to_string(prefetch_ahead_bytes / element_bytes) + ", 0, 2);\n";
    }
    return text;
  }

  bool computes_transcendental(const std::set<int>& elements) const {
    return std::any_of(elements.begin(), elements.end(), [&](int id) {
      return at(id).kind == Instance::Kind::compute && is_transcendental(emitter_.graph().node(at(id).value).op);
    });
  }

  bool only_reduction_outputs() const {
    for (const auto& [value, id] : outputs_)
      if (at(id).kind != Instance::Kind::reduction) return false;
    return true;
  }

  // Rows across lanes (see lanes_row_limit and lanes_row_limit_with_comparisons): a group of `lanes` consecutive
  // rows at a time, row `row + l` in lane l, the inner loop one element of every row per step. Each buffer's rows
  // must lie a fixed stride apart (one collapsed row axis) and the row walk plain (no middle loops).
  bool rows_across_lanes() const {
    if (kernel_.kind != KernelKind::reduction || reductions_.empty() || layout_.outer_sizes.size() != 1 ||
        !layout_.middle_sizes.empty() || layout_.inner_size < 1 || layout_.rows() < lanes_row_limit)
      return false;
    const bool compares = std::any_of(reductions_.begin(), reductions_.end(), [&](int id) {
      const ir::Op op = emitter_.graph().node(at(id).value).op;
      return op == ir::Op::reduce_max || op == ir::Op::reduce_min;
    });
    return layout_.inner_size < (compares ? lanes_row_limit_with_comparisons : lanes_row_limit);
  }

  // Across lanes: how far apart consecutive rows' elements lie in the buffer `linear` addresses.
  std::int64_t row_stride(const Linear& linear) const {
    if (linear.coefficients.empty()) return 0;
    return linear.coefficients[static_cast<std::size_t>(layout_.outer_axes.front())];
  }

  // Across lanes: " + j * <step>", where element j of the row lies from its start in the buffer `linear` addresses.
  std::string element_offset(const Linear& linear) const {
    const std::int64_t step = emitter_.inner_coefficient(linear, layout_);
    return step == 0 ? "" : step == 1 ? " + j" : " + j * " + std::to_string(step);
  }

  // Across lanes: the group's elements at `base` (row `row + l` at base + l * stride), as one vector.
  static std::string read_across_lanes(const std::string& type, const std::string& base, std::int64_t stride) {
    if (stride == 0) return "splat<" + type + ">((" + base + ")[0])";
    if (stride == 1) return "load<" + type + ">(" + base + ", group_rows)";
    return "gather<" + type + ">(" + base + ", " + std::to_string(stride) + ", group_rows)";
  }

  static std::string write_across_lanes(const std::string& type, const std::string& base, std::int64_t stride,
                                        const std::string& value) {
    if (stride == 1) return "store<" + type + ">(" + base + ", " + value + ", group_rows);\n";
    return "scatter<" + type + ">(" + base + ", " + std::to_string(stride) + ", " + value + ", group_rows);\n";
  }

  void mark_varying() {
    varying_.assign(static_cast<std::size_t>(emitter_.instance_count()), false);
    for (int id = 0; id < emitter_.instance_count(); ++id) {
      const Instance& item = at(id);
      bool varies = false;
      if (item.kind == Instance::Kind::load)
        varies =
            emitter_.inner_coefficient(item.address, layout_) != 0 || emitter_.varies_in_middle(item.address, layout_);
      else if (item.kind == Instance::Kind::compute) {
        if (!item.address.coefficients.empty())
          varies = emitter_.inner_coefficient(item.address, layout_) != 0 ||
                   emitter_.varies_in_middle(item.address, layout_);
        for (int operand : item.operands) varies = varies || varying_[static_cast<std::size_t>(operand)];
      }
      if (item.kind == Instance::Kind::tile) varies = true;
      varying_[static_cast<std::size_t>(id)] = varies;
      if (item.kind == Instance::Kind::reduction) reductions_.push_back(id);
    }
  }

  bool varying(int id) const { return varying_[static_cast<std::size_t>(id)]; }

  // The varying instances `root` needs, stopping at row values and at
  // instances cached in `cached`.
  void collect_elements(int root, const std::set<int>& cached, std::set<int>& needed) const {
    if (!varying(root) || needed.count(root)) return;
    needed.insert(root);
    if (cached.count(root)) return;
    for (int operand : at(root).operands) collect_elements(operand, cached, needed);
  }

  void plan_phases() {
    // Phase k computes reduction k; the last phase the element outputs.
    std::set<int> none;
    for (int reduction : reductions_) {
      std::set<int> needed;
      collect_elements(at(reduction).operands[0], none, needed);
      phase_elements_.push_back(needed);
    }
    std::set<int> output_elements;
    for (const auto& [value, id] : outputs_)
      if (at(id).kind != Instance::Kind::reduction) collect_elements(id, none, output_elements);
    phase_elements_.push_back(output_elements);
    // Cache expensive values used by more than one pass in a row buffer.
    std::vector<int> uses(static_cast<std::size_t>(emitter_.instance_count()), 0);
    for (const auto& phase : phase_elements_)
      for (int id : phase) uses[static_cast<std::size_t>(id)] += 1;
    for (int id = 0; id < emitter_.instance_count(); ++id) {
      const Instance& item = at(id);
      if (uses[static_cast<std::size_t>(id)] < 2) continue;
      if (item.kind == Instance::Kind::compute && is_transcendental(emitter_.graph().node(item.value).op))
        cached_.insert(id);
      // Across lanes, an input read by a gather is gathered once into its cache, a vector per element (softmax
      // over 65536 x 10 floats: 0.54 -> 0.48 ms with its input read that way in the second pass).
      if (across_lanes_ && item.kind == Instance::Kind::load && row_stride(item.address) > 1) cached_.insert(id);
    }
    // Recollect with caches as cut points (later phases read the cache).
    phase_elements_.clear();
    std::set<int> written;
    auto phase_set = [&](int root) {
      std::set<int> needed;
      collect_with_cache(root, written, needed);
      return needed;
    };
    for (int reduction : reductions_) {
      std::set<int> needed = phase_set(at(reduction).operands[0]);
      phase_elements_.push_back(needed);
      for (int id : needed)
        if (cached_.count(id)) written.insert(id);
    }
    std::set<int> final_needed;
    for (const auto& [value, id] : outputs_)
      if (at(id).kind != Instance::Kind::reduction) {
        std::set<int> needed = phase_set(id);
        final_needed.insert(needed.begin(), needed.end());
      }
    phase_elements_.push_back(final_needed);
    first_write_ = std::vector<int>(static_cast<std::size_t>(emitter_.instance_count()), -1);
    for (std::size_t phase = 0; phase < phase_elements_.size(); ++phase)
      for (int id : phase_elements_[phase])
        if (cached_.count(id) && first_write_[static_cast<std::size_t>(id)] < 0)
          first_write_[static_cast<std::size_t>(id)] = static_cast<int>(phase);
  }

  void collect_with_cache(int root, const std::set<int>& written, std::set<int>& needed) const {
    if (!varying(root) || needed.count(root)) return;
    needed.insert(root);
    if (written.count(root)) return;  // read back from the row cache
    for (int operand : at(root).operands) collect_with_cache(operand, written, needed);
  }

  // The phase after which a row value can be computed (0: at the row's start).
  int ready_phase(int id) const {
    const Instance& item = at(id);
    if (item.kind == Instance::Kind::reduction) {
      for (std::size_t k = 0; k < reductions_.size(); ++k)
        if (reductions_[k] == id) return static_cast<int>(k) + 1;
    }
    int ready = 0;
    for (int operand : item.operands) ready = std::max(ready, ready_phase(operand));
    return ready;
  }

  std::string coordinates() const { return digits(layout_.outer_sizes, "row", "c", "    "); }

  // `<prefix>0, <prefix>1, ...`: the digits of `variable` in the mixed radix of `sizes`, the last the fastest.
  static std::string digits(const std::vector<std::int64_t>& sizes, const std::string& variable,
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

  std::string pointer(const Instance& item) const { return "row_" + item.name; }

  // Per-row setup: pointers of loads and outputs.
  std::string row_setup() const { return coordinates() + row_setup_pointers(); }

  std::string row_setup_pointers() const {
    std::string text;
    for (int id = 0; id < emitter_.instance_count(); ++id) {
      const Instance& item = at(id);
      if (item.kind != Instance::Kind::load) continue;
      text += "    const " + emitter_.storage_type(kernel_.inputs[static_cast<std::size_t>(item.buffer)]) + "* " +
              pointer(item) + " = state." + emitter_.input_name(item.buffer) + " + (" +
              emitter_.row_offset(item.address, layout_) + ");\n";
    }
    for (const auto& [value, id] : outputs_) {
      // The product itself is written by sgemm; a shape op of it that moves
      // nothing (a reversed slice of a size-1 axis) is stored by the epilogue.
      const bool product = at(id).kind == Instance::Kind::tile && emitter_.graph().node(value).op == ir::Op::matmul;
      const bool gemm_or_column = kernel_.kind == KernelKind::gemm || kernel_.kind == KernelKind::column;
      if (product || (gemm_or_column && at(id).kind == Instance::Kind::reduction)) continue;
      if (kernel_.kind == KernelKind::attention) {  // the driver's strip of P (see emit_attention)
        text += "    " + emitter_.storage_type(value) + "* row_" + emitter_.output_name(value) +
                " = probabilities + (row - row_begin) * ld;\n";
        continue;
      }
      Linear address = output_address(value);
      text += "    " + emitter_.storage_type(value) + "* row_" + emitter_.output_name(value) + " = state." +
              emitter_.output_name(value) + " + (" + emitter_.row_offset(address, layout_) + ");\n";
    }
    return text;
  }

  // Row values that become computable after `phase` passes.
  std::string row_values(int phase) const {
    std::string text;
    for (int id = 0; id < emitter_.instance_count(); ++id) {
      const Instance& item = at(id);
      if (varying(id) || item.kind == Instance::Kind::reduction || ready_phase(id) != phase) continue;
      text += "    " + emitter_.describe(item.value) + "\n";
      text += "    const " + emitter_.vector_type(item.value) + " " + item.name + " = " + row_value(id) + ";\n";
      text += reciprocal(id);
    }
    return text;
  }

  // Whether instance `id` divides a varying value by a per-row result of the passes (softmax's sum, layer_norm's
  // deviation): it then multiplies by the divisor's reciprocal, computed once per row, where that reciprocal is
  // a normal number (prelude: divide_by_row_value). A vector division costs ~10 cycles against a multiply's 1
  // (a 512-wide attention kernel spent ~2 ms of its 7 ms of row work dividing); x * (1 / s) is within two
  // roundings of x / s, and PyTorch's softmax and layer_norm do the same. Divisions by constants and inputs
  // stay divisions.
  bool divides_by_reciprocal(int id) const {
    const Instance& item = at(id);
    if (item.kind != Instance::Kind::compute || emitter_.graph().node(item.value).op != ir::Op::div ||
        !is_floating(emitter_.graph().type(item.value).dtype))
      return false;
    const int divisor = item.operands[1];
    return varying(id) && !varying(divisor) && ready_phase(divisor) > 0;
  }

  // The reciprocal of row value `id` if a division uses it (see divides_by_reciprocal); emitted with the value.
  std::string reciprocal(int id) const {
    for (int user = 0; user < emitter_.instance_count(); ++user)
      if (divides_by_reciprocal(user) && at(user).operands[1] == id) {
        const std::string type = emitter_.storage_type(at(id).value);
        const std::string& name = at(id).name;
        return "    const " + emitter_.vector_type(at(id).value) + " reciprocal_" + name + " = div(splat<" + type +
               ">(1), " + name + ");\n    const bool use_reciprocal_" + name + " = " +
               (across_lanes_ ? "has_normal_reciprocals(" + name + ", group_rows)"
                              : "has_normal_reciprocal(first_lane(" + name + "))") +
               ";\n";
      }
    return "";
  }

  std::string divide_by_row_value(const Instance& division) const {
    const std::string& divisor = at(division.operands[1]).name;
    return "divide_by_row_value(" + at(division.operands[0]).name + ", " + divisor + ", reciprocal_" + divisor +
           ", use_reciprocal_" + divisor + ")";
  }

  std::string row_value(int id) const {
    const Instance& item = at(id);
    const ir::Node& node = emitter_.graph().node(item.value);
    std::string type = emitter_.storage_type(item.value);
    if (item.kind == Instance::Kind::load) {
      if (across_lanes_) return read_across_lanes(type, pointer(item), row_stride(item.address));
      return "splat<" + type + ">(" + pointer(item) + "[0])";
    }
    if (node.op == ir::Op::iota) {
      if (across_lanes_)
        return "lane_index<" + type + ">(" + emitter_.row_offset(item.address, layout_) + ", " +
               std::to_string(row_stride(item.address)) + ")";
      return "splat<" + type + ">(static_cast<" + type + ">(" + emitter_.row_offset(item.address, layout_) + "))";
    }
    return emitter_.expression(id);
  }

  // The body of one vector step at element `j` with `count` lanes.
  std::string element_values(const std::set<int>& needed, int phase) const {
    std::string text;
    for (int id : needed) {
      const Instance& item = at(id);
      std::string type = emitter_.storage_type(item.value);
      std::string value;
      if (cached_.count(id) && first_write_[static_cast<std::size_t>(id)] < phase) {
        value = "load<" + type + ">(cache_" + item.name + cache_offset() + (across_lanes_ ? "" : ", count") + ")";
      } else if (across_lanes_ && item.kind == Instance::Kind::load) {
        value = read_across_lanes(type, pointer(item) + element_offset(item.address), row_stride(item.address));
      } else if (across_lanes_ && emitter_.graph().node(item.value).op == ir::Op::iota) {
        value = "lane_index<" + type + ">(" + emitter_.row_offset(item.address, layout_) +
                element_offset(item.address) + ", " + std::to_string(row_stride(item.address)) + ")";
      } else if (item.kind == Instance::Kind::tile) {
        value = "load<float>(row_tile + j, count)";
      } else if (item.kind == Instance::Kind::load) {
        std::int64_t step = emitter_.inner_coefficient(item.address, layout_);
        std::string base = pointer(item) + emitter_.middle_offset(item.address, layout_);
        value = step == 0   ? "splat<" + type + ">((" + base + ")[0])"
                : step == 1 ? "load<" + type + ">(" + base + " + j, count)"
                            : "gather<" + type + ">(" + base + " + j * " + std::to_string(step) + ", " +
                                  std::to_string(step) + ", count)";
      } else if (emitter_.graph().node(item.value).op == ir::Op::iota) {
        std::int64_t step = emitter_.inner_coefficient(item.address, layout_);
        value = "lane_index<" + type + ">(" + emitter_.row_offset(item.address, layout_) +
                emitter_.middle_offset(item.address, layout_) + " + j * " + std::to_string(step) + ", " +
                std::to_string(step) + ")";
      } else {
        text += "        " + emitter_.describe(item.value) + "\n";
        value = divides_by_reciprocal(id) ? divide_by_row_value(item) : emitter_.expression(id);
      }
      text += "        const " + emitter_.vector_type(item.value) + " " + item.name + " = " + value + ";\n";
      if (cached_.count(id) && first_write_[static_cast<std::size_t>(id)] == phase)
        text += "        store<" + type + ">(cache_" + item.name + cache_offset() + ", " + item.name +
                (across_lanes_ ? "" : ", count") + ");\n";
    }
    return text;
  }

  // Where element `j` at the current middle-loop position lies in a row cache (across lanes: a vector each).
  std::string cache_offset() const {
    if (across_lanes_) return " + j * lanes";
    return (layout_.middle_sizes.empty() ? "" : " + middle * " + std::to_string(layout_.inner_size)) + " + j";
  }

  // The inner loop over [begin, end) in vectors, inside the middle loops.
  // With `partial_type`, a reduction's loop: the body folds into `partial`,
  // one of `partial_count` accumulators (`partials[]`, declared by the
  // caller) taking turns, so that consecutive vectors do not wait for each
  // other's combine (a max is a compare and a blend: ~8 cycles of latency per
  // vector with one accumulator; measured 10-15% of a 4096-wide softmax).
  std::string vector_loop(const std::string& begin, const std::string& end, const std::string& body,
                          const std::string& partial_type = "", int partial_count = 1) const {
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
    text += loop;
    for (std::size_t t = 0; t < layout_.middle_sizes.size(); ++t) text += "      }\n";
    return text;
  }

  // vector_loop's loop over [begin, end), without the middle loops around it.
  std::string inner_vector_loop(const std::string& begin, const std::string& end, const std::string& body,
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

  // Across lanes: the inner loop, element j of each of the group's rows per step.
  static std::string lanes_loop(const std::string& begin, const std::string& end, const std::string& body) {
    return "      #pragma GCC unroll 1\n      for (int64_t j = " + begin + "; j < " + end + "; ++j) {\n" + body +
           "      }\n";
  }

  std::string reduction_pass(std::size_t k, const std::string& begin, const std::string& end) const {
    const Instance& reduction = at(reductions_[k]);
    if (!varying(reduction.operands[0])) return invariant_reduction(k, begin, end);
    const ir::Node& node = emitter_.graph().node(reduction.value);
    ReductionInfo info = reduction_info(node.op, node.type.dtype);
    const Instance& operand = at(reduction.operands[0]);
    const std::string type = emitter_.vector_type(reduction.value);
    const std::string accumulator = "accumulator" + std::to_string(k);
    if (across_lanes_) {  // each lane its own row's accumulator: no partial lanes, no tree at the end
      std::string body = element_values(phase_elements_[k], static_cast<int>(k));
      body += "        " + accumulator + " = " + info.combine + "(" + accumulator + ", " + operand.name + ");\n";
      return "    " + emitter_.describe(reduction.value) + "\n    " + type + " " + accumulator + " = " + info.identity +
             ";\n    {\n" + lanes_loop(begin, end, body) + "    }\n";
    }
    // Independent partial accumulators for rows of at least 64 elements (4 AVX-512 vectors, 8 AVX2 ones; see
    // vector_loop), combined in a fixed order, so results do not depend on threads; but one where the body
    // computes a transcendental: its dozens of instructions per vector hide the combine's latency, and four
    // copies of it made a softmax module compile 1.4x longer (0.35 -> 0.25 s) for no gain in run time.
    const bool cheap_body = !computes_transcendental(phase_elements_[k]);
    const int partial_count = layout_.inner_size >= 64 && cheap_body ? 4 : 1;
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

  // A row value reduced over the row: each of the row's n elements is the same value v. A
  // sum is v * n, rounded once (in double for floats, as the float64 reference; n additions
  // would drift by up to n roundings: 1.3e-4 relative for 12,400 floats), added to the
  // identity as the loop would (so -0 sums to +0); a maximum or minimum is v; a product
  // multiplies n times.
  std::string invariant_reduction(std::size_t k, const std::string& begin, const std::string& end) const {
    const Instance& reduction = at(reductions_[k]);
    const ir::Node& node = emitter_.graph().node(reduction.value);
    const ReductionInfo info = reduction_info(node.op, node.type.dtype);
    const std::string value = at(reduction.operands[0]).name, accumulator = "accumulator" + std::to_string(k);
    const std::string count = "(" + end + " - " + begin + ") * " + std::to_string(layout_.middle_count());
    const std::string type = emitter_.storage_type(reduction.value);
    std::string text = "    " + emitter_.describe(reduction.value) + "\n    " + emitter_.vector_type(reduction.value) +
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

  std::string finish_reduction(std::size_t k, const std::string& accumulator) const {
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
      value = "div(splat<" + type + ">(" + value + "), splat<" + type + ">(static_cast<" + type + ">(" +
              count + ")))[0]";
    return "splat<" + type + ">(" + value + ")";
  }

  std::string emit_kernel() {
    std::string prefix = emitter_.prefix();
    std::string text;
    text += "struct " + prefix + "_state {\n" + emitter_.state_fields();
    if (split_reduction_) text += "  " + emitter_.storage_type(at(reductions_[0]).value) + "* partials;\n";
    text += "};\n\n";
    std::int64_t chunks = chunked_ || split_reduction_ ? (layout_.inner_size + chunk_size - 1) / chunk_size : 1;
    text += "void " + prefix + "_items(void* context, int64_t begin, int64_t end) {\n";
    text += state_from_context();
    text += allocate_row_caches();
    text += "  for (int64_t item = begin; item < end; ++item) {\n";
    std::string range_begin = "0", range_end = std::to_string(layout_.inner_size);
    bool has_rows = !layout_.outer_sizes.empty();
    if (chunks > 1) {
      if (has_rows) text += "    const int64_t row = item / " + std::to_string(chunks) + ";\n";
      text += "    const int64_t chunk_begin = item % " + std::to_string(chunks) + " * " + std::to_string(chunk_size) +
              ";\n";
      text += "    const int64_t chunk_end = chunk_begin + " + std::to_string(chunk_size) + " < " +
              std::to_string(layout_.inner_size) + " ? chunk_begin + " + std::to_string(chunk_size) + " : " +
              std::to_string(layout_.inner_size) + ";\n";
      range_begin = "chunk_begin";
      range_end = "chunk_end";
    } else if (across_lanes_) {
      const std::string rows = std::to_string(layout_.rows());
      text += "    const int64_t row = item * lanes;  // rows [row, row + group_rows), row + l in lane l\n";
      text +=
          "    const int group_rows = row + lanes <= " + rows + " ? lanes : static_cast<int>(" + rows + " - row);\n";
    } else if (has_rows) {
      text += "    const int64_t row = item;\n";
    }
    text += row_setup();
    text += row_values(0);
    text += reduction_passes(range_begin, range_end);
    if (!split_reduction_) text += element_pass(range_begin, range_end) + row_outputs();
    text += "  }\n";
    if (streaming_) text += "  end_streaming();\n";
    text += release_row_caches() + "}\n\n";
    text += entry(chunks);
    return text;
  }

  // Row buffers of the values cached between passes (plan_phases), one row long, per call of the items
  // function.
  std::string allocate_row_caches() const {
    std::string text;
    for (int id : cached_)
      text += "  " + emitter_.storage_type(at(id).value) + "* cache_" + at(id).name + " = static_cast<" +
              emitter_.storage_type(at(id).value) + "*>(state.runtime->allocate(" +
              std::to_string(layout_.inner_size * layout_.middle_count()) + (across_lanes_ ? " * lanes" : "") +
              " * sizeof(" + emitter_.storage_type(at(id).value) + ")));\n";
    return text;
  }

  // The row caches carved out of the attention driver's per-thread `scratch`, each 64-byte aligned; `bytes`
  // receives the total the driver must provide.
  std::string row_caches_in_scratch(std::int64_t& bytes) const {
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

  std::string release_row_caches() const {
    std::string text;
    for (int id : cached_) text += "  state.runtime->deallocate(cache_" + at(id).name + ");\n";
    return text;
  }

  // One pass over the row per reduction, in order, each followed by the row values it makes computable (a
  // split reduction's pass stores its chunk's partial result instead).
  std::string reduction_passes(const std::string& begin, const std::string& end) const {
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
      text += "    const " + emitter_.vector_type(at(reductions_[k]).value) + " " + at(reductions_[k]).name + " = " +
              finish_reduction(k, "accumulator" + std::to_string(k)) + ";\n";
      text += reciprocal(reductions_[k]) + row_values(static_cast<int>(k) + 1);
    }
    return text;
  }

  std::string element_pass(const std::string& begin, const std::string& end) const {
    const std::set<int>& needed = phase_elements_.back();
    std::string body = prefetch_ahead(needed) + element_values(needed, static_cast<int>(phase_elements_.size()) - 1);
    body += prefetch_next_row(next_row_loads(), true);
    bool any = false;
    for (const auto& [value, id] : outputs_) {
      if (is_row_output(value, id)) continue;
      any = true;
      body += element_store(value, id);
    }
    if (!any) return "";
    return "    {\n" + (across_lanes_ ? lanes_loop(begin, end, body) : vector_loop(begin, end, body)) + "    }\n";
  }

  // The store of element output `value` (instance `id`) at element `j` of the row, streaming past the caches
  // where the kernel's element outputs are large (streaming_bytes).
  std::string element_store(ir::ValueId value, int id) const {
    const Linear address = output_address(value);
    if (across_lanes_)
      return "        " + write_across_lanes(emitter_.storage_type(value),
                                             "row_" + emitter_.output_name(value) + element_offset(address),
                                             row_stride(address), at(id).name);
    const std::string base = "row_" + emitter_.output_name(value) + emitter_.middle_offset(address, layout_);
    const std::int64_t step = emitter_.inner_coefficient(address, layout_);
    if (step != 1)  // a placed output whose inner axis is not the innermost of the value it is placed into
      return "        scatter<" + emitter_.storage_type(value) + ">(" + base + " + j * " + std::to_string(step) +
             ", " + std::to_string(step) + ", " + at(id).name + ", count);\n";
    const bool stream = streaming_ && emitter_.graph().type(value).dtype != DType::boolean;
    return std::string("        ") + (stream ? "store_streaming<" : "store<") + emitter_.storage_type(value) + ">(" +
           base + " + j, " + at(id).name + ", count);\n";
  }

  std::string row_outputs() const {
    std::string text;
    for (const auto& [value, id] : outputs_) {
      if (!is_row_output(value, id)) continue;
      const std::string base = "row_" + emitter_.output_name(value);
      if (across_lanes_)
        text += "    " +
                write_across_lanes(emitter_.storage_type(value), base, row_stride(output_address(value)), at(id).name);
      else
        text += "    " + base + "[0] = first_lane(" + at(id).name + ");\n";
    }
    return text;
  }

  // The opening of the kernel's extern "C" entry point, up to its state filled from `buffers`.
  std::string entry_opening() const {
    return "}  // namespace\n\nextern \"C\" __attribute__((visibility(\"default\"))) void kiln_kernel_" +
           std::to_string(emitter_.index()) + "(const kiln_runtime* runtime, void* const* buffers) {\n  " +
           emitter_.prefix() + "_state state;\n" + emitter_.state_initialization();
  }

  // The first line of a callback that receives the kernel's state as its `context`.
  std::string state_from_context() const {
    const std::string prefix = emitter_.prefix();
    return "  const " + prefix + "_state& state = *static_cast<const " + prefix + "_state*>(context);\n";
  }

  // The state field holding kernel input `value`.
  std::string input_field(ir::ValueId value) const {
    const auto position = std::find(kernel_.inputs.begin(), kernel_.inputs.end(), value) - kernel_.inputs.begin();
    return "state." + emitter_.input_name(static_cast<int>(position));
  }

  std::string entry(std::int64_t chunks) const {
    std::string prefix = emitter_.prefix();
    std::int64_t items = layout_.rows() * chunks;
    std::string text = entry_opening();
    if (!split_reduction_) {
      const std::string count = across_lanes_ ? "(" + std::to_string(items) + " + lanes - 1) / lanes"  // groups
                                              : std::to_string(items);
      text += "  runtime->parallel_for(" + count + ", 1, " + prefix + "_items, &state);\n}\n";
      return text;
    }
    // Partial results per chunk, combined in chunk order: the same result
    // for every thread count.
    const Instance& reduction = at(reductions_[0]);
    const ir::Node& node = emitter_.graph().node(reduction.value);
    std::string type = emitter_.storage_type(reduction.value);
    ReductionInfo info = reduction_info(node.op, node.type.dtype);
    ir::ValueId output = outputs_.front().first;
    text += "  state.partials = static_cast<" + type + "*>(runtime->allocate(" + std::to_string(items) + " * sizeof(" +
            type + ")));\n";
    text += "  runtime->parallel_for(" + std::to_string(items) + ", 1, " + prefix + "_items, &state);\n";
    text += "  for (int64_t row = 0; row < " + std::to_string(layout_.rows()) + "; ++row) {\n";
    text +=
        "    vec<" + type + "> total = splat<" + type + ">(state.partials[row * " + std::to_string(chunks) + "]);\n";
    text += "    for (int64_t chunk = 1; chunk < " + std::to_string(chunks) + "; ++chunk) total = " + info.combine +
            "(total, splat<" + type + ">(state.partials[row * " + std::to_string(chunks) + " + chunk]));\n";
    std::string value = "first_lane(total)";
    if (node.op == ir::Op::reduce_mean)
      value =
          "div(total, splat<" + type + ">(static_cast<" + type + ">(" + std::to_string(layout_.inner_size) + ")))[0]";
    text += "    state." + emitter_.output_name(output) + "[row] = " + value + ";\n  }\n";
    text += "  runtime->deallocate(state.partials);\n}\n";
    return text;
  }

  // ---- column: a reduction over the axes before the last, a block of rows and columns at a time -------------
  // The space is [outer..., reduced..., columns]. A work item takes one index of the outer axes (row: c0, c1, ...),
  // a block of up to column_block columns and a block of the reduced rows (r, whose digits are d0, d1, ...), and
  // walks its rows in order, each row's segment contiguous, folding every element into the accumulator of its
  // column (an array in the item's stack frame). With one row block the item stores the results; with several
  // (enough items for the threads where the outer axes and the columns give few), each stores its partial
  // results, and the entry combines them in row-block order. Every column is summed in an order that depends on
  // the shape only.
  std::string emit_column() {
    const int rank = kernel_.space.rank(), first = rank - 1 - kernel_.reduced_axes;
    for (int axis = 0; axis + 1 < rank; ++axis) {
      (axis < first ? layout_.outer_sizes : layout_.middle_sizes).push_back(kernel_.space[axis]);
      (axis < first ? layout_.outer_axes : layout_.middle_axes).push_back(axis);
    }
    layout_.inner_size = kernel_.space[rank - 1];
    layout_.inner_axis = rank - 1;
    mark_varying();
    if (reductions_.size() != 1) throw CompileError("column kernel", "expects one reduction", std::string());
    const Instance& reduction = at(reductions_.front());
    const ir::Node& node = emitter_.graph().node(reduction.value);
    const ReductionInfo info = reduction_info(node.op, node.type.dtype);
    std::set<int> needed;
    collect_elements(reduction.operands[0], {}, needed);
    streaming_ = element_output_bytes() >= streaming_bytes;
    std::string stores;  // the element outputs, at each element of the block
    for (const auto& [value, id] : outputs_) {
      if (is_row_output(value, id)) continue;
      collect_elements(id, {}, needed);
      stores += element_store(value, id);
    }
    // Rows in groups (see column_row_group) where the body is cheap and one reduced axis gives the row's
    // coordinate without a division.
    const bool grouped = layout_.middle_sizes.size() == 1 && !computes_transcendental(needed);
    const std::int64_t columns = layout_.inner_size, reduced = layout_.middle_count(), outer = layout_.rows();
    const std::int64_t block =
        std::min((std::max<std::int64_t>(columns, 1) + widest_lanes - 1) / widest_lanes * widest_lanes, column_block);
    const std::int64_t column_blocks = (columns + block - 1) / block;
    // Row blocks of at least column_rows_per_block rows, as many as it takes to make column_items items, and of at
    // most column_max_rows_per_block rows.
    const std::int64_t wanted =
        (column_items + outer * column_blocks - 1) / std::max<std::int64_t>(outer * column_blocks, 1);
    const std::int64_t row_blocks = std::max({std::int64_t{1}, std::min(wanted, reduced / column_rows_per_block),
                                              (reduced + column_max_rows_per_block - 1) / column_max_rows_per_block});
    const std::int64_t rows_per_block = (reduced + row_blocks - 1) / row_blocks;
    whole_vectors_ = columns % widest_lanes == 0;

    const std::string prefix = emitter_.prefix(), type = emitter_.vector_type(reduction.value);
    const std::string storage = emitter_.storage_type(reduction.value), output = emitter_.output_name(reduction.value);
    const std::string group = "(j - block_begin) / lanes",
                      count = "block_end - j < lanes ? static_cast<int>(block_end - j) : lanes";
    std::string text = "struct " + prefix + "_state {\n" + emitter_.state_fields();
    if (row_blocks > 1) text += "  " + storage + "* partials;  // [row block][outer index][column]\n";
    text += "};\n\n";
    text += "void " + prefix + "_items(void* context, int64_t begin, int64_t end) {\n" + state_from_context();
    text += "  for (int64_t item = begin; item < end; ++item) {\n";
    text += "    const int64_t row = item / " + std::to_string(column_blocks * row_blocks) + ";\n";
    text += "    const int64_t row_block = item / " + std::to_string(column_blocks) + " % " +
            std::to_string(row_blocks) + ";\n";
    text += "    const int64_t block_begin = item % " + std::to_string(column_blocks) + " * " + std::to_string(block) +
            ";\n    const int64_t block_end = block_begin + " + std::to_string(block) + " < " +
            std::to_string(columns) + " ? block_begin + " + std::to_string(block) + " : " + std::to_string(columns) +
            ";\n";
    text += row_setup() + row_values(0);
    text += "    " + emitter_.describe(reduction.value) + ": one accumulator per group of lanes columns\n";
    text += "    " + type + " accumulators[" + std::to_string(block) + " / lanes];\n";
    text += "    for (" + type + "& accumulator : accumulators) accumulator = " + info.identity + ";\n";
    text += "    const int64_t r_end = (row_block + 1) * " + std::to_string(rows_per_block) + " < " +
            std::to_string(reduced) + " ? (row_block + 1) * " + std::to_string(rows_per_block) + " : " +
            std::to_string(reduced) + ";\n";
    const std::string first_row = "row_block * " + std::to_string(rows_per_block);
    const std::string folded = info.combine + std::string("(accumulator, first_lanes(") +
                               at(reduction.operands[0]).name + ", " + info.identity + ", count));\n";
    if (grouped) {
      const std::string rows = std::to_string(column_row_group);
      text += "    // " + rows + " rows at a time, each vector of columns down them: " + rows +
              " streams in flight, the accumulator in a register.\n";
      text += "    for (int64_t r0 = " + first_row + "; r0 < r_end; r0 += " + rows + ") {\n";
      text += "      const int64_t group_end = r0 + " + rows + " < r_end ? r0 + " + rows + " : r_end;\n";
      std::string body = "        " + type + " accumulator = accumulators[" + group + "];\n";
      body += "        for (int64_t d0 = r0; d0 < group_end; ++d0) {\n";
      body += element_values(needed, 0) + stores + "        accumulator = " + folded + "        }\n";
      body += "        accumulators[" + group + "] = accumulator;\n";
      text += inner_vector_loop("block_begin", "block_end", body, "", 1) + "    }\n";
    } else {
      text += "    for (int64_t r = " + first_row + "; r < r_end; ++r) {\n";
      text += digits(layout_.middle_sizes, "r", "d", "      ");
      std::string body = element_values(needed, 0) + stores;
      body += "        " + type + "& accumulator = accumulators[" + group + "];\n        accumulator = " + folded;
      text += inner_vector_loop("block_begin", "block_end", body, "", 1) + "    }\n";
    }
    if (row_blocks > 1) {
      text += "    " + storage + "* partial = state.partials + (row_block * " + std::to_string(outer) + " + row) * " +
              std::to_string(columns) + ";\n";
      text += "    for (int64_t j = block_begin; j < block_end; j += lanes)\n      store<" + storage +
              ">(partial + j, accumulators[" + group + "], " + count + ");\n";
    } else {
      text += "    for (int64_t j = block_begin; j < block_end; j += lanes)\n      store<" + storage + ">(state." +
              output + " + row * " + std::to_string(columns) + " + j, " +
              finished("accumulators[" + group + "]", node, storage) + ", " + count + ");\n";
    }
    text += "  }\n";
    if (streaming_) text += "  end_streaming();\n";
    text += "}\n\n" + entry_opening();
    const std::int64_t items = outer * column_blocks * row_blocks;
    if (row_blocks == 1) {
      text += "  runtime->parallel_for(" + std::to_string(items) + ", 1, " + prefix + "_items, &state);\n}\n";
      return text;
    }
    text += "  state.partials = static_cast<" + storage + "*>(runtime->allocate(" +
            std::to_string(row_blocks * outer * columns) + " * sizeof(" + storage + ")));\n";
    text += "  runtime->parallel_for(" + std::to_string(items) + ", 1, " + prefix + "_items, &state);\n";
    text += "  // The row blocks' partial results, combined in row-block order.\n";
    text += "  for (int64_t row = 0; row < " + std::to_string(outer) + "; ++row) {\n";
    text += "    const int64_t block_begin = 0, block_end = " + std::to_string(columns) + ";\n";
    text += "    for (int64_t j = block_begin; j < block_end; j += lanes) {\n      const int count = " + count + ";\n";
    text += "      " + type + " total = " + info.identity + ";\n";
    text += "      for (int64_t row_block = 0; row_block < " + std::to_string(row_blocks) + "; ++row_block)\n";
    text += "        total = " + std::string(info.combine) + "(total, first_lanes(load<" + storage +
            ">(state.partials + (row_block * " + std::to_string(outer) + " + row) * " + std::to_string(columns) +
            " + j, count), " + info.identity + ", count));\n";
    text += "      store<" + storage + ">(state." + output + " + row * " + std::to_string(columns) + " + j, " +
            finished("total", node, storage) + ", count);\n    }\n  }\n";
    text += "  runtime->deallocate(state.partials);\n}\n";
    return text;
  }

  // A column accumulator as the reduction's result: a mean divides by the number of reduced elements.
  std::string finished(const std::string& accumulator, const ir::Node& node, const std::string& storage) const {
    if (node.op != ir::Op::reduce_mean) return accumulator;
    return "div(" + accumulator + ", splat<" + storage + ">(static_cast<" + storage + ">(" +
           std::to_string(layout_.middle_count()) + ")))";
  }

  // ---- gemm: the epilogue runs on each finished tile of the matmul -------------
  std::string emit_gemm() {
    const ir::Graph& graph = emitter_.graph();
    ir::ValueId matmul = -1;
    for (ir::ValueId member : kernel_.members)
      if (graph.node(member).op == ir::Op::matmul) matmul = member;
    const ir::Node& node = graph.node(matmul);
    // sgemm sees all the rows as m; the epilogue recovers each row's coordinates.
    const int rank = kernel_.space.rank();
    layout_ = emitter_.product_rows();
    mark_varying();
    std::set<int> needed;
    for (int reduction : reductions_) collect_elements(at(reduction).operands[0], {}, needed);
    bool writes_product = false;
    for (const auto& [value, id] : outputs_) {
      if (value == matmul)
        writes_product = true;
      else if (at(id).kind != Instance::Kind::reduction)
        collect_elements(id, {}, needed);
    }
    phase_elements_ = {needed};
    first_write_.assign(static_cast<std::size_t>(emitter_.instance_count()), -1);
    bool has_epilogue = !needed.empty();
    const Shape& a = graph.type(node.operands[0]).shape;
    const Shape& b = graph.type(node.operands[1]).shape;
    const std::int64_t m = layout_.rows(), n = kernel_.space[rank - 1];
    const std::int64_t k = node.attributes.transpose_a ? a[0] : a[a.rank() - 1];
    // The epilogue sees column blocks [p * panel_columns, min(n, (p + 1) * panel_columns)) (gemm.h).
    whole_vectors_ = n % widest_lanes == 0 && kernels::cpu::plan_sgemm(m, n, k).panel_columns % widest_lanes == 0;

    std::string prefix = emitter_.prefix();
    std::string text = "struct " + prefix + "_state {\n" + emitter_.state_fields();
    for (std::size_t k = 0; k < reductions_.size(); ++k)
      text += "  " + emitter_.storage_type(at(reductions_[k]).value) + "* partials" + std::to_string(k) + ";\n";
    text += "};\n\n";
    if (has_epilogue) text += epilogue(prefix, writes_product, matmul);
    text += entry_opening();
    std::string sizes = std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k);
    text += "  const int64_t blocks = runtime->sgemm_block_count(" + sizes + ");\n  (void)blocks;\n";
    // Partial results in the reductions' own dtypes: an epilogue may cast the f32 product (to f64, say).
    for (std::size_t r = 0; r < reductions_.size(); ++r) {
      const std::string type = emitter_.storage_type(at(reductions_[r]).value);
      text += "  state.partials" + std::to_string(r) + " = static_cast<" + type + "*>(runtime->allocate(blocks * sizeof(" +
              type + ")));\n";
    }
    text += "  " + emitter_.describe(matmul) + "\n";
    text += "  runtime->sgemm(" + sizes + ", " + input_field(node.operands[0]) + ", " +
            std::to_string(a[a.rank() - 1]) + ", " + (node.attributes.transpose_a ? "1" : "0") + ", " +
            input_field(node.operands[1]) + ", " + std::to_string(b[1]) + ", " +
            (node.attributes.transpose_b ? "1" : "0") + ", " +
            (writes_product ? "state." + emitter_.output_name(matmul) : std::string("nullptr")) + ", " +
            std::to_string(n) + ", " + (has_epilogue ? prefix + "_epilogue" : std::string("nullptr")) + ", &state);\n";
    for (std::size_t r = 0; r < reductions_.size(); ++r) {
      const ir::Node& reduction = graph.node(at(reductions_[r]).value);
      ReductionInfo info = reduction_info(reduction.op, reduction.type.dtype);
      std::string p = "state.partials" + std::to_string(r);
      const std::string type = emitter_.storage_type(at(reductions_[r]).value);
      text += "  {\n    " + emitter_.describe(at(reductions_[r]).value) + ": combine the blocks in order\n";
      // No blocks when the product is empty (a dimension of 0): the reduction's identity.
      text += "    vec<" + type + "> total = blocks > 0 ? splat<" + type + ">(" + p + "[0]) : " + info.identity + ";\n";
      text += "    for (int64_t block = 1; block < blocks; ++block) total = " + std::string(info.combine) + "(total, splat<" +
              type + ">(" + p + "[block]));\n";
      std::string value = "first_lane(total)";
      if (reduction.op == ir::Op::reduce_mean)
        value = "div(total, splat<" + type + ">(static_cast<" + type + ">(" + std::to_string(m * n) + ")))[0]";
      text += "    state." + emitter_.output_name(at(reductions_[r]).value) + "[0] = " + value + ";\n";
      text += "    runtime->deallocate(" + p + ");\n  }\n";
    }
    return text + "}\n";
  }

  std::string epilogue(const std::string& prefix, bool writes_product, ir::ValueId matmul) {
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
    for (const auto& [value, id] : outputs_) {
      if (value == matmul || at(id).kind == Instance::Kind::reduction) continue;
      body += "        store<" + emitter_.storage_type(value) + ">(row_" + emitter_.output_name(value) + " + j, " +
              at(id).name + ", count);\n";
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

  // ---- attention: the row kernel between two matmuls, on strips of the first product -------------
  // The runtime's attention driver (kernels/cpu/attention.h) computes the first product a strip of rows at a
  // time and calls `<prefix>_rows` on it: the row kernel's passes read the scores from the strip (`row_tile`)
  // and write P, the second matmul's left operand, to the driver's other strip.
  std::string emit_attention() {
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
    std::string text = "struct " + prefix + "_state {\n" + emitter_.state_fields() + "};\n\n";
    text += "// Rows [row_begin, row_end) of the scores, numbered across the batch, to the same rows of %" +
            std::to_string(probabilities) + ";\n// both strips hold just these rows, ld floats apart.\n";
    text += "void " + prefix +
            "_rows(void* context, int64_t row_begin, int64_t row_end, const float* scores, float* probabilities, "
            "int64_t ld, void* scratch) {\n";
    text += state_from_context();
    std::int64_t row_scratch_bytes = 0;
    text += row_caches_in_scratch(row_scratch_bytes) + "  for (int64_t row = row_begin; row < row_end; ++row) {\n";
    text += "    const float* row_tile = scores + (row - row_begin) * ld;\n" + row_setup() + row_values(0);
    text += reduction_passes("0", row_end) + element_pass("0", row_end) + "  }\n}\n\n";

    text += entry_opening();
    text += "  " + emitter_.describe(matmuls.front()) + "\n  " + emitter_.describe(matmuls.back()) + "\n";
    const Shape& scores = first.type.shape;
    const int rank = scores.rank();
    std::int64_t batch = 1;
    for (int axis = 0; axis + 2 < rank; ++axis) batch *= scores[axis];
    const Shape& left = graph.type(first.operands[0]).shape;
    const std::int64_t k = first.attributes.transpose_a ? left[left.rank() - 2] : left[left.rank() - 1];
    text += "  kiln_attention_problem problem = {};\n";
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

  // problem.<name>, its batch stride (0: a matrix shared by every batch item) and its transpose flag.
  std::string operand_fields(const std::string& name, ir::ValueId operand, bool transpose) const {
    const Shape& shape = emitter_.graph().type(operand).shape;
    const std::int64_t stride = shape.rank() == 2 ? 0 : shape[shape.rank() - 2] * shape[shape.rank() - 1];
    return "  problem." + name + " = " + input_field(operand) + ";\n  problem." + name +
           "_batch_stride = " + std::to_string(stride) + ";\n  problem.transpose_" + name + " = " +
           (transpose ? "1" : "0") + ";\n";
  }

  KernelEmitter& emitter_;
  const FusedKernel& kernel_;
  std::vector<std::pair<ir::ValueId, int>> outputs_;  // value, instance
  Layout layout_;
  std::vector<bool> varying_;
  std::vector<int> reductions_;
  std::vector<std::set<int>> phase_elements_;
  std::set<int> cached_;
  std::vector<int> first_write_;
  bool chunked_ = false;
  bool split_reduction_ = false;
  bool streaming_ = false;  // element outputs use store_streaming
  bool whole_vectors_ = false;  // every inner range's length is a multiple of widest_lanes
  bool across_lanes_ = false;   // a group of rows at a time, a row in each lane (rows_across_lanes)
};

}  // namespace

std::string emit_row_kernel(KernelEmitter& emitter) { return RowKernel(emitter).emit(); }

}  // namespace kiln::compiler::cpu
