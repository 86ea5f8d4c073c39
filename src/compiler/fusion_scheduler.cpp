#include "compiler/fusion_scheduler.h"

#include <kiln/error.h>

#include <algorithm>
#include <functional>

namespace kiln::compiler {

namespace {

// Below this stride between the elements of a transpose's output rows, a loop kernel's gathers were as fast as
// the standard kernel's tiles or faster: swapping the last two axes of [64, 2048, k] floats, the loop kernel
// was ahead up to k = 96 (384 bytes; its lines are reused by the next rows before they leave the L2) and behind
// from k = 128 (Zen 4, 2026-12-01).
constexpr std::int64_t strided_transpose_stride_bytes = 512;

}  // namespace

int Group::first_row_axis() const {
  switch (kind) {
    case KernelKind::reduction:
    case KernelKind::column:
      return nest.reduced_begin;
    case KernelKind::loop:
      return nest.space.rank() - 1;
    default:
      return 0;
  }
}

Scheduler::Scheduler(const ir::Graph& graph, const BackendCapabilities& capabilities)
    : graph_(graph),
      capabilities_(capabilities),
      users_(static_cast<std::size_t>(graph.size())),
      is_output_(static_cast<std::size_t>(graph.size()), false),
      group_of_(static_cast<std::size_t>(graph.size()), -1),
      inlined_(static_cast<std::size_t>(graph.size()), false),
      viewed_(static_cast<std::size_t>(graph.size()), false),
      piecewise_(static_cast<std::size_t>(graph.size()), false) {
  for (ir::ValueId id = 0; id < graph.size(); ++id)
    for (ir::ValueId operand : graph.node(id).operands) users_[index(operand)].push_back(id);
  for (ir::ValueId output : graph.outputs) is_output_[index(output)] = true;
}

FusionPlan Scheduler::run() {
  for (ir::ValueId id = graph_.size() - 1; id >= 0; --id) place(id);
  merge_siblings();
  finish_columns();
  return build_plan();
}

void Scheduler::place(ir::ValueId id) {
  const ir::Node& node = graph_.node(id);
  if (node.op == ir::Op::parameter) return;
  if (shared_gathered_view(id)) {
    inlined_[index(id)] = viewed_[index(id)] = true;  // pulled into each GEMM kernel that gathers it
    // A reshape of its rows leaves its own group (a view of memory no longer written) for its matmul's.
    for (ir::ValueId user : users_[index(id)]) {
      const ir::ValueId matmul = rows_reshape_gathered(user, id);
      if (matmul < 0) continue;
      Group& own = group(group_of_[index(user)]);
      own.members.clear();
      own.merged_away = true;
      group_of_[index(user)] = group_of_[index(matmul)];
      group(group_of_[index(matmul)]).members.push_back(user);
      viewed_[index(user)] = true;
      std::erase_if(plan_.not_fused, [&](const FusionDecision& note) { return note.subject == user; });
    }
    return;
  }
  if (is_strided_transpose(node)) {
    if (!fuse_transpose_by_strips(id)) start_group(id);
    return;
  }
  // A padding is cheap to read under slices (is_cheap), but read in place only where read_through_padding says.
  if (is_cheap(graph_, id) && node.op != ir::Op::concat && !is_output_[index(id)] && !read_from_memory(id)) {
    inlined_[index(id)] = true;
    return;
  }
  std::set<int> consumer_groups = consumer_groups_of(id);
  if (read_through_padding(id, consumer_groups)) {
    inlined_[index(id)] = true;  // a masked read in each consumer kernel
    return;
  }
  if (consumer_groups.size() > 1) merge_consumer_loops(id, consumer_groups);
  if (read_piecewise(id, consumer_groups)) return;
  if (consumer_groups.size() == 1 && join_attention(id, *consumer_groups.begin())) return;
  if (consumer_groups.size() == 1 && try_fuse(id, *consumer_groups.begin())) return;
  // The cone is walked once: it decides, and the decision names what it reads.
  const RecomputeCone cone = consumer_groups.size() > 1 ? recompute_cone(id) : RecomputeCone{};
  const std::string not_recomputed = consumer_groups.size() > 1 ? why_not_recomputed(id, consumer_groups, cone) : "";
  if (consumer_groups.size() > 1 && not_recomputed.empty()) {
    inlined_[index(id)] = true;
    for (int each : consumer_groups)
      group(each).decisions.push_back({.reason = Reason::recomputed,
                                       .subject = id,
                                       .values = cone.arrays,
                                       .numbers = {static_cast<std::int64_t>(consumer_groups.size()), cone.flops}});
    return;
  }
  if (consumer_groups.size() > 1) {
    if (join_one_consumer(id, consumer_groups)) {
      // The kernel it joined writes it for the others: say why they do not recompute it.
      for (FusionDecision& decision : group(group_of_[index(id)]).decisions)
        if (decision.subject == id && is_fused(decision.reason))
          decision.text += (decision.text.empty() ? "written: " : "; written: ") + not_recomputed;
      return;
    }
    plan_.not_fused.push_back(
        {.reason = Reason::consumers_in_kernels,
         .subject = id,
         .numbers = {static_cast<std::int64_t>(consumer_groups.size()), ir::flops_per_element(node.op)},
         .text = not_recomputed});
  }
  start_group(id);
}

// Recomputing a value in each kernel that reads it, instead of writing it once and reading it back, is
// torch.compile's rematerialization (its min-cut partitioner) and XLA's duplication of cheap producers, decided
// where the kernels are known. The value and the cheap producers it would be recomputed from form a cone: its
// elementwise ops, broadcasts and slices (index maps: nothing computed) of the value's size, down to values in
// memory anyway (products, reductions, parameters, outputs, values a matmul reads, paddings: read in place or
// written) or smaller ones (per-row values, broadcast sources). Recomputed, each kernel reads the cone's arrays of
// the value's size in place of the written copy: so at most one, and then the write is saved at no cost in bytes;
// the flops are paid again in every kernel but one, within a budget a memory-bound kernel hides (a softmax backward
// recomputing exp(x - max) from the logits it reads anyway, in place of reading a written copy of the
// exponentials; a max pool's backward, in the epilogue of the GEMM computing its cotangent, recomputing the
// windows' maxima from the padded input instead of reading the nine windows and eight partial maxima the forward
// wrote: a small CNN's gradients 41.5 -> 33 ms on Zen 3). Every consumer must be a kernel over the value's own
// number of elements (a larger space would compute each element many times); a GEMM's epilogue computes each
// element once, tile by tile.
namespace {

bool recomputable_op(ir::Op op) {
  return (ir::is_elementwise(op) && ir::info(op).cost != ir::Cost::division) || op == ir::Op::broadcast_to ||
         op == ir::Op::slice;
}

}  // namespace

Scheduler::RecomputeCone Scheduler::recompute_cone(ir::ValueId id) const {
  const std::int64_t elements = graph_.type(id).shape.numel();
  RecomputeCone cone;
  std::set<ir::ValueId> seen;
  std::vector<ir::ValueId> stack = {id};
  // Stops growing once it is too large to be recomputed: a second array, or flops beyond the budget.
  while (!stack.empty() && cone.arrays.size() <= 1 && cone.flops <= recompute_flops_budget) {
    const ir::ValueId value = stack.back();
    stack.pop_back();
    if (!seen.insert(value).second) continue;
    const ir::Node& node = graph_.node(value);
    if (node.op == ir::Op::constant || node.op == ir::Op::iota) continue;
    if (node.type.shape.numel() < elements) continue;  // read at a broadcast map: one value per row or fewer
    // A padding is read in place (a masked read of the value under it) or written: an array either way.
    const bool in_memory = node.op == ir::Op::parameter || !recomputable_op(node.op) || padding_of(graph_, value) ||
                           (value != id && (is_output_[index(value)] || read_from_memory(value)));
    if (in_memory) {
      cone.arrays.push_back(value);
      continue;
    }
    cone.flops += ir::flops_per_element(node.op);
    for (ir::ValueId operand : node.operands) stack.push_back(operand);
  }
  return cone;
}

std::string Scheduler::why_not_recomputed(ir::ValueId id, const std::set<int>& consumer_groups,
                                          const RecomputeCone& cone) const {
  const ir::Node& node = graph_.node(id);
  if (!recomputable_op(node.op))
    return ir::info(node.op).cost == ir::Cost::division
               ? "an op without a vector form is computed once"
               : "only elementwise ops and broadcasts are recomputed where they are read";
  if (is_output_[index(id)]) return "it is returned, so it is written anyway";
  if (read_from_memory(id)) return "a kernel reads it from memory (a matmul's operand, a library kernel's input)";
  if (cone.arrays.size() > 1)
    return "recomputed, it would read " + describe(graph_, cone.arrays[0]) + " and " +
           describe(graph_, cone.arrays[1]) + ", two arrays of its size, in place of the one written";
  const int kernels = static_cast<int>(consumer_groups.size());
  const std::string budget = std::to_string(recompute_flops_budget);
  if (cone.flops > recompute_flops_budget)
    return "recomputing it would cost more than " + budget + " flops/element in each kernel but one";
  if (cone.flops * (kernels - 1) > recompute_flops_budget)
    return "recomputing it would cost " + std::to_string(cone.flops) + " flops/element in each of the " +
           std::to_string(kernels) + " kernels but one, " + std::to_string(cone.flops * (kernels - 1)) +
           " in all, more than " + budget;
  const std::int64_t elements = node.type.shape.numel();
  for (int each : consumer_groups) {
    const Group& consumer = group(each);
    if (consumer.kind != KernelKind::loop && consumer.kind != KernelKind::reduction &&
        consumer.kind != KernelKind::column && !(consumer.kind == KernelKind::gemm && capabilities_.epilogues_as_loops))
      return "a kernel reading it (" + describe(graph_, consumer.members.front()) +
             ") is not a loop, row or column kernel";
    if (consumer.nest.space.numel() != elements)
      return "a kernel reading it (" + describe(graph_, consumer.members.front()) +
             ") runs over another number of elements, and would compute each of its elements many times";
    if (used_through_layout_change(id, each))
      return "a kernel reading it (" + describe(graph_, consumer.members.front()) + ") reshapes it to another layout";
  }
  return "";
}

// A producer read by several kernels is written once; joining one of them saves that kernel's read of it. Kernels
// that reduce come first (a column kernel computing exp(x) while it sums it, instead of a loop kernel writing it
// for the column kernel to read back), then the others in plan order. The producer's other readers must not feed
// the kernel it joins, or the plan would have a cycle. A matmul joins as the epilogue's product, which the GEMM then
// writes too: a gelu layer in a training step is one GEMM writing the pre-activation its backward reads and the
// activation the next layer reads, instead of a GEMM writing the product and a loop kernel reading it back.
bool Scheduler::join_one_consumer(ir::ValueId id, const std::set<int>& consumer_groups) {
  const ir::Node& node = graph_.node(id);
  const bool reduction = ir::is_reduction(node.op) && !ir::is_arg_reduction(node.op);
  if (!is_loop_fusible(node.op) && !reduction && node.op != ir::Op::matmul) return false;
  std::vector<int> candidates(consumer_groups.begin(), consumer_groups.end());
  std::stable_partition(candidates.begin(), candidates.end(), [&](int each) { return group(each).nest.reduces(); });
  for (int candidate : candidates) {
    const KernelKind kind = group(candidate).kind;
    if (kind == KernelKind::library || kind == KernelKind::gemm) continue;
    const bool cycle = std::any_of(consumer_groups.begin(), consumer_groups.end(),
                                   [&](int other) { return other != candidate && reaches(candidate, other); });
    if (!cycle && try_fuse(id, candidate)) return true;
  }
  return false;
}

void Scheduler::merge_consumer_loops(ir::ValueId producer, std::set<int>& consumer_groups) {
  const int first = *consumer_groups.begin();
  const Group& target = group(first);
  for (int each : consumer_groups) {
    const Group& other = group(each);
    if (other.kind != KernelKind::loop || target.kind != KernelKind::loop || !(other.nest.space == target.nest.space))
      return;
  }
  for (int a : consumer_groups)
    for (int b : consumer_groups)
      if (a != b && reaches(a, b)) return;
  // One kernel's boxes are cut for its own concats; two kernels cut differently stay two.
  const auto with_pieces = std::count_if(consumer_groups.begin(), consumer_groups.end(),
                                         [&](int each) { return !piecewise_concats(each).empty(); });
  if (with_pieces > 1) return;
  for (int each : consumer_groups) {
    if (each == first) continue;
    merge_into(first, each,
               {.reason = Reason::merged_consumers, .subject = producer, .values = {group(each).members.front()}});
  }
  consumer_groups = {first};
}

void Scheduler::merge_into(int target, int source, FusionDecision decision) {
  Group& into = group(target);
  Group& from = group(source);
  into.decisions.push_back(std::move(decision));
  for (ir::ValueId member : from.members) {
    into.members.push_back(member);
    group_of_[index(member)] = target;
  }
  into.decisions.insert(into.decisions.end(), from.decisions.begin(), from.decisions.end());
  from.members.clear();
  from.merged_away = true;
}

void Scheduler::merge_siblings() {
  for (std::size_t a = 0; a < groups_.size(); ++a) {
    for (std::size_t b = a + 1; b < groups_.size(); ++b) {
      Group& first = groups_[a];
      Group& second = groups_[b];
      // Loop kernels over one space; row or column kernels over one nest, whose reductions then share passes.
      const bool mergeable =
          first.kind == KernelKind::loop || first.kind == KernelKind::reduction || first.kind == KernelKind::column;
      if (first.merged_away || second.merged_away || !mergeable || first.kind != second.kind ||
          !(first.nest == second.nest))
        continue;
      std::set<ir::ValueId> shared, leaves_a = leaves_of(static_cast<int>(a)),
                                    leaves_b = leaves_of(static_cast<int>(b));
      std::set_intersection(leaves_a.begin(), leaves_a.end(), leaves_b.begin(), leaves_b.end(),
                            std::inserter(shared, shared.begin()));
      if (shared.empty() || reaches(static_cast<int>(a), static_cast<int>(b)) ||
          reaches(static_cast<int>(b), static_cast<int>(a)))
        continue;
      if (!piecewise_concats(static_cast<int>(a)).empty() && !piecewise_concats(static_cast<int>(b)).empty())
        continue;  // as merge_consumer_loops
      merge_into(static_cast<int>(a), static_cast<int>(b),
                 {.reason = Reason::merged_siblings, .subject = *shared.begin(), .values = {second.members.front()}});
    }
  }
}

// A column kernel is worth generating for what it computes while it reduces, or for the reductions that share its
// pass; one reduction of a value in memory (a parameter, another kernel's output) is its standard kernel, which
// reads that value once too.
void Scheduler::finish_columns() {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Group& column = groups_[g];
    if (column.merged_away || column.kind != KernelKind::column) continue;
    // The first member started the group: a reduction, or a loop kernel the reductions then joined (their own
    // decisions say so).
    const ir::ValueId first = column.members.front();
    const bool started = ir::is_reduction(graph_.node(first).op);
    if (column.members.size() > 1 || !started || inlined_[index(graph_.node(first).operands[0])]) {
      if (started)
        column.decisions.insert(
            column.decisions.begin(),
            {.reason = Reason::column_reduction, .subject = first, .numbers = {column.nest.reduced_count()}});
      continue;
    }
    column.kind = KernelKind::library;
    plan_.not_fused.push_back({.reason = Reason::library,
                               .subject = first,
                               .text = "a reduction over the axes before the last of a value in memory: the "
                                       "standard kernel reads it once"});
  }
}

bool Scheduler::is_strided_transpose(const ir::Node& node) const {
  if (node.op != ir::Op::transpose || capabilities_.strided_transpose_bytes == 0) return false;
  const ir::Type& input = graph_.type(node.operands[0]);
  const int rank = input.shape.rank();
  if (rank < 2 || node.type.shape[rank - 1] <= 1 ||
      input.shape.numel() * static_cast<std::int64_t>(size_of(input.dtype)) < capabilities_.strided_transpose_bytes)
    return false;
  std::int64_t stride = static_cast<std::int64_t>(size_of(input.dtype));
  for (int axis = rank - 1; axis > node.attributes.axes.back(); --axis) stride *= input.shape[axis];
  return stride >= strided_transpose_stride_bytes;
}

// The kernel reads the input a tile at a time into strips of rows, as fast as the standard kernel's tiled copy,
// and the copy is not written and read back. The transpose's rows must come from the input's innermost axis.
bool Scheduler::fuse_transpose_by_strips(ir::ValueId id) {
  const ir::Node& node = graph_.node(id);
  const int rank = node.type.shape.rank();
  const std::size_t element_bytes = size_of(node.type.dtype);
  // Tiles of 16 x 16 (the widest vectors' lanes) must fit the last two axes, or the kernel would gather.
  if (node.type.dtype == DType::boolean || (element_bytes != 4 && element_bytes != 8) ||
      node.attributes.axes[static_cast<std::size_t>(rank - 2)] != rank - 1 || node.type.shape[rank - 2] < 16 ||
      node.type.shape[rank - 1] < 16)
    return false;
  const std::set<int> consumers = consumer_groups_of(id);
  if (consumers.size() != 1) return false;
  const int group_index = *consumers.begin();
  if (group_index < 0) return false;
  const Group& consumer = group(group_index);
  if (consumer.kind != KernelKind::loop || !(consumer.nest.space == node.type.shape)) return false;
  if (!piecewise_concats(group_index).empty()) return false;  // strips are tiles of the whole space, not of boxes
  for (ir::ValueId user : users_[index(id)])
    if (group_of_[index(user)] != group_index) return false;
  const IndexMap identity = consumer.nest.broadcast_map(node.type.shape);
  for (const IndexMap& map : reads_of(group_index, consumer.kind, consumer.nest, id))
    if (map != identity) return false;
  if (!try_fuse(id, group_index)) return false;
  group(group_index).decisions.push_back({.reason = Reason::transposed_by_strips, .subject = id});
  return true;
}

std::set<int> Scheduler::consumer_groups_of(ir::ValueId id) const {
  std::set<int> groups;
  for (ir::ValueId user : users_[index(id)]) {
    if (inlined_[index(user)]) {
      std::set<int> further = consumer_groups_of(user);
      groups.insert(further.begin(), further.end());
    } else {
      groups.insert(group_of_[index(user)]);
    }
  }
  return groups;
}

bool Scheduler::reads_memory_of(ir::ValueId user, ir::ValueId id) const {
  const int each = group_of_[index(user)];
  const ir::Node& node = graph_.node(user);
  const bool layout_change =
      is_reshape(node.op) && !is_unit_reshape(graph_, node) && graph_.node(id).op != ir::Op::parameter;
  // take_along_axis picks from its values where they lie in memory.
  const bool gathered = node.op == ir::Op::take_along_axis && node.operands[0] == id;
  // A view a GEMM gathers, and a padding read in place, read what is under them where it lies (but not their
  // constants, whose value they use).
  const bool padding = inlined_[index(user)] && node.op == ir::Op::concat && !piecewise_[index(user)];
  const bool viewed = (viewed_[index(user)] || padding) && graph_.node(id).op != ir::Op::constant;
  return node.op == ir::Op::matmul || layout_change || gathered || viewed ||
         (each >= 0 && group(each).kind == KernelKind::library);
}

bool Scheduler::read_from_memory(ir::ValueId id) const {
  return std::any_of(users_[index(id)].begin(), users_[index(id)].end(),
                     [&](ir::ValueId user) { return reads_memory_of(user, id); });
}

bool Scheduler::read_through_padding(ir::ValueId id, const std::set<int>& consumer_groups) const {
  const std::optional<Padding> padding = padding_of(graph_, id);
  if (!capabilities_.padding_in_place || !padding || is_output_[index(id)] || consumer_groups.empty()) return false;
  // Loop kernels, and GEMM epilogues (row by row, as a loop kernel: a max pool's backward masks recompute its
  // windows from the padded input in the epilogue of the product giving its cotangent).
  for (int each : consumer_groups) {
    const KernelKind kind = each < 0 ? KernelKind::library : group(each).kind;
    if (kind != KernelKind::loop && !(kind == KernelKind::gemm && capabilities_.epilogues_as_loops) &&
        kind != KernelKind::column)
      return false;
  }
  for (ir::ValueId user : users_[index(id)]) {
    const bool padding_above =
        inlined_[index(user)] && graph_.node(user).op == ir::Op::concat && !piecewise_[index(user)];
    // Under another padding read in place, with the same constant: one masked read of the value under both.
    if (padding_above &&
        !same_constant_value(graph_.node(padding_of(graph_, user)->constant), graph_.node(padding->constant)))
      return false;
    if (!padding_above && reads_memory_of(user, id)) return false;
  }
  return true;
}

void Scheduler::start_group(ir::ValueId id) {
  const ir::Node& node = graph_.node(id);
  Group started;
  started.members.push_back(id);
  started.nest = LoopNest::over(node.type.shape);
  const std::optional<ReductionNest> reduction = reduction_nest(graph_, node, capabilities_);
  if (is_loop_fusible(node.op) && !is_strided_transpose(node)) {
    started.kind = KernelKind::loop;
  } else if (reduction) {
    started.kind = reduction->kind;
    started.nest = reduction->nest;
  } else if (is_generated_gemm(graph_, node, capabilities_)) {
    started.kind = KernelKind::gemm;
  } else {
    started.kind = KernelKind::library;
    plan_.not_fused.push_back({.reason = Reason::library, .subject = id, .text = library_reason(node)});
  }
  group_of_[index(id)] = static_cast<int>(groups_.size());
  groups_.push_back(std::move(started));
}

std::string Scheduler::library_reason(const ir::Node& node) const {
  if (node.op == ir::Op::matmul) {
    if (!capabilities_.multiplies(node.type.dtype))
      return "the generated GEMM does not multiply " + std::string(to_string(node.type.dtype)) + " here";
    const int left = graph_.type(node.operands[0]).shape.rank(), right = graph_.type(node.operands[1]).shape.rank();
    if (right != 2) return right > 2 ? "batched matmul: the right operand has batch axes" : "a matrix-vector product";
    return left < 2 ? "a vector-matrix product" : "batched matmul with a transposed left operand";
  }
  if (ir::is_reduction(node.op)) {
    if (ir::is_arg_reduction(node.op)) return std::string(ir::name(node.op)) + " is not generated";
    return capabilities_.column_kernels ? "the reduced axes are neither the trailing ones nor a run before the last"
                                        : "the reduced axes are not the trailing ones";
  }
  if (ir::is_scan(node.op)) return "a scan's standard kernel combines each line in order";
  if (ir::has_regions(node.op)) return "control flow: its regions run kernels compiled for them";
  if (node.op == ir::Op::result) return "a control node's result";
  if (is_strided_transpose(node))
    return "it moves the innermost axis: the standard kernel copies it in tiles transposed in registers, which "
           "its consumers read in order, where they would gather a lane per cache line";
  return "no generated form for this op";
}

std::set<int> Scheduler::producers_of(int group_index) const {
  std::set<int> producers;
  for (ir::ValueId member : group(group_index).members) collect_producers(member, group_index, producers);
  return producers;
}

void Scheduler::collect_producers(ir::ValueId value, int group_index, std::set<int>& producers) const {
  for (ir::ValueId operand : graph_.node(value).operands) {
    if (inlined_[index(operand)])
      collect_producers(operand, group_index, producers);
    else if (group_of_[index(operand)] >= 0 && group_of_[index(operand)] != group_index)
      producers.insert(group_of_[index(operand)]);
  }
}

bool Scheduler::reaches(int from, int to) const {
  std::vector<int> stack{from};
  std::set<int> seen;
  while (!stack.empty()) {
    const int current = stack.back();
    stack.pop_back();
    if (current == to) return true;
    if (!seen.insert(current).second) continue;
    for (int producer : producers_of(current)) stack.push_back(producer);
  }
  return false;
}

std::set<ir::ValueId> Scheduler::leaves_of(int group_index) const {
  std::set<ir::ValueId> leaves;
  std::function<void(ir::ValueId)> visit = [&](ir::ValueId value) {
    for (ir::ValueId operand : graph_.node(value).operands) {
      if (inlined_[index(operand)])
        visit(operand);
      else if (group_of_[index(operand)] != group_index)
        leaves.insert(operand);
    }
  };
  for (ir::ValueId member : group(group_index).members) visit(member);
  return leaves;
}

FusedKernel Scheduler::make_kernel(int group_index) const {
  const Group& source = group(group_index);
  FusedKernel kernel;
  kernel.kind = source.kind;
  kernel.space = source.nest.space;
  kernel.reduced_axes = source.nest.reduced_count();
  kernel.decisions = source.decisions;
  std::set<ir::ValueId> members(source.members.begin(), source.members.end());
  std::function<void(ir::ValueId)> pull_inlined = [&](ir::ValueId value) {
    for (ir::ValueId operand : graph_.node(value).operands)
      if (inlined_[index(operand)] && members.insert(operand).second) pull_inlined(operand);
  };
  for (ir::ValueId member : source.members) pull_inlined(member);
  kernel.members.assign(members.begin(), members.end());  // std::set is sorted: graph order
  if (kernel.kind == KernelKind::loop && kernel.members.size() == 1 && is_reshape(graph_.node(kernel.members[0]).op)) {
    // Nothing else to compute: copying the operand into a new layout would only move the same elements in the
    // same order.
    kernel.kind = KernelKind::view;
    kernel.decisions.push_back({.reason = Reason::view, .subject = kernel.members[0]});
  }
  std::set<ir::ValueId> inputs_seen;
  for (ir::ValueId member : kernel.members) {
    for (ir::ValueId operand : graph_.node(member).operands)
      if (!members.count(operand) && inputs_seen.insert(operand).second) kernel.inputs.push_back(operand);
    if (inlined_[index(member)] || !escapes(member, group_index)) continue;
    kernel.outputs.push_back(member);
    // Stored once per kept coordinate: a value of the kept axes' shape, and a reduction's own result.
    const Shape& shape = graph_.type(member).shape;
    const bool reduces =
        kernel.kind == KernelKind::reduction || kernel.kind == KernelKind::column || kernel.kind == KernelKind::gemm;
    if (reduces && source.nest.is_kept_shape(shape) &&
        (!(shape == source.nest.space) || ir::is_reduction(graph_.node(member).op)))
      kernel.row_outputs.push_back(member);
  }
  if (kernel.kind == KernelKind::loop || kernel.kind == KernelKind::gemm || kernel.kind == KernelKind::column)
    note_padding(kernel);
  if (const std::set<ir::ValueId> concats = piecewise_concats(group_index); !concats.empty()) {
    kernel.piecewise.assign(concats.begin(), concats.end());
    kernel.pieces = *boxes(group_index);  // read_piecewise and the merges kept them possible
  }
  for (ir::ValueId member : kernel.members) {
    const ir::Node& matmul = graph_.node(member);
    if (matmul.op != ir::Op::matmul || !viewed_[index(matmul.operands[0])]) continue;
    const ir::ValueId operand = matmul.operands[0];
    kernel.gathered = gathered_parts(operand);
    std::vector<ir::ValueId> sources;
    bool padded = false;
    for (const GatheredView& view : kernel.gathered) {
      if (std::find(sources.begin(), sources.end(), view.source) == sources.end()) sources.push_back(view.source);
      const Shape& part = graph_.type(view.part).shape;
      const Shape& whole = graph_.type(view.source).shape;
      for (int axis = 0; axis < part.rank(); ++axis) {
        const auto a = static_cast<std::size_t>(axis);
        padded = padded || (part[axis] > 0 &&
                            (view.start[a] < 0 || view.start[a] + (part[axis] - 1) * view.step[a] >= whole[axis]));
      }
    }
    kernel.decisions.push_back({.reason = Reason::gathered_operand,
                                .subject = operand,
                                .values = std::move(sources),
                                .numbers = {static_cast<std::int64_t>(kernel.gathered.size()), padded ? 1 : 0}});
  }
  return kernel;
}

std::vector<GatheredView> Scheduler::gathered_parts(ir::ValueId operand) const {
  const ir::ValueId concat = gathered_concat(graph_, operand);
  std::vector<GatheredView> views;
  for (ir::ValueId part : graph_.node(concat).operands) {
    const int rank = graph_.type(part).shape.rank();
    GatheredView view{part, part, std::vector<std::int64_t>(static_cast<std::size_t>(rank), 0),
                      std::vector<std::int64_t>(static_cast<std::size_t>(rank), 1)};
    // Down the slices and zero paddings to the value in memory: a slice maps the view's coordinates into its
    // operand's, a padding moves them by what it puts before its operand (gathered_view: a slice under a padding
    // keeps the padded axes whole, so the padding's coordinates stay outside the value at the bottom).
    for (ir::ValueId source = part; viewed_[index(source)];) {
      const ir::Node& node = graph_.node(source);
      if (node.op == ir::Op::slice) {
        for (std::size_t axis = 0; axis < view.start.size(); ++axis) {
          view.start[axis] = node.attributes.start[axis] + view.start[axis] * node.attributes.step[axis];
          view.step[axis] *= node.attributes.step[axis];
        }
        source = node.operands[0];
      } else {
        const std::optional<Padding> padding = padding_of(graph_, source);
        if (!padding)
          throw kiln::CompileError("matmul", "a gathered view that is neither a slice nor a zero padding",
                                   std::string());
        view.start[static_cast<std::size_t>(padding->axis)] -= padding->before;
        source = padding->inner;
      }
      view.source = source;
    }
    views.push_back(std::move(view));
  }
  return views;
}

void Scheduler::note_padding(FusedKernel& kernel) const {
  // (A zero padding a GEMM gathers as it packs A is a view, noted as the gathered operand's.)
  auto padded_in_kernel = [&](ir::ValueId value) {
    return inlined_[index(value)] && !viewed_[index(value)] && graph_.node(value).op == ir::Op::concat &&
           !piecewise_[index(value)] &&
           std::find(kernel.members.begin(), kernel.members.end(), value) != kernel.members.end();
  };
  for (ir::ValueId member : kernel.members) {
    if (!padded_in_kernel(member)) continue;
    const bool outermost = std::none_of(users_[index(member)].begin(), users_[index(member)].end(), padded_in_kernel);
    if (!outermost) continue;
    std::vector<std::int64_t> axes;
    ir::ValueId source = member;
    for (; padded_in_kernel(source); source = padding_of(graph_, source)->inner)
      axes.push_back(graph_.node(source).attributes.axis);
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    kernel.decisions.push_back({.reason = Reason::padding_in_place,
                                .subject = member,
                                .values = {source, padding_of(graph_, member)->constant},
                                .numbers = std::move(axes)});
  }
}

FusionPlan Scheduler::build_plan() {
  // Order kernels so that each runs after the kernels it reads from.
  std::vector<int> order;
  std::vector<int> state(groups_.size(), 0);  // 0 new, 1 visiting, 2 done
  std::function<void(int)> visit = [&](int group_index) {
    if (state[static_cast<std::size_t>(group_index)] != 0) return;
    state[static_cast<std::size_t>(group_index)] = 1;
    for (int producer : producers_of(group_index)) visit(producer);
    state[static_cast<std::size_t>(group_index)] = 2;
    order.push_back(group_index);
  };
  // Visit in the order of each group's first member, for a stable plan.
  std::vector<std::pair<ir::ValueId, int>> firsts;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].merged_away) continue;
    firsts.emplace_back(*std::min_element(groups_[g].members.begin(), groups_[g].members.end()), static_cast<int>(g));
  }
  std::sort(firsts.begin(), firsts.end());
  for (const auto& [first, group_index] : firsts) visit(group_index);
  for (int group_index : order) plan_.kernels.push_back(make_kernel(group_index));
  place_concat_operands(plan_);
  return std::move(plan_);
}

}  // namespace kiln::compiler
