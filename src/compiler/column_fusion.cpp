#include "compiler/column_fusion.h"

#include <algorithm>
#include <optional>

namespace kiln::compiler {
namespace {

class ColumnFuser {
 public:
  ColumnFuser(const ir::Graph& graph, FusionPlan plan) : graph_(graph), plan_(std::move(plan)) {}

  FusionPlan run() {
    for (std::size_t k = 0; k < plan_.kernels.size();) {
      const std::optional<std::size_t> producer = producer_to_merge(k);
      if (producer)
        merge(*producer, k);  // kernel k is gone: the next one is now at k
      else
        ++k;
    }
    return std::move(plan_);
  }

 private:
  // The index of the loop kernel that kernel `k` (a column reduction, alone in a library kernel) can take in.
  std::optional<std::size_t> producer_to_merge(std::size_t k) const {
    const FusedKernel& kernel = plan_.kernels[k];
    if (kernel.kind != KernelKind::library || kernel.members.size() != 1) return std::nullopt;
    const ir::Node& reduction = graph_.node(kernel.members.front());
    if (column_reduced_axes(graph_, reduction) == 0) return std::nullopt;
    const ir::ValueId input = reduction.operands[0];
    for (std::size_t p = 0; p < k; ++p) {
      const FusedKernel& producer = plan_.kernels[p];
      if (std::find(producer.outputs.begin(), producer.outputs.end(), input) == producer.outputs.end()) continue;
      if (producer.kind != KernelKind::loop || !(producer.space == graph_.type(input).shape)) return std::nullopt;
      return p;
    }
    return std::nullopt;
  }

  // The reduction joins the producer's kernel, in the producer's place (the reduction reads nothing else), which
  // still writes the outputs it wrote (a softmax over axis 0 divides exp(x - max) by its sums afterwards).
  void merge(std::size_t producer_index, std::size_t reduction_index) {
    FusedKernel& merged = plan_.kernels[producer_index];
    const ir::ValueId reduction = plan_.kernels[reduction_index].members.front();
    const ir::ValueId input = graph_.node(reduction).operands[0];
    merged.kind = KernelKind::column;
    merged.reduced_axes = column_reduced_axes(graph_, graph_.node(reduction));
    merged.members.push_back(reduction);
    std::sort(merged.members.begin(), merged.members.end());  // graph order
    // The reduction's input stays an output only where something else reads it.
    const bool read_elsewhere =
        is_returned(graph_, input) || read_by_other_kernels(plan_, input, {producer_index, reduction_index});
    if (!read_elsewhere) std::erase(merged.outputs, input);
    merged.outputs.push_back(reduction);
    merged.decisions.push_back(
        "fused " + describe(graph_, reduction) + ": a reduction over the " + std::to_string(merged.reduced_axes) +
        " axes before the last, computed a block of columns at a time" +
        (read_elsewhere ? std::string(" as its input is computed")
                        : " while its input " + graph_.type(input).to_string() + " is never written"));
    plan_.kernels.erase(plan_.kernels.begin() + static_cast<std::ptrdiff_t>(reduction_index));
    // fuse()'s notes that the merge made untrue: "library: %7 reduce_sum ..." and "not fused: %6 exp into ...".
    std::erase_if(plan_.not_fused, [&](const std::string& note) {
      return note.starts_with("library: " + describe(graph_, reduction) + " ") ||
             note.starts_with("not fused: " + describe(graph_, input) + " into kernel of " +
                              describe(graph_, reduction) + ":");
    });
  }

  const ir::Graph& graph_;
  FusionPlan plan_;
};

}  // namespace

int column_reduced_axes(const ir::Graph& graph, const ir::Node& reduction) {
  if (!ir::is_reduction(reduction.op) || ir::is_arg_reduction(reduction.op)) return 0;
  const ir::Type& input = graph.type(reduction.operands[0]);
  const int rank = input.shape.rank();
  const std::vector<std::int64_t>& axes = reduction.attributes.axes;
  if (rank < 2 || axes.empty() || input.dtype != reduction.type.dtype || axes.back() != rank - 2) return 0;
  for (std::size_t i = 1; i < axes.size(); ++i)
    if (axes[i] != axes[i - 1] + 1) return 0;
  return static_cast<int>(axes.size());
}

FusionPlan fuse_columns(const ir::Graph& graph, FusionPlan plan) { return ColumnFuser(graph, std::move(plan)).run(); }

}  // namespace kiln::compiler
