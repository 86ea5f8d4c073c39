#include "kernels/cuda/plan.h"

#include "kernels/matmul_batches.h"

#include <kiln/error.h>

#include <algorithm>
#include <string>

namespace kiln::kernels::cuda {

template <int N> BroadcastPlan<N> plan_broadcast(const Shape& output, const std::array<const Shape*, N>& operands) {
  BroadcastPlan<N> plan;
  int rank = 0;
  for (int axis = 0; axis < output.rank(); ++axis) {
    if (output[axis] == 1) continue;  // contributes nothing to any offset
    std::int64_t stride[N] = {};
    for (int k = 0; k < N; ++k) {
      const Shape& shape = *operands[static_cast<std::size_t>(k)];
      int operand_axis = axis - (output.rank() - shape.rank());
      if (operand_axis < 0 || shape[operand_axis] == 1) continue;  // broadcast: stride 0
      std::int64_t row = 1;
      for (int d = operand_axis + 1; d < shape.rank(); ++d) row *= shape[d];
      stride[k] = row;
    }
    bool merges = rank > 0;
    for (int k = 0; k < N && merges; ++k) merges = plan.strides[k][rank - 1] == stride[k] * output[axis];
    if (merges) {
      plan.dims[rank - 1] *= output[axis];
    } else {
      plan.dims[rank] = output[axis];
      ++rank;
    }
    for (int k = 0; k < N; ++k) plan.strides[k][rank - 1] = stride[k];
  }
  if (rank == 0) {  // every dim is 1: a single element
    plan.dims[0] = 1;
    rank = 1;
  }
  plan.rank = rank;
  return plan;
}

template BroadcastPlan<1> plan_broadcast<1>(const Shape&, const std::array<const Shape*, 1>&);
template BroadcastPlan<2> plan_broadcast<2>(const Shape&, const std::array<const Shape*, 2>&);
template BroadcastPlan<3> plan_broadcast<3>(const Shape&, const std::array<const Shape*, 3>&);

ViewPlan collapse(const ViewPlan& view) {
  ViewPlan result;
  result.offset = view.offset;
  for (int axis = 0; axis < view.rank; ++axis) {
    if (view.sizes[axis] == 1) continue;
    if (result.rank > 0) {
      int last = result.rank - 1;
      if (result.strides[last] == view.strides[axis] * view.sizes[axis]) {
        result.sizes[last] *= view.sizes[axis];
        result.strides[last] = view.strides[axis];
        continue;
      }
    }
    result.push(view.sizes[axis], view.strides[axis]);
  }
  if (result.rank == 0) result.push(1, 0);
  return result;
}

ViewPlan transpose_view(const Shape& input, const std::vector<std::int64_t>& permutation) {
  if (static_cast<int>(permutation.size()) != input.rank())
    throw InternalError("transpose", "permutation does not match the rank", std::string());
  auto strides = input.strides();
  ViewPlan view;
  for (std::int64_t axis : permutation) view.push(input[static_cast<int>(axis)], strides[static_cast<std::size_t>(axis)]);
  return view;
}

ViewPlan broadcast_view(const Shape& input, const Shape& output) {
  auto strides = input.strides();
  ViewPlan view;
  int offset = output.rank() - input.rank();
  for (int axis = 0; axis < output.rank(); ++axis) {
    int source_axis = axis - offset;
    bool broadcast = source_axis < 0 || input[source_axis] == 1;
    view.push(output[axis], broadcast ? 0 : strides[static_cast<std::size_t>(source_axis)]);
  }
  return view;
}

ViewPlan slice_view(const Shape& input, const std::vector<std::int64_t>& start, const std::vector<std::int64_t>& step,
                    const Shape& output) {
  auto strides = input.strides();
  ViewPlan view;
  for (int axis = 0; axis < input.rank(); ++axis) {
    auto a = static_cast<std::size_t>(axis);
    view.offset += start[a] * strides[a];
    // The step of an axis of one element is never taken, and may be anything
    // (even near 2^63, where step * stride would overflow).
    view.push(output[axis], output[axis] > 1 ? step[a] * strides[a] : 0);
  }
  return view;
}

int tiled_transpose_axis(const ViewPlan& collapsed) {
  int last = collapsed.rank - 1;
  if (collapsed.strides[last] == 1 || collapsed.strides[last] == 0) return -1;
  for (int axis = 0; axis < last; ++axis)
    if (collapsed.strides[axis] == 1) return axis;
  return -1;
}

std::vector<ReductionStage> plan_reduction(const Shape& input, const std::vector<std::int64_t>& axes) {
  // Collapsed: size-1 axes dropped, neighbours of the same kind merged.
  std::vector<std::int64_t> sizes;
  std::vector<bool> reduced;
  auto push = [&](std::int64_t size, bool is_reduced) {
    if (size == 1) return;
    if (!sizes.empty() && reduced.back() == is_reduced) {
      sizes.back() *= size;
      return;
    }
    sizes.push_back(size);
    reduced.push_back(is_reduced);
  };
  for (int axis = 0; axis < input.rank(); ++axis)
    push(input[axis], std::find(axes.begin(), axes.end(), axis) != axes.end());

  std::vector<ReductionStage> stages;
  while (std::find(reduced.begin(), reduced.end(), true) != reduced.end()) {
    std::int64_t total = 1;
    for (std::int64_t size : sizes) total *= size;
    std::vector<std::int64_t> old_sizes;
    std::vector<bool> old_reduced;
    old_sizes.swap(sizes);
    old_reduced.swap(reduced);
    std::size_t last = old_sizes.size() - 1;
    ReductionStage stage;
    if (old_reduced[last]) {
      stage.rows = true;
      stage.length = old_sizes[last];
      stage.outer = total / stage.length;
      for (std::size_t i = 0; i < last; ++i) push(old_sizes[i], old_reduced[i]);
    } else {
      // Axes alternate, so the one before a kept innermost axis is reduced.
      stage.rows = false;
      stage.inner = old_sizes[last];
      stage.length = old_sizes[last - 1];
      stage.outer = total / (stage.inner * stage.length);
      for (std::size_t i = 0; i + 1 < last; ++i) push(old_sizes[i], old_reduced[i]);
      push(stage.inner, false);
    }
    stages.push_back(stage);
  }
  return stages;
}

std::vector<BatchRun> batch_runs(const std::vector<std::int64_t>& a_offsets,
                                 const std::vector<std::int64_t>& b_offsets) {
  std::vector<BatchRun> runs;
  auto count = static_cast<std::int64_t>(a_offsets.size());
  for (std::int64_t item = 0; item < count; ++item) {
    auto i = static_cast<std::size_t>(item);
    if (!runs.empty()) {
      BatchRun& run = runs.back();
      if (run.count == 1) {  // the second item fixes the strides
        run.a_stride = a_offsets[i] - run.a_offset;
        run.b_stride = b_offsets[i] - run.b_offset;
        ++run.count;
        continue;
      }
      if (a_offsets[i] == run.a_offset + run.count * run.a_stride &&
          b_offsets[i] == run.b_offset + run.count * run.b_stride) {
        ++run.count;
        continue;
      }
    }
    runs.push_back(BatchRun{.first = item, .count = 1, .a_offset = a_offsets[i], .b_offset = b_offsets[i]});
  }
  return runs;
}

MatmulPlan plan_matmul(bool transpose_a, bool transpose_b, const Shape& a, const Shape& b, const Shape& output) {
  MatmulPlan plan;
  int rank_a = a.rank(), rank_b = b.rank(), rank_out = output.rank();
  if (rank_a < 2 || rank_b < 2 || rank_out < 2)
    throw InternalError("matmul", "kernel called with operands of rank < 2", std::string());
  plan.m = output[rank_out - 2];
  plan.n = output[rank_out - 1];
  plan.k = transpose_a ? a[rank_a - 2] : a[rank_a - 1];
  if ((transpose_b ? b[rank_b - 1] : b[rank_b - 2]) != plan.k)
    throw InternalError("matmul", "contracting dimensions differ", std::string());
  MatmulBatches batches = matmul_batches(a, b, output, plan.m * plan.k, plan.k * plan.n);
  plan.batch = batches.count;
  if (plan.batch == 0 || plan.m == 0 || plan.n == 0) return plan;
  plan.runs = batch_runs(batches.a_offsets, batches.b_offsets);
  return plan;
}

Launch grid_stride_launch(std::int64_t items, int threads, int multiprocessors, int blocks_per_multiprocessor) {
  Launch launch;
  launch.threads = static_cast<unsigned>(threads);
  std::int64_t wanted = (std::max<std::int64_t>(items, 1) + threads - 1) / threads;
  std::int64_t limit = std::max<std::int64_t>(1, std::int64_t{multiprocessors} * blocks_per_multiprocessor);
  launch.blocks = static_cast<unsigned>(std::min(wanted, limit));
  return launch;
}

}  // namespace kiln::kernels::cuda
