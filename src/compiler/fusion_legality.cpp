// The scheduler's rule: whether a producer can join a group, decided by the index maps at which the group reads it
// (fusion.h says what the rule is for each kind of producer).

#include "compiler/fusion_scheduler.h"

#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <map>
#include <set>

namespace kiln::compiler {

bool Scheduler::read_outside(ir::ValueId value, int group_index) const {
  if (is_output_[index(value)]) return true;
  const std::set<int> consumers = consumer_groups_of(value);
  return std::any_of(consumers.begin(), consumers.end(), [&](int each) { return each != group_index; });
}

bool Scheduler::escapes(ir::ValueId value, int group_index) const {
  if (is_output_[index(value)]) return true;
  return std::any_of(users_[index(value)].begin(), users_[index(value)].end(), [&](ir::ValueId user) {
    // A concat read piecewise is computed where its readers are; a padding reads the padded value in memory.
    if (piecewise_[index(user)]) {
      const std::set<int> readers = consumer_groups_of(user);
      return std::any_of(readers.begin(), readers.end(), [&](int each) { return each != group_index; });
    }
    return group_of_[index(user)] != group_index || inlined_[index(user)];
  });
}

std::optional<IndexMap> Scheduler::storage_map(KernelKind kind, const LoopNest& nest, ir::ValueId value) const {
  const Shape& shape = graph_.type(value).shape;
  if (shape == nest.space) return nest.broadcast_map(shape);
  if (!nest.is_kept_shape(shape)) return std::nullopt;
  // Row and column kernels store any value of a row (a column) after the passes that complete it; a GEMM's
  // epilogue stores only its full reductions, once every tile is folded in.
  if (kind == KernelKind::reduction || kind == KernelKind::column) return nest.kept_map(shape);
  if (kind == KernelKind::gemm && ir::is_reduction(graph_.node(value).op)) return nest.kept_map(shape);
  return std::nullopt;
}

ir::ValueId Scheduler::unstorable_output(int group_index, KernelKind kind, const LoopNest& nest) const {
  for (ir::ValueId member : group(group_index).members)
    if (escapes(member, group_index) && !storage_map(kind, nest, member)) return member;
  return -1;
}

std::vector<IndexMap> Scheduler::reads_of(int group_index, KernelKind kind, const LoopNest& nest,
                                          ir::ValueId value) const {
  const Group& reader = group(group_index);
  // Every value the group computes, with the maps it is computed at; walked from the last value to the first, so
  // that a value's maps are complete (all its readers have been walked) before it passes them to its operands.
  std::map<ir::ValueId, std::vector<IndexMap>, std::greater<>> maps;
  auto add = [&](ir::ValueId target, const IndexMap& map) {
    std::vector<IndexMap>& list = maps[target];
    if (std::find(list.begin(), list.end(), map) == list.end()) list.push_back(map);
  };
  for (ir::ValueId member : reader.members)
    if (escapes(member, group_index))
      if (const std::optional<IndexMap> stored = storage_map(kind, nest, member)) add(member, *stored);
  for (auto entry = maps.begin(); entry != maps.end(); ++entry) {
    const ir::ValueId current = entry->first;
    if (current == value || (group_of_[index(current)] != group_index && !inlined_[index(current)])) continue;
    const ir::Node& node = graph_.node(current);
    if (ir::is_reduction(node.op)) {
      add(node.operands[0], nest.broadcast_map(graph_.type(node.operands[0]).shape));
      continue;
    }
    // A concat read piecewise reads each operand in its own boxes, at the concat's map moved back by where the
    // operand starts (the maps hold there only).
    if (node.op == ir::Op::concat && piecewise_[index(current)]) {
      const auto axis = static_cast<std::size_t>(node.attributes.axis);
      std::int64_t start = 0;
      for (ir::ValueId operand : node.operands) {
        for (IndexMap map : entry->second) {
          map[axis].offset -= start;
          add(operand, map);
        }
        start += graph_.type(operand).shape[static_cast<int>(axis)];
      }
      continue;
    }
    // A matmul reads its operands from memory (or gathers them: views), a reshape that changes the layout reads its
    // operand's buffer, and a padding read in place reads the padded value where it lies.
    if (node.op == ir::Op::matmul || node.op == ir::Op::concat || viewed_[index(current)] ||
        (is_reshape(node.op) && !is_unit_reshape(graph_, node)))
      continue;
    // take_along_axis picks its values where they lie in memory; only its indices are computed at maps. (Adding
    // an operand's maps leaves this entry where it is: a std::map's nodes stay put.)
    const std::size_t first_operand = node.op == ir::Op::take_along_axis ? 1 : 0;
    for (std::size_t operand = first_operand; operand < node.operands.size(); ++operand)
      for (const IndexMap& map : entry->second) add(node.operands[operand], operand_map(graph_, node, operand, map));
  }
  const auto found = maps.find(value);
  return found == maps.end() ? std::vector<IndexMap>{} : found->second;
}

std::set<ir::ValueId> Scheduler::inlined_concats(int group_index) const {
  std::vector<ir::ValueId> stack(group(group_index).members);
  std::set<ir::ValueId> seen, concats;
  while (!stack.empty()) {
    const ir::ValueId value = stack.back();
    stack.pop_back();
    for (ir::ValueId operand : graph_.node(value).operands) {
      if (!inlined_[index(operand)] || !seen.insert(operand).second) continue;
      if (graph_.node(operand).op == ir::Op::concat) concats.insert(operand);
      stack.push_back(operand);
    }
  }
  return concats;
}

bool Scheduler::reads_padding(int group_index) const {
  const std::set<ir::ValueId> concats = inlined_concats(group_index);
  return std::any_of(concats.begin(), concats.end(), [&](ir::ValueId concat) { return !piecewise_[index(concat)]; });
}

namespace {

// What a GEMM gathers as it packs A, view by view: a concat along the last axis (its parts side by side, not a
// padding), a slice stepping by 1 along the last axis (a part), a +0 padding along an axis before the last.
bool gatherable_concat(const ir::Graph& graph, ir::ValueId value) {
  const ir::Node& concat = graph.node(value);
  const int rank = concat.type.shape.rank();
  return concat.op == ir::Op::concat && !padding_of(graph, value) && concat.attributes.axis == rank - 1 &&
         rank - 1 <= kernels::cpu::kGatherMaxAxes;
}

bool slice_view(const ir::Node& node) {
  const std::vector<std::int64_t>& step = node.attributes.step;
  return node.op == ir::Op::slice && step.back() == 1 &&
         std::all_of(step.begin(), step.end(), [](std::int64_t s) { return s >= 1; });
}

// A slice gathered under the views of `users`. Under a padding it must keep every axis but the last whole: the
// packing tells the padding's zeros from memory by the coordinates in the value at the bottom of the views, so a
// slice cropping a padded axis would turn the padding's zeros into its operand's elements (a grouped
// convolution's channels are such a slice, of the last axis alone).
bool gathered_slice(const ir::Graph& graph, ir::ValueId value, const std::vector<ir::ValueId>& users) {
  const ir::Node& node = graph.node(value);
  if (!slice_view(node)) return false;
  const bool under_padding =
      std::any_of(users.begin(), users.end(), [&](ir::ValueId user) { return padding_of(graph, user).has_value(); });
  if (!under_padding) return true;
  const Shape& whole = graph.type(node.operands[0]).shape;
  for (int axis = 0; axis + 1 < whole.rank(); ++axis) {
    const auto a = static_cast<std::size_t>(axis);
    if (node.attributes.start[a] != 0 || node.attributes.step[a] != 1 || node.type.shape[axis] != whole[axis])
      return false;
  }
  return true;
}

bool zero_padding_view(const ir::Graph& graph, ir::ValueId value) {
  const std::optional<Padding> padding = padding_of(graph, value);
  return padding && padding->axis < graph.type(value).shape.rank() - 1 &&
         ir::is_positive_zero(graph.node(padding->constant));
}

// Whether `reader` is an f32 matmul (gathered rows are sgemm_gathered's) with `operand` as its left operand only.
bool reads_as_left_operand(const ir::Graph& graph, ir::ValueId reader, ir::ValueId operand) {
  const ir::Node& matmul = graph.node(reader);
  return matmul.op == ir::Op::matmul && matmul.operands[0] == operand && matmul.operands[1] != operand &&
         matmul.type.dtype == DType::f32;
}

}  // namespace

bool Scheduler::gathered_view(ir::ValueId id, int group_index) const {
  const Group& gemm = group(group_index);
  const ir::Node& node = graph_.node(id);
  if (!capabilities_.gathered_gemm_operands || gemm.kind != KernelKind::gemm || is_output_[index(id)]) return false;
  const std::vector<ir::ValueId>& users = users_[index(id)];
  const int rank = node.type.shape.rank();
  // The matmul's left operand, read by it alone: the parts side by side along the last axis.
  // Transposed only as a matrix: its rows are then the product's depth (a batch of transposes is no GEMM's).
  if (node.op == ir::Op::concat && users.size() == 1 && graph_.node(users.front()).op == ir::Op::matmul)
    return group_of_[index(users.front())] == group_index && reads_as_left_operand(graph_, users.front(), id) &&
           (!graph_.node(users.front()).attributes.transpose_a || rank == 2) && gatherable_concat(graph_, id);
  // Under the operand, read only by views of it.
  const bool under_views = !users.empty() && std::all_of(users.begin(), users.end(), [&](ir::ValueId user) {
    return viewed_[index(user)] && group_of_[index(user)] == group_index;
  });
  if (!under_views) return false;
  if (node.op == ir::Op::slice) return gathered_slice(graph_, id, users);
  // A convolution's padding: zeros along an axis before the last, under the slices of its windows (or under
  // another such padding), or a part itself (a transposed convolution's windows of the cotangent are paddings of
  // it where nothing crops).
  return zero_padding_view(graph_, id) && std::all_of(users.begin(), users.end(), [&](ir::ValueId user) {
           return graph_.node(user).op == ir::Op::slice || zero_padding_view(graph_, user) ||
                  gatherable_concat(graph_, user);
         });
}

ir::ValueId Scheduler::rows_reshape_gathered(ir::ValueId user, ir::ValueId concat) const {
  const ir::Node& node = graph_.node(user);
  if (node.op != ir::Op::reshape || is_output_[index(user)] || node.type.shape.rank() != 2) return -1;
  const Shape& before = graph_.type(concat).shape;
  if (node.type.shape[1] != before[before.rank() - 1]) return -1;
  // Alone in its group (a view of the concat in memory, had it been written), read by one matmul as its left operand.
  const int own = group_of_[index(user)];
  const std::vector<ir::ValueId>& readers = users_[index(user)];
  if (own < 0 || group(own).members.size() != 1 || readers.size() != 1) return -1;
  const int gemm = group_of_[index(readers.front())];
  return reads_as_left_operand(graph_, readers.front(), user) && gemm >= 0 && group(gemm).kind == KernelKind::gemm
             ? readers.front()
             : -1;
}

bool Scheduler::shared_gathered_view(ir::ValueId id) const {
  const ir::Node& node = graph_.node(id);
  const std::vector<ir::ValueId>& users = users_[index(id)];
  if (!capabilities_.gathered_gemm_operands || is_output_[index(id)] || users.empty()) return false;
  const int rank = node.type.shape.rank();
  if (node.op == ir::Op::concat && !padding_of(graph_, id)) {
    if (!gatherable_concat(graph_, id)) return false;
    std::set<int> gemms;
    bool through_reshape = false;
    for (ir::ValueId user : users) {
      const int each = group_of_[index(user)];
      const bool left_operand = reads_as_left_operand(graph_, user, id) &&
                                (!graph_.node(user).attributes.transpose_a || rank == 2) && each >= 0 &&
                                group(each).kind == KernelKind::gemm;
      const ir::ValueId matmul = left_operand ? user : rows_reshape_gathered(user, id);
      if (matmul < 0) return false;
      through_reshape = through_reshape || matmul != user;
      gemms.insert(group_of_[index(matmul)]);
    }
    return gemms.size() > 1 || through_reshape;
  }
  // Under such a concat: read only by views, one of them shared.
  bool shared = false;
  for (ir::ValueId user : users) {
    if (!viewed_[index(user)]) return false;
    shared = shared || inlined_[index(user)];
  }
  if (!shared) return false;
  return node.op == ir::Op::slice ? gathered_slice(graph_, id, users) : zero_padding_view(graph_, id);
}

bool Scheduler::gathers(int group_index) const {
  const std::vector<ir::ValueId>& members = group(group_index).members;
  return std::any_of(members.begin(), members.end(),
                     [&](ir::ValueId member) { return graph_.node(member).op == ir::Op::take_along_axis; });
}

ir::ValueId Scheduler::reader_in(ir::ValueId value, int group_index) const {
  for (ir::ValueId user : users_[index(value)]) {
    if (group_of_[index(user)] == group_index) return user;
    if (inlined_[index(user)] && reader_in(user, group_index) >= 0) return user;
  }
  return -1;
}

bool Scheduler::used_through_layout_change(ir::ValueId id, int group_index) const {
  for (ir::ValueId user : users_[index(id)]) {
    const ir::Node& node = graph_.node(user);
    if (group_of_[index(user)] == group_index && is_reshape(node.op) && !is_unit_reshape(graph_, node)) return true;
  }
  return false;
}

bool Scheduler::try_fuse(ir::ValueId id, int group_index) {
  const Group& consumer = group(group_index);
  const ir::Node& node = graph_.node(id);
  auto refuse = [&](Reason reason) {
    plan_.not_fused.push_back({.reason = reason, .subject = id, .kernel = consumer.members.front()});
    return false;
  };
  if (consumer.kind == KernelKind::library) return refuse(Reason::library_consumer);
  if (gathered_view(id, group_index)) {
    // Read as the GEMM packs its rows: nothing is computed, and the values under the views stay in memory.
    group(group_index).members.push_back(id);
    group_of_[index(id)] = group_index;
    viewed_[index(id)] = true;
    return true;
  }
  for (ir::ValueId user : users_[index(id)])
    if (viewed_[index(user)] && (group_of_[index(user)] == group_index || inlined_[index(user)]))
      return refuse(Reason::gathered_from_memory);
  // A kernel of one reshape becomes a view of its operand's buffer (make_kernel), so the operand's kernel keeps
  // its own shape: log(sum) + max squeezed at the end of a keepdims row reduction (reduce_logsumexp) stays in
  // the row kernel, and relu(x w) reshaped stays the product's epilogue. Fused into the reshape's space they
  // would need a kernel of their own, with the same bytes to write.
  if (consumer.kind == KernelKind::loop && consumer.members.size() == 1 &&
      is_reshape(graph_.node(consumer.members[0]).op))
    return refuse(Reason::view_consumer);
  for (ir::ValueId user : users_[index(id)])
    if (group_of_[index(user)] == group_index && graph_.node(user).op == ir::Op::matmul)
      return refuse(Reason::matmul_operand);
  if (used_through_layout_change(id, group_index)) return refuse(Reason::layout_change);
  for (ir::ValueId user : users_[index(id)]) {
    const ir::Node& reader = graph_.node(user);
    if (group_of_[index(user)] == group_index && reader.op == ir::Op::take_along_axis && reader.operands[0] == id)
      return refuse(Reason::gathered_from_memory);
    if (inlined_[index(user)] && reader.op == ir::Op::concat && !piecewise_[index(user)])
      return refuse(Reason::padded_in_memory);
  }
  if (is_loop_fusible(node.op)) return fuse_loop_fusible(id, group_index);
  if (node.op == ir::Op::take_along_axis && capabilities_.gathers_in_kernels) {
    if (consumer.kind != KernelKind::loop && consumer.kind != KernelKind::reduction)
      return refuse(Reason::gather_unsupported);
    return fuse_loop_fusible(id, group_index);
  }
  if (ir::is_reduction(node.op) && !ir::is_arg_reduction(node.op)) return fuse_reduction(id, group_index);
  if (node.op == ir::Op::matmul) return fuse_matmul(id, group_index);
  return refuse(Reason::no_rule);
}

bool Scheduler::fuse_loop_fusible(ir::ValueId id, int group_index) {
  Group& consumer = group(group_index);
  const ir::Node& node = graph_.node(id);
  const Shape& shape = node.type.shape;
  const Shape& space = consumer.nest.space;
  const int cost = ir::flops_per_element(node.op);
  auto refuse = [&](Reason reason, std::vector<std::int64_t> numbers = {}) {
    plan_.not_fused.push_back(
        {.reason = reason, .subject = id, .kernel = consumer.members.front(), .numbers = std::move(numbers)});
    return false;
  };
  std::vector<IndexMap> maps = reads_of(group_index, consumer.kind, consumer.nest, id);
  const bool written = read_outside(id, group_index);
  // The attention kernel's row code leaves one result, in its strip of scores (kiln-fuzz --gradients, seed 2: a
  // constant read by the row code and by another matmul joined it as a second output that nothing wrote).
  if (written && consumer.kind == KernelKind::attention) return refuse(Reason::attention_output);
  if (written) {
    const std::optional<IndexMap> stored = storage_map(consumer.kind, consumer.nest, id);
    if (!stored) {
      if (shape.numel() == space.numel()) return refuse(Reason::output_layout);
      const bool per_row = std::all_of(maps.begin(), maps.end(), [&](const IndexMap& map) {
        std::vector<bool> rows(static_cast<std::size_t>(space.rank()), false);
        for (int axis = 0; axis < consumer.first_row_axis(); ++axis) rows[static_cast<std::size_t>(axis)] = true;
        return depends_only_on(map, rows);
      });
      return refuse(per_row && consumer.kind != KernelKind::gemm ? Reason::output_smaller : Reason::output_shape);
    }
    if (std::find(maps.begin(), maps.end(), *stored) == maps.end()) maps.push_back(*stored);
  }
  // Computed once per map it is read at: an expensive value read at two (x and its transpose) is computed twice.
  if (maps.size() > 1 && cost > 1)
    return refuse(Reason::recompute_cost, {static_cast<std::int64_t>(maps.size()), cost});
  const std::int64_t elements = computed_elements(id);
  Reason reason = elements == shape.numel() ? Reason::same_size : Reason::in_its_piece;
  std::vector<std::int64_t> numbers;
  if (elements != space.numel()) {
    std::vector<bool> rows(static_cast<std::size_t>(space.rank()), false);
    for (int axis = 0; axis < consumer.first_row_axis(); ++axis) rows[static_cast<std::size_t>(axis)] = true;
    const bool per_row =
        consumer.kind != KernelKind::gemm &&
        std::all_of(maps.begin(), maps.end(), [&](const IndexMap& map) { return depends_only_on(map, rows); });
    if (per_row) {
      reason = Reason::per_row;
    } else if (cost <= 1) {
      reason = Reason::broadcast;
      numbers = {cost};
    } else {
      return refuse(Reason::recompute_cost, {space.numel() / std::max<std::int64_t>(elements, 1), cost});
    }
  }
  std::string note = written ? "also written out (multi-output fusion)" : "";
  if (node.op == ir::Op::take_along_axis)
    note += (note.empty() ? "" : "; ") + std::string("its values read where they lie, at its indices' coordinates");
  consumer.members.push_back(id);
  consumer.decisions.push_back(
      {.reason = reason, .subject = id, .numbers = std::move(numbers), .text = std::move(note)});
  group_of_[index(id)] = group_index;
  return true;
}

bool Scheduler::fuse_reduction(ir::ValueId id, int group_index) {
  Group& consumer = group(group_index);
  const ir::Node& node = graph_.node(id);
  const Shape& input = graph_.type(node.operands[0]).shape;
  auto refuse = [&](Reason reason, std::vector<ir::ValueId> values = {}, std::vector<IndexMap> maps = {}) {
    plan_.not_fused.push_back({.reason = reason,
                               .subject = id,
                               .kernel = consumer.members.front(),
                               .values = std::move(values),
                               .maps = std::move(maps)});
    return false;
  };
  auto accept = [&](Reason reason, KernelKind kind, const LoopNest& nest, std::vector<std::int64_t> numbers = {}) {
    consumer.kind = kind;
    consumer.nest = nest;
    consumer.members.push_back(id);
    consumer.decisions.push_back({.reason = reason, .subject = id, .numbers = std::move(numbers)});
    group_of_[index(id)] = group_index;
    return true;
  };
  const std::optional<ReductionNest> own = reduction_nest(graph_, node, capabilities_);
  if (consumer.kind == KernelKind::gemm) {
    // The epilogue sees one tile at a time: it can accumulate a reduction of the whole product, which nothing in
    // the kernel reads before the last tile.
    if (!(input == consumer.nest.space) || node.attributes.axes.size() != static_cast<std::size_t>(input.rank()))
      return refuse(Reason::partial_epilogue_reduction);
    if (const ir::ValueId reader = reader_in(id, group_index); reader >= 0)
      return refuse(Reason::reads_full_reduction, {reader, id});
    return accept(Reason::epilogue_reduction, KernelKind::gemm, {input, 0, input.rank()});
  }
  if (!own) return refuse(Reason::reduced_axes_unsupported);
  // A full reduction read by scalar ops (a mean's scale, a bf16 sum's rounding) would take the elementwise chain
  // of a product into one row kernel, a thread's, where the GEMM's epilogue accumulates it block by block on all.
  if (consumer.kind == KernelKind::loop && consumer.nest.space.rank() == 0 &&
      node.attributes.axes.size() == static_cast<std::size_t>(input.rank()))
    if (const ir::ValueId product = generated_product_under(node.operands[0]); product >= 0)
      return refuse(Reason::product_epilogue_reduction, {product});
  if (own->kind != KernelKind::reduction && gathers(group_index)) return refuse(Reason::gather_unsupported);
  if (own->kind != KernelKind::column && reads_padding(group_index)) return refuse(Reason::padding_unsupported);
  if (!piecewise_concats(group_index).empty()) return refuse(Reason::pieces_unsupported);
  const LoopNest& nest = own->nest;
  Reason reason = own->kind == KernelKind::column ? Reason::column_consumers : Reason::row_reduction;
  if (consumer.kind == KernelKind::loop) {
    // Over the reduction's input, or per-row consumers of its result (the nest grows to the input's space, and
    // the kernel's values become one per kept coordinate).
    if (!(input == consumer.nest.space) && !nest.is_kept_shape(consumer.nest.space))
      return refuse(Reason::different_space);
  } else {
    if (!(input == consumer.nest.space)) return refuse(Reason::different_space);
    if (!(nest == consumer.nest) || own->kind != consumer.kind) return refuse(Reason::different_axes);
    reason = Reason::another_reduction;
  }
  if (const ir::ValueId unstored = unstorable_output(group_index, own->kind, nest); unstored >= 0)
    return refuse(Reason::outputs_not_stored, {unstored});
  const std::vector<IndexMap> reads = reads_of(group_index, own->kind, nest, id);
  const IndexMap home = nest.kept_map(node.type.shape);
  for (const IndexMap& map : reads)
    if (map != home) return refuse(Reason::read_elsewhere, {}, {map, home});
  // Written for other kernels too (multi-output), its result must be one the nest stores.
  if (read_outside(id, group_index) && !storage_map(own->kind, nest, id)) return refuse(Reason::output_shape);
  return accept(reason, own->kind, nest);
}

ir::ValueId Scheduler::generated_product_under(ir::ValueId value) const {
  const Shape& shape = graph_.type(value).shape;
  std::vector<ir::ValueId> pending = {value};
  std::set<ir::ValueId> seen;
  while (!pending.empty()) {
    const ir::ValueId id = pending.back();
    pending.pop_back();
    if (!seen.insert(id).second) continue;
    const ir::Node& node = graph_.node(id);
    if (!(node.type.shape == shape)) continue;
    if (node.op == ir::Op::matmul) {
      if (is_generated_gemm(graph_, node, capabilities_)) return id;
      continue;
    }
    if (ir::is_elementwise(node.op))
      for (ir::ValueId operand : node.operands) pending.push_back(operand);
  }
  return -1;
}

bool Scheduler::fuse_matmul(ir::ValueId id, int group_index) {
  Group& consumer = group(group_index);
  const ir::Node& node = graph_.node(id);
  const Shape& space = consumer.nest.space;
  auto refuse = [&](Reason reason, std::vector<ir::ValueId> values = {}) {
    plan_.not_fused.push_back(
        {.reason = reason, .subject = id, .kernel = consumer.members.front(), .values = std::move(values)});
    return false;
  };
  if (!is_generated_gemm(graph_, node, capabilities_)) return refuse(Reason::generated_gemm_unsupported);
  if (gathers(group_index)) return refuse(Reason::gather_unsupported);
  if (reads_padding(group_index)) return refuse(Reason::padding_unsupported);
  if (!piecewise_concats(group_index).empty()) return refuse(Reason::pieces_unsupported);
  if (!(node.type.shape == space)) return refuse(Reason::product_shape);
  // The epilogue sees one product's tile: a second product (x w + h u) is computed by a kernel of its own and
  // read from memory.
  if (consumer.kind == KernelKind::gemm) return refuse(Reason::second_product);
  if (consumer.kind != KernelKind::loop &&
      (consumer.kind != KernelKind::reduction || consumer.nest.reduced_count() != space.rank()))
    return refuse(Reason::epilogue_partial_reductions);
  for (ir::ValueId member : consumer.members) {
    const ir::Node& member_node = graph_.node(member);
    // (A smaller member recomputed where read, broadcast into the space, is computed per element like the rest:
    // a bias's cast from bf16, a row of scales scaled.)
    const bool broadcast = std::any_of(consumer.decisions.begin(), consumer.decisions.end(), [&](const FusionDecision& d) {
      return d.subject == member && d.reason == Reason::broadcast;
    });
    if (!ir::is_reduction(member_node.op) && member_node.type.shape.numel() != space.numel() && !broadcast)
      return refuse(Reason::not_product_size, {member});
  }
  for (ir::ValueId member : consumer.members)
    if (ir::is_reduction(graph_.node(member).op))
      if (const ir::ValueId reader = reader_in(member, group_index); reader >= 0)
        return refuse(Reason::reads_full_reduction, {reader, member});
  const IndexMap identity = consumer.nest.broadcast_map(space);
  for (const IndexMap& map : reads_of(group_index, consumer.kind, consumer.nest, id))
    if (map != identity) return refuse(Reason::moved_product);
  consumer.kind = KernelKind::gemm;
  consumer.members.push_back(id);
  consumer.decisions.push_back({.reason = Reason::epilogue, .subject = id});
  group_of_[index(id)] = group_index;
  return true;
}

}  // namespace kiln::compiler
