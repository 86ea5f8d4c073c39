#pragma once
// Private to the fusion scheduler (fusion.h says what it decides): the groups it forms while walking the graph
// consumer first, and the rule that lets a producer join a group (fusion_legality.cpp).

#include "compiler/fusion.h"

#include <set>
#include <span>
#include <vector>

namespace kiln::compiler {

bool is_reshape(ir::Op op);
// Ops a loop nest computes at any index map: elementwise ops and data movement.
bool is_loop_fusible(ir::Op op);

// The kernel kind and nest a reduction runs in: a row kernel for a trailing run of axes, a column kernel for a run
// ending before the last axis (where the backend has one); none for argmax and other axes.
struct ReductionNest {
  KernelKind kind;
  LoopNest nest;
};
std::optional<ReductionNest> reduction_nest(const ir::Graph& graph, const ir::Node& node,
                                            const BackendCapabilities& capabilities);

struct Group {
  KernelKind kind = KernelKind::loop;
  LoopNest nest;
  std::vector<ir::ValueId> members;
  std::vector<FusionDecision> decisions;
  bool merged_away = false;

  // The nest's axes before this one are rows: a value depending only on them is computed once per row (the
  // first reduced axis of a row or column kernel, the last axis of a loop kernel; none in a GEMM's epilogue).
  int first_row_axis() const;
};

class Scheduler {
 public:
  Scheduler(const ir::Graph& graph, const BackendCapabilities& capabilities);
  FusionPlan run();

 private:
  std::size_t index(ir::ValueId value) const { return static_cast<std::size_t>(value); }
  Group& group(int index) { return groups_[static_cast<std::size_t>(index)]; }
  const Group& group(int index) const { return groups_[static_cast<std::size_t>(index)]; }

  // ---- the walk (fusion_scheduler.cpp) ----
  void place(ir::ValueId id);
  // The kernels that read `id`, looking through recomputed cheap nodes.
  std::set<int> consumer_groups_of(ir::ValueId id) const;
  // Matmuls, library kernels, reshapes that change the layout and take_along_axis (its values) read their operands
  // from memory, so a cheap node feeding one is computed into a buffer rather than recomputed.
  bool read_from_memory(ir::ValueId id) const;
  // Whether `user` reads operand `id` from memory (read_from_memory's rule for one user).
  bool reads_memory_of(ir::ValueId user, ir::ValueId id) const;
  void start_group(ir::ValueId id);
  std::string library_reason(const ir::Node& node) const;
  // A transpose run by its standard kernel (BackendCapabilities::strided_transpose_bytes).
  bool is_strided_transpose(const ir::Node& node) const;
  // A strided transpose read by one loop kernel over its own shape, a tile at a time (transposed_strips.cpp).
  bool fuse_transpose_by_strips(ir::ValueId id);
  // Whether concat `id` is a padded value its consumer kernels, all loop kernels, read in place (recomputed in each
  // as a masked read of the value under the padding, which stays in memory).
  bool read_through_padding(ir::ValueId id, const std::set<int>& consumer_groups) const;
  // Whether concat `id`, read only by loop kernels, is read piecewise by each (inlined; their spaces run as boxes).
  bool read_piecewise(ir::ValueId id, const std::set<int>& consumer_groups);
  // What recomputing `id` in a kernel takes: the flops per element of it and of the producers recomputed with it,
  // and the arrays of its size it reads there (values in memory anyway). The walk stops once it reads two arrays or
  // exceeds the budget: then it is not recomputed.
  struct RecomputeCone {
    int flops = 0;
    std::vector<ir::ValueId> arrays;
  };
  // About one math-library function and a few simple ops per element (fusion_scheduler.cpp says why).
  static constexpr int recompute_flops_budget = 24;
  RecomputeCone recompute_cone(ir::ValueId id) const;
  // Why `id`, read by several kernels that could not become one, is written once rather than recomputed in each of
  // them (a sentence for the fused stage), or "" when it is recomputed; `cone` is recompute_cone(id).
  std::string why_not_recomputed(ir::ValueId id, const std::set<int>& consumer_groups, const RecomputeCone& cone) const;
  // Multi-output fusion of a producer read by several kernels: it joins the one it can, and is written for the
  // others.
  bool join_one_consumer(ir::ValueId id, const std::set<int>& consumer_groups);
  // Multi-output fusion, on demand: when a producer's consumers sit in several loop kernels over the same space,
  // those kernels become one (if none depends on another).
  void merge_consumer_loops(ir::ValueId producer, std::set<int>& consumer_groups);
  void merge_into(int target, int source, FusionDecision decision);
  // Multi-output fusion of siblings: loop kernels over the same space, or row or column kernels over the same nest,
  // that read a common input become one.
  void merge_siblings();
  // Column groups left with nothing computed but their reduction run its standard kernel.
  void finish_columns();
  std::set<int> producers_of(int group) const;
  void collect_producers(ir::ValueId value, int group, std::set<int>& producers) const;
  // Whether group `from` reads, directly or through other groups, what group `to` writes.
  bool reaches(int from, int to) const;
  std::set<ir::ValueId> leaves_of(int group) const;
  FusedKernel make_kernel(int group) const;
  // ---- storage (fusion_placement.cpp) ----
  // Has the kernels computing a concat's operands write them where the concat has them (Placement), where they
  // can: an element output of a loop or row kernel or of a GEMM's epilogue, or a concat assembled whole, read by
  // nothing else, not returned, not repeated.
  void place_concat_operands(FusionPlan& plan) const;
  void place_operands(FusionPlan& plan, std::size_t concat_index) const;
  // Points every placement into concat `inner` at the same elements of `outer`, where `inner` lies at `start`.
  static void move_placements(FusionPlan& plan, ir::ValueId inner, ir::ValueId outer,
                              std::span<const std::int64_t> start);
  // The kernel that can write `operand` of the concat at `concat_index` into the concat's buffer, if any: the
  // kernel computing it, or the assembled concat it is when that copies nothing.
  std::optional<std::size_t> placeable_producer(const FusionPlan& plan, ir::ValueId operand,
                                                std::size_t concat_index) const;
  // The parts of a gemm kernel's gathered operand (a concat, or a reshape of one) as views of values in memory.
  std::vector<GatheredView> gathered_parts(ir::ValueId operand) const;
  // The notes of the padded values loop kernel `kernel` reads in place.
  void note_padding(FusedKernel& kernel) const;
  FusionPlan build_plan();

  // ---- attention (fusion_attention.cpp) ----
  // A matmul whose consumers are a row kernel whose one result is a second matmul's left operand.
  struct AttentionCandidate {
    ir::ValueId first = -1, second = -1;  // the matmuls
    ir::ValueId probabilities = -1;       // the row kernel's result
    int second_group = -1;
  };
  std::optional<AttentionCandidate> attention_candidate(ir::ValueId first, int row_group) const;
  bool attention_dtype(const ir::Node& product) const;
  // Why the candidate cannot be one kernel, or "" if it can.
  std::string attention_refusal(const AttentionCandidate& candidate, int row_group) const;
  // Makes matmul `first`, row kernel `row_group` and the second matmul one attention kernel if they can be; true
  // if they are (a refused candidate leaves a note).
  bool join_attention(ir::ValueId first, int row_group);

  // ---- the rule (fusion_legality.cpp) ----
  bool try_fuse(ir::ValueId id, int group);
  bool fuse_loop_fusible(ir::ValueId id, int group);
  bool fuse_reduction(ir::ValueId id, int group);
  // A matmul of the generated GEMM whose product `value` is computed from by elementwise ops of its shape, or -1.
  ir::ValueId generated_product_under(ir::ValueId value) const;
  bool fuse_matmul(ir::ValueId id, int group);
  // Whether `group` reads through take_along_axis's indices (which only loop and row kernels do).
  bool gathers(int group) const;
  // The concats inlined into `group`: paddings read in place and concats read piecewise.
  std::set<ir::ValueId> inlined_concats(int group) const;
  // Whether `group` reads a padded value in place (which loop, column and, on the CPU, GEMM kernels do).
  bool reads_padding(int group) const;
  // The concats `group` reads piecewise (concat_pieces.cpp), and the boxes its space runs as for them: none when
  // a read of one cannot be cut into boxes (its coordinate along the concat axis moves by more than one per step)
  // or the boxes would be more than a kernel runs.
  std::set<ir::ValueId> piecewise_concats(int group) const;
  std::optional<std::vector<SpaceBox>> boxes(int group) const;
  // The elements of the concats that are all of `id`'s readers when they are concats read piecewise (an operand is
  // computed in its piece only: as often as the concat is), else `id`'s own.
  std::int64_t computed_elements(ir::ValueId id) const;
  // Whether `id` can join gemm group `group` as a view its GEMM gathers: the matmul's left operand, a concat along
  // the last axis; a slice (unit step along the last axis) that is one of its parts; a zero padding along a leading
  // axis under such slices.
  bool gathered_view(ir::ValueId id, int group) const;
  // Whether `id` is a view that several GEMMs gather, or one gathers through a reshape: a concat along the last axis
  // that each of its readers -- a gemm kernel's matmul, or a reshape numbering its rows along one axis that a gemm
  // kernel's matmul reads (rows_reshape_gathered) -- reads as the left operand, and the slices and zero paddings
  // under such a concat. Inlined into each of those kernels, like a padding read in place: a convolution's windows,
  // multiplied by the filters and, transposed, by the output's cotangent (its filter gradient), are never written.
  bool shared_gathered_view(ir::ValueId id) const;
  // The matmul that reads `user`, a reshape of `concat` to [rows, the concat's last axis] alone in its group, as
  // its left operand (transposed or not) in a gemm kernel; else -1. Such a reshape joins that kernel as a view.
  ir::ValueId rows_reshape_gathered(ir::ValueId user, ir::ValueId concat) const;

  // The distinct maps at which group `group`, run as a kernel of `kind` over `nest`, reads `value`: from the maps
  // its outputs are stored at, through every value it computes, to `value`.
  std::vector<IndexMap> reads_of(int group, KernelKind kind, const LoopNest& nest, ir::ValueId value) const;
  // Where a kernel of `kind` over `nest` stores `value`: at every point of a space of its shape, or once per kept
  // coordinate; none where it cannot.
  std::optional<IndexMap> storage_map(KernelKind kind, const LoopNest& nest, ir::ValueId value) const;
  // A member of `group` written to memory that a kernel of `kind` over `nest` could not store, or -1.
  ir::ValueId unstorable_output(int group, KernelKind kind, const LoopNest& nest) const;
  // Whether member `value` of `group` is written to memory: returned, or read by another kernel.
  bool escapes(ir::ValueId value, int group) const;
  // Whether `value` is returned or read by kernels other than `group`.
  bool read_outside(ir::ValueId value, int group) const;
  bool used_through_layout_change(ir::ValueId id, int group) const;
  // A member of `group` that reads `value`, directly or through recomputed cheap nodes.
  ir::ValueId reader_in(ir::ValueId value, int group) const;

  const ir::Graph& graph_;
  BackendCapabilities capabilities_;
  std::vector<std::vector<ir::ValueId>> users_;
  std::vector<bool> is_output_;
  std::vector<int> group_of_;
  std::vector<bool> inlined_;
  std::vector<bool> viewed_;     // members of a GEMM's gathered operand: read as views, never computed
  std::vector<bool> piecewise_;  // inlined concats read piecewise (the others inlined are paddings)
  std::vector<Group> groups_;
  FusionPlan plan_;
};

}  // namespace kiln::compiler
