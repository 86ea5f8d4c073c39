// Loop and reduction kernels. The iteration space is walked as rows times an
// inner loop of vectors (the prelude's `lanes` wide); a reduction kernel makes
// one pass over each row per reduction (max, then sum of exp(x - max), ...)
// and a last pass for the element outputs, so softmax and layer_norm read
// their input from memory once. Values that do not change along a row are
// computed once per row. Work is split into items of whole rows or, for long
// rows of a loop kernel, row chunks; every item is independent, so results do
// not depend on the thread count.

#include "compiler/codegen/cpu/row_kernel.h"

#include <kiln/error.h>

#include <algorithm>

namespace kiln::compiler::cpu {

namespace {

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

}  // namespace

ReductionInfo reduction_info(ir::Op op, DType dtype) {
  const codegen::ReductionForm form = codegen::reduction_form(op);
  const bool floating = is_floating(dtype);
  std::string identity;
  switch (form.identity) {
    case codegen::Identity::zero:
      identity = "0";
      break;
    case codegen::Identity::one:
      identity = "1";
      break;
    case codegen::Identity::lowest:
      identity = floating                  ? "-__builtin_inf()"
                 : dtype == DType::boolean ? "0"
                 : dtype == DType::i32     ? "(-2147483647 - 1)"
                                           : "(-9223372036854775807LL - 1)";
      break;
    case codegen::Identity::highest:
      identity = floating                  ? "__builtin_inf()"
                 : dtype == DType::boolean ? "1"
                 : dtype == DType::i32     ? "2147483647"
                                           : "9223372036854775807LL";
      break;
  }
  // The prelude's horizontal folds are named for the reduction: reduce_add, reduce_mul, reduce_max, reduce_min.
  const std::string_view combine = form.combine_name();
  const std::string finish = form.combine == ir::Op::maximum   ? "reduce_max"
                             : form.combine == ir::Op::minimum ? "reduce_min"
                                                               : "reduce_" + std::string(combine);
  return {std::string(combine), finish, "splat<" + storage_type(dtype) + ">(" + identity + ")"};
}

std::string RowKernel::emit() {
  if (kernel_.kind == KernelKind::attention) return emit_attention();
  build_instances();
  if (kernel_.kind == KernelKind::gemm) return emit_gemm();
  if (kernel_.kind == KernelKind::column) return emit_column();
  int split = kernel_.kind == KernelKind::reduction ? kernel_.space.rank() - kernel_.reduced_axes : -1;
  std::vector<Linear> extra;
  for (const auto& [value, instance] : outputs_) extra.push_back(output_address(value));
  const std::vector<Linear> padded = emitter_.padding_axes();
  if (!padded.empty() && kernel_.kind != KernelKind::loop)
    throw CompileError("concat", "padding is read in place by loop kernels only", std::string());
  extra.insert(extra.end(), padded.begin(), padded.end());
  layout_ = emitter_.layout(split, extra);
  if (walks_padded_rows_in_a_middle_loop()) {
    // The last row axis becomes a middle loop: split the space where its group begins.
    const std::size_t rows = layout_.outer_axes.size();
    layout_ = emitter_.layout(rows == 1 ? 0 : layout_.outer_axes[rows - 2] + 1, extra);
  }
  if (kernel_.kind == KernelKind::loop) step_values_ = per_middle_step(layout_);
  mark_varying();
  across_lanes_ = rows_across_lanes();
  strips_ = strip_loads();
  choose_hoisted();
  plan_phases();
  chunked_ = reductions_.empty() && layout_.inner_size > chunk_size && strips_.empty();
  whole_vectors_ = layout_.inner_size % widest_lanes == 0;  // every row, and so every chunk (chunk_size)
  split_reduction_ = reductions_.size() == 1 && layout_.rows() < 16 && layout_.inner_size >= 2 * chunk_size &&
                     layout_.middle_sizes.empty() && only_reduction_outputs();
  row_groups_ = chooses_row_groups();
  streamed_.clear();
  if (!across_lanes_) choose_streamed(element_outputs());
  return emit_kernel();
}

bool RowKernel::walks_padded_rows_in_a_middle_loop() const {
  if (kernel_.kind != KernelKind::loop || layout_.outer_axes.empty() || !layout_.middle_sizes.empty()) return false;
  std::int64_t row_bytes = 0;
  bool bounded_last_row_axis = false;
  const int last = static_cast<int>(layout_.outer_axes.size()) - 1;
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    const Instance& item = at(id);
    if (item.kind != Instance::Kind::load) continue;
    row_bytes = std::max(
        row_bytes, layout_.inner_size * static_cast<std::int64_t>(size_of(emitter_.graph().type(item.value).dtype)));
    for (const Bound& bound : item.bounds)
      if (bound.coordinate.source >= 0 && kernel_.space[bound.coordinate.source] != 1)
        bounded_last_row_axis =
            bounded_last_row_axis || emitter_.bounded_axis(layout_, bound.coordinate.source).row_axis == last;
  }
  std::int64_t rows_left = 1;  // the rows the work is split into once the last row axis is a loop within them
  for (std::size_t t = 0; t + 1 < layout_.outer_sizes.size(); ++t) rows_left *= layout_.outer_sizes[t];
  return bounded_last_row_axis && row_bytes <= middle_loop_row_bytes && rows_left >= middle_loop_min_rows;
}

std::set<int> RowKernel::per_middle_step(const Layout& layout) const {
  std::set<int> values;
  if (layout.middle_sizes.empty()) return values;
  // Operands come before the values computed from them.
  std::vector<bool> along_inner(static_cast<std::size_t>(emitter_.instance_count())), along_middle(along_inner);
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    const Instance& item = at(id);
    const auto index = static_cast<std::size_t>(id);
    if (!item.address.coefficients.empty()) {
      along_inner[index] = emitter_.inner_coefficient(item.address, layout) != 0;
      along_middle[index] = emitter_.varies_in_middle(item.address, layout);
    }
    for (int operand : item.operands) {
      along_inner[index] = along_inner[index] || along_inner[static_cast<std::size_t>(operand)];
      along_middle[index] = along_middle[index] || along_middle[static_cast<std::size_t>(operand)];
    }
    const bool computed_or_read = item.kind == Instance::Kind::compute || item.kind == Instance::Kind::load ||
                                  item.kind == Instance::Kind::gather;
    if (computed_or_read && along_middle[index] && !along_inner[index]) values.insert(id);
  }
  return values;
}

void RowKernel::build_instances() {
  for (ir::ValueId value : kernel_.outputs)
    outputs_.emplace_back(value, emitter_.instance(value, emitter_.output_map(value)));
}

bool RowKernel::is_row_output(ir::ValueId value) const { return kernel_.stores_per_row(value); }

Linear RowKernel::output_address(ir::ValueId value) const {
  const Shape& shape = emitter_.graph().type(value).shape;
  if (const Placement* placement = placement_of(kernel_, value)) {
    IndexMap map = emitter_.broadcast_map(shape);
    for (std::size_t axis = 0; axis < map.size(); ++axis) map[axis].offset += placement->start[axis];
    return emitter_.linear_address(emitter_.graph().type(placement->into).shape, map);
  }
  return emitter_.linear_address(shape, emitter_.output_map(value));
}

std::vector<ir::ValueId> RowKernel::element_outputs() const {
  std::vector<ir::ValueId> values;
  for (const auto& [value, id] : outputs_)
    if (!is_row_output(value)) values.push_back(value);
  return values;
}

std::int64_t RowKernel::element_output_bytes() const {
  std::int64_t bytes = 0;
  for (ir::ValueId value : element_outputs())
    bytes += kernel_.space.numel() * static_cast<std::int64_t>(size_of(emitter_.graph().type(value).dtype));
  return bytes;
}

bool RowKernel::returned_only(ir::ValueId value) const {
  const ir::Graph& graph = emitter_.graph();
  if (!emitter_.results_leave() || std::find(graph.outputs.begin(), graph.outputs.end(), value) == graph.outputs.end())
    return false;
  for (ir::ValueId reader = 0; reader < graph.size(); ++reader) {
    if (emitter_.is_member(reader)) continue;
    const std::vector<ir::ValueId>& operands = graph.node(reader).operands;
    if (std::find(operands.begin(), operands.end(), value) != operands.end()) return false;
  }
  return true;
}

void RowKernel::choose_streamed(const std::vector<ir::ValueId>& outputs) {
  streamed_.clear();
  const ir::Graph& graph = emitter_.graph();
  auto bytes = [&](ir::ValueId value) {
    return kernel_.space.numel() * static_cast<std::int64_t>(size_of(graph.type(value).dtype));
  };
  std::int64_t all = 0, returned = 0;
  std::set<ir::ValueId> returned_values;
  for (ir::ValueId value : outputs) {
    all += bytes(value);
    if (returned_only(value)) {
      returned += bytes(value);
      returned_values.insert(value);
    }
  }
  // What the whole function returns: its distinct results computed here (an argument returned is not written).
  std::int64_t function_results = 0;
  const std::set<ir::ValueId> results(graph.outputs.begin(), graph.outputs.end());
  for (ir::ValueId value : results)
    if (graph.node(value).op != ir::Op::parameter)
      function_results += graph.type(value).shape.numel() * static_cast<std::int64_t>(size_of(graph.type(value).dtype));
  const bool stream_returned = returned >= returned_streaming_bytes && function_results >= streaming_bytes;
  for (ir::ValueId value : outputs)
    if (graph.type(value).dtype != DType::boolean &&
        (all >= streaming_bytes || (stream_returned && returned_values.count(value))))
      streamed_.insert(value);
}

std::vector<int> RowKernel::next_row_loads() const {
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

std::string RowKernel::prefetch_next_row(const std::vector<int>& loads, bool last_pass) const {
  std::string text;
  for (int id : loads)
    text += "        __builtin_prefetch(" + pointer(at(id)) + " + " + std::to_string(layout_.inner_size) + " + j, 0, " +
            (last_pass ? "3" : "2") + ");\n";
  return text;
}

std::string RowKernel::prefetch_ahead(const std::set<int>& needed) const {
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

bool RowKernel::computes_transcendental(const std::set<int>& elements) const {
  return std::any_of(elements.begin(), elements.end(), [&](int id) {
    return at(id).kind == Instance::Kind::compute && ir::is_transcendental_op(emitter_.graph().node(at(id).value).op);
  });
}

bool RowKernel::only_reduction_outputs() const {
  for (const auto& [value, id] : outputs_)
    if (at(id).kind != Instance::Kind::reduction || !is_row_output(value)) return false;
  return true;
}

bool RowKernel::rows_across_lanes() const {
  if (kernel_.kind != KernelKind::reduction || reductions_.empty() || layout_.outer_sizes.size() != 1 ||
      !layout_.middle_sizes.empty() || layout_.inner_size < 1 || layout_.rows() < lanes_row_limit)
    return false;
  // A pick of take_along_axis reads its row's element; across lanes each lane would need its own.
  for (int id = 0; id < emitter_.instance_count(); ++id)
    if (at(id).kind == Instance::Kind::gather) return false;
  const bool compares = std::any_of(reductions_.begin(), reductions_.end(), [&](int id) {
    const ir::Op op = emitter_.graph().node(at(id).value).op;
    return op == ir::Op::reduce_max || op == ir::Op::reduce_min;
  });
  return layout_.inner_size < (compares ? lanes_row_limit_with_comparisons : lanes_row_limit);
}

std::int64_t RowKernel::row_stride(const Linear& linear) const {
  if (linear.coefficients.empty()) return 0;
  return linear.coefficients[static_cast<std::size_t>(layout_.outer_axes.front())];
}

std::string RowKernel::element_offset(const Linear& linear) const {
  const std::int64_t step = emitter_.inner_coefficient(linear, layout_);
  return step == 0 ? "" : step == 1 ? " + j" : " + j * " + std::to_string(step);
}

std::string RowKernel::read_across_lanes(const std::string& type, const std::string& base, std::int64_t stride) {
  if (stride == 0) return "splat<" + type + ">((" + base + ")[0])";
  if (stride == 1) return "load<" + type + ">(" + base + ", group_rows)";
  return "gather<" + type + ">(" + base + ", " + std::to_string(stride) + ", group_rows)";
}

std::string RowKernel::write_across_lanes(const std::string& type, const std::string& base, std::int64_t stride,
                                          const std::string& value) {
  if (stride == 1) return "store<" + type + ">(" + base + ", " + value + ", group_rows);\n";
  return "scatter<" + type + ">(" + base + ", " + std::to_string(stride) + ", " + value + ", group_rows);\n";
}

void RowKernel::mark_varying() {
  varying_.assign(static_cast<std::size_t>(emitter_.instance_count()), false);
  for (int id = 0; id < emitter_.instance_count(); ++id) {
    const Instance& item = at(id);
    bool varies = false;
    if (item.kind == Instance::Kind::load) {
      varies =
          emitter_.inner_coefficient(item.address, layout_) != 0 || emitter_.varies_in_middle(item.address, layout_);
      // Padding read in place whose window covers part of a row: the padding or the value, element by element,
      // even where the address does not move along the row (a zero-size operand padded to a row of constants).
      if (!item.bounds.empty()) {
        const auto [begin, end] = inner_window(item);
        varies = varies || (end > begin && (begin > 0 || end < layout_.inner_size));
      }
    } else if (item.kind == Instance::Kind::gather)
      varies = emitter_.inner_coefficient(item.address, layout_) != 0 ||
               emitter_.varies_in_middle(item.address, layout_) || varying_[static_cast<std::size_t>(item.operands[0])];
    else if (item.kind == Instance::Kind::compute) {
      if (!item.address.coefficients.empty())
        varies =
            emitter_.inner_coefficient(item.address, layout_) != 0 || emitter_.varies_in_middle(item.address, layout_);
      for (int operand : item.operands) varies = varies || varying_[static_cast<std::size_t>(operand)];
    }
    if (item.kind == Instance::Kind::tile) varies = true;
    varying_[static_cast<std::size_t>(id)] = varies;
    if (item.kind == Instance::Kind::reduction) reductions_.push_back(id);
  }
}

void RowKernel::collect_elements(int root, const std::set<int>& cached, std::set<int>& needed) const {
  if (!varying(root) || needed.count(root)) return;
  needed.insert(root);
  if (cached.count(root) || hoisted_.count(root)) return;
  for (int operand : at(root).operands) collect_elements(operand, cached, needed);
}

void RowKernel::plan_phases() {
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
    if (uses[static_cast<std::size_t>(id)] < 2 || hoisted_.count(id)) continue;
    if (item.kind == Instance::Kind::compute && ir::is_transcendental_op(emitter_.graph().node(item.value).op))
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

void RowKernel::collect_with_cache(int root, const std::set<int>& written, std::set<int>& needed) const {
  if (!varying(root) || needed.count(root)) return;
  needed.insert(root);
  if (written.count(root) || hoisted_.count(root)) return;  // read back from the row cache or the hoisted buffer
  for (int operand : at(root).operands) collect_with_cache(operand, written, needed);
}

void RowKernel::choose_hoisted() {
  hoisted_.clear();
  const bool plain_rows = (kernel_.kind == KernelKind::loop || kernel_.kind == KernelKind::reduction) &&
                          emitter_.piece() < 0 && !across_lanes_ && strips_.empty() && layout_.middle_sizes.empty() &&
                          layout_.rows() >= hoist_min_rows && layout_.inner_size <= chunk_size;
  if (!plain_rows) return;
  const auto moves_with_rows = [&](const Linear& linear) {
    if (linear.coefficients.empty()) return false;
    for (int axis : layout_.outer_axes)
      if (linear.coefficients[static_cast<std::size_t>(axis)] != 0) return true;
    return emitter_.varies_in_middle(linear, layout_);
  };
  // Whether each instance is the same at every row: a load at an address without row terms, a constant, or a value
  // computed from such (operands come before the values computed from them); reductions, tiles and gathers are not.
  const int count = emitter_.instance_count();
  std::vector<bool> every_row(static_cast<std::size_t>(count)), same(every_row);
  for (int id = 0; id < count; ++id) {
    const Instance& item = at(id);
    bool alike = false;
    if (item.kind == Instance::Kind::load) alike = item.bounds.empty() && !moves_with_rows(item.address);
    if (item.kind == Instance::Kind::compute) {
      alike = !moves_with_rows(item.address);  // an iota along a row axis is not
      for (int operand : item.operands) alike = alike && every_row[static_cast<std::size_t>(operand)];
    }
    every_row[static_cast<std::size_t>(id)] = alike;
    same[static_cast<std::size_t>(id)] = alike && varying(id);  // and varies along the row
  }
  // Candidates: computed float values the same at every row that a value that is not, or an output, reads.
  std::set<int> candidates;
  auto consider = [&](int id) {
    const Instance& item = at(id);
    if (same[static_cast<std::size_t>(id)] && item.kind == Instance::Kind::compute &&
        is_floating(emitter_.graph().type(item.value).dtype))
      candidates.insert(id);
  };
  for (int id = 0; id < count; ++id)
    if (!same[static_cast<std::size_t>(id)])
      for (int operand : at(id).operands) consider(operand);
  for (const auto& [value, id] : outputs_) consider(id);
  std::int64_t bytes = 0;
  for (int id : candidates) {
    bytes += layout_.inner_size * static_cast<std::int64_t>(size_of(emitter_.graph().type(at(id).value).dtype));
    if (bytes > hoist_max_bytes) break;
    hoisted_.insert(id);
  }
}

int RowKernel::ready_phase(int id) const {
  const Instance& item = at(id);
  if (item.kind == Instance::Kind::reduction) {
    for (std::size_t k = 0; k < reductions_.size(); ++k)
      if (reductions_[k] == id) return static_cast<int>(k) + 1;
  }
  int ready = 0;
  for (int operand : item.operands) ready = std::max(ready, ready_phase(operand));
  return ready;
}

std::string RowKernel::entry_opening() const {
  return "}  // namespace\n\nextern \"C\" __attribute__((visibility(\"default\"))) void kiln_kernel_" +
         std::to_string(emitter_.index()) + "(const kiln_runtime* runtime, void* const* buffers) {\n  " +
         emitter_.prefix() + "_state state;\n" + state_initialization(emitter_);
}

std::string RowKernel::state_from_context() const {
  const std::string prefix = emitter_.prefix();
  return "  const " + prefix + "_state& state = *static_cast<const " + prefix + "_state*>(context);\n";
}

std::string RowKernel::input_field(ir::ValueId value) const {
  const auto position = std::find(kernel_.inputs.begin(), kernel_.inputs.end(), value) - kernel_.inputs.begin();
  return "state." + emitter_.input_name(static_cast<int>(position));
}

std::string RowKernel::entry(std::int64_t chunks) const {
  std::string prefix = emitter_.prefix();
  std::int64_t items = layout_.rows() * chunks;
  std::string text = entry_opening();
  if (!split_reduction_) {
    const std::string groups = "(" + std::to_string(items) + " + lanes - 1) / lanes";
    const std::int64_t column_blocks =
        strips_.empty() ? 1 : (layout_.inner_size + strip_columns() - 1) / strip_columns();
    const std::string count = across_lanes_      ? groups
                              : !strips_.empty() ? groups + " * " + std::to_string(column_blocks)
                                                 : std::to_string(items);
    if (emitter_.piece() >= 0) {
      piece_items_ = across_lanes_ || !strips_.empty() ? -1 : items;
      return piece_setup(count);
    }
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
  text += "    vec<" + type + "> total = splat<" + type + ">(state.partials[row * " + std::to_string(chunks) + "]);\n";
  text += "    for (int64_t chunk = 1; chunk < " + std::to_string(chunks) + "; ++chunk) total = " + info.combine +
          "(total, splat<" + type + ">(state.partials[row * " + std::to_string(chunks) + " + chunk]));\n";
  std::string value = "first_lane(total)";
  if (node.op == ir::Op::reduce_mean)
    value = "div(total, splat<" + type + ">(static_cast<" + type + ">(" + std::to_string(layout_.inner_size) + ")))[0]";
  text += "    state." + emitter_.output_name(output) + "[row] = " + value + ";\n  }\n";
  text += "  runtime->deallocate(state.partials);\n}\n";
  return text;
}

std::string RowKernel::piece_setup(const std::string& count) const {
  const std::string prefix = emitter_.prefix();
  std::string text = "}  // namespace\n\nstatic int64_t " + prefix + "_setup(" + prefix +
                     "_state& state, const kiln_runtime* runtime, void* const* buffers) {\n";
  return text + state_initialization(emitter_) + "  return " + count + ";\n}\n";
}

std::string emit_row_kernel(KernelEmitter& emitter) { return RowKernel(emitter).emit(); }

PieceCode emit_piece(KernelEmitter& emitter) {
  RowKernel kernel(emitter);
  PieceCode code;
  code.text = kernel.emit();
  code.items = kernel.piece_items();
  code.origin = emitter.kernel().origin;
  for (int id = 0; id < emitter.instance_count(); ++id)
    if (emitter.at(id).kind == Instance::Kind::load || emitter.at(id).kind == Instance::Kind::gather)
      code.inputs.insert(emitter.at(id).buffer);
  return code;
}

}  // namespace kiln::compiler::cpu
