// Host-side planning of the CUDA kernels (kernels/cuda/plan.h) and the
// caching allocator's size policy: plain C++, checked on every machine that
// builds the CUDA support, GPU or not.

#include "kernels/cuda/plan.h"
#include "runtime/cuda/cuda_allocator.h"

#include <gtest/gtest.h>

#include <vector>

namespace {

using kiln::Shape;
using namespace kiln::kernels::cuda;

// The element offsets a BroadcastPlan gives output element i (what the
// kernels compute).
template <int N> std::array<std::int64_t, N> offsets(const BroadcastPlan<N>& plan, std::int64_t i) {
  std::array<std::int64_t, N> result{};
  for (int d = plan.rank - 1; d >= 0; --d) {
    std::int64_t coordinate = i % plan.dims[d];
    i /= plan.dims[d];
    for (int k = 0; k < N; ++k) result[static_cast<std::size_t>(k)] += coordinate * plan.strides[k][d];
  }
  return result;
}

// NumPy's rule, element by element: the offset of output index `index`
// (row-major over `output`) in `operand`.
std::int64_t numpy_offset(const Shape& operand, const Shape& output, std::int64_t index) {
  std::int64_t offset = 0, stride = 1;
  for (int axis = output.rank() - 1; axis >= 0; --axis) {
    std::int64_t coordinate = index % output[axis];
    index /= output[axis];
    int operand_axis = axis - (output.rank() - operand.rank());
    if (operand_axis < 0) continue;
    if (operand[operand_axis] != 1) offset += coordinate * stride;
    stride *= operand[operand_axis];
  }
  return offset;
}

TEST(CudaPlan, BroadcastMatchesNumpyAndCollapses) {
  struct Case {
    Shape a, b, output;
    int rank;
  };
  const std::vector<Case> cases = {
      {Shape{7, 5}, Shape{7, 5}, Shape{7, 5}, 1},          {Shape{}, Shape{3, 4}, Shape{3, 4}, 1},
      {Shape{4, 5}, Shape{5}, Shape{4, 5}, 2},             {Shape{4, 1}, Shape{4, 5}, Shape{4, 5}, 2},
      {Shape{2, 1, 3}, Shape{4, 1}, Shape{2, 4, 3}, 3},    {Shape{1, 1, 1}, Shape{1}, Shape{1, 1, 1}, 1},
      {Shape{6, 1, 5, 1}, Shape{6, 2, 5, 3}, Shape{6, 2, 5, 3}, 4}};
  for (const Case& c : cases) {
    BroadcastPlan<2> plan = plan_broadcast<2>(c.output, {&c.a, &c.b});
    EXPECT_EQ(plan.rank, c.rank) << c.a.to_string() << " " << c.b.to_string();
    for (std::int64_t i = 0; i < c.output.numel(); ++i) {
      auto found = offsets(plan, i);
      ASSERT_EQ(found[0], numpy_offset(c.a, c.output, i)) << c.a.to_string() << " at " << i;
      ASSERT_EQ(found[1], numpy_offset(c.b, c.output, i)) << c.b.to_string() << " at " << i;
    }
  }
}

TEST(CudaPlan, FlatPlansAreContiguousOrScalar) {
  Shape same{3, 4, 5}, scalar{}, row{5};
  BroadcastPlan<2> plan = plan_broadcast<2>(same, {&same, &scalar});
  EXPECT_TRUE(plan.flat());
  EXPECT_TRUE(plan.contiguous(0));
  EXPECT_TRUE(plan.scalar(1));
  EXPECT_FALSE(plan_broadcast<2>(same, {&same, &row}).flat());
  Shape one{1, 1};
  BroadcastPlan<3> single = plan_broadcast<3>(one, {&one, &scalar, &one});
  EXPECT_TRUE(single.flat());
  EXPECT_EQ(single.dims[0], 1);
}

// The source offset a view gives output element i (what gather_kernel reads).
std::int64_t view_offset(const ViewPlan& view, std::int64_t i) {
  std::int64_t offset = view.offset;
  for (int d = view.rank - 1; d >= 0; --d) {
    offset += i % view.sizes[d] * view.strides[d];
    i /= view.sizes[d];
  }
  return offset;
}

TEST(CudaPlan, CollapsedViewsReadTheSameElements) {
  std::vector<ViewPlan> views = {transpose_view(Shape{2, 3, 4}, {0, 2, 1}), transpose_view(Shape{2, 3, 4}, {2, 0, 1}),
                                 transpose_view(Shape{5, 1, 6}, {1, 0, 2}), broadcast_view(Shape{3, 1}, Shape{2, 3, 4}),
                                 slice_view(Shape{10, 8}, {9, 1}, {-2, 3}, Shape{5, 3}),
                                 slice_view(Shape{4, 6}, {0, 0}, {1, 1}, Shape{4, 6})};
  for (const ViewPlan& view : views) {
    ViewPlan collapsed = collapse(view);
    ASSERT_EQ(collapsed.numel(), view.numel());
    for (std::int64_t i = 0; i < view.numel(); ++i) ASSERT_EQ(view_offset(collapsed, i), view_offset(view, i)) << i;
  }
  // A slice of whole rows collapses to one contiguous run.
  ViewPlan rows = collapse(slice_view(Shape{4, 6}, {1, 0}, {1, 1}, Shape{2, 6}));
  EXPECT_EQ(rows.rank, 1);
  EXPECT_EQ(rows.strides[0], 1);
  EXPECT_EQ(rows.offset, 6);
}

TEST(CudaPlan, TiledTransposeAxis) {
  EXPECT_EQ(tiled_transpose_axis(collapse(transpose_view(Shape{64, 32}, {1, 0}))), 0);
  EXPECT_EQ(tiled_transpose_axis(collapse(transpose_view(Shape{8, 64, 32}, {0, 2, 1}))), 1);
  EXPECT_EQ(tiled_transpose_axis(collapse(transpose_view(Shape{8, 64, 32}, {1, 0, 2}))), -1);  // innermost stays
  EXPECT_EQ(tiled_transpose_axis(collapse(broadcast_view(Shape{5}, Shape{3, 5}))), -1);
}

TEST(CudaPlan, ReductionStagesFollowTheCpuOrder) {
  using Stage = ReductionStage;
  EXPECT_EQ(plan_reduction(Shape{1000}, {0}), (std::vector<Stage>{{true, 1, 1000, 1}}));
  EXPECT_EQ(plan_reduction(Shape{30, 40}, {1}), (std::vector<Stage>{{true, 30, 40, 1}}));
  EXPECT_EQ(plan_reduction(Shape{30, 40}, {0}), (std::vector<Stage>{{false, 1, 30, 40}}));
  EXPECT_EQ(plan_reduction(Shape{30, 40}, {0, 1}), (std::vector<Stage>{{true, 1, 1200, 1}}));
  // [2r, 3k, 4r, 5k]: columns over the 4, then columns over the 2 with 3*5 kept.
  EXPECT_EQ(plan_reduction(Shape{2, 3, 4, 5}, {0, 2}),
            (std::vector<Stage>{{false, 6, 4, 5}, {false, 1, 2, 15}}));
  // [2k, 3r, 4k, 5r]: rows over the 5, then columns over the 3.
  EXPECT_EQ(plan_reduction(Shape{2, 3, 4, 5}, {1, 3}), (std::vector<Stage>{{true, 24, 5, 1}, {false, 2, 3, 4}}));
  // Size-1 axes vanish; reducing only them reduces nothing.
  EXPECT_EQ(plan_reduction(Shape{1, 7, 1}, {0, 2}), std::vector<Stage>{});
  EXPECT_EQ(plan_reduction(Shape{3, 1, 7}, {1, 2}), (std::vector<Stage>{{true, 3, 7, 1}}));
}

TEST(CudaPlan, BatchRuns) {
  using Run = BatchRun;
  // One run when the offsets advance evenly, stride 0 for a broadcast operand.
  EXPECT_EQ(batch_runs({0, 10, 20, 30}, {0, 0, 0, 0}), (std::vector<Run>{{0, 4, 0, 0, 10, 0}}));
  EXPECT_EQ(batch_runs({5}, {7}), (std::vector<Run>{{0, 1, 5, 7, 0, 0}}));
  // [2,1] x [1,3] batch: a 0,0,0,1,1,1 and b 0,1,2,0,1,2 -> two runs of three.
  EXPECT_EQ(batch_runs({0, 0, 0, 6, 6, 6}, {0, 4, 8, 0, 4, 8}),
            (std::vector<Run>{{0, 3, 0, 0, 0, 4}, {3, 3, 6, 0, 0, 4}}));
}

TEST(CudaPlan, MatmulPlans) {
  MatmulPlan plan = plan_matmul(false, false, Shape{4, 3, 5}, Shape{5, 2}, Shape{4, 3, 2});
  EXPECT_EQ(plan.m, 3);
  EXPECT_EQ(plan.n, 2);
  EXPECT_EQ(plan.k, 5);
  EXPECT_EQ(plan.batch, 4);
  EXPECT_EQ(plan.runs, (std::vector<BatchRun>{{0, 4, 0, 0, 15, 0}}));
  plan = plan_matmul(true, true, Shape{2, 1, 5, 3}, Shape{1, 3, 2, 5}, Shape{2, 3, 3, 2});
  EXPECT_EQ(plan.k, 5);
  EXPECT_EQ(plan.runs, (std::vector<BatchRun>{{0, 3, 0, 0, 0, 10}, {3, 3, 15, 0, 0, 10}}));
  EXPECT_EQ(plan_matmul(false, false, Shape{0, 3, 5}, Shape{5, 2}, Shape{0, 3, 2}).runs.size(), 0u);
}

TEST(CudaPlan, GridStrideLaunch) {
  Launch small = grid_stride_launch(1000, 256, 132);
  EXPECT_EQ(small.blocks, 4u);
  EXPECT_EQ(small.threads, 256u);
  EXPECT_EQ(grid_stride_launch(0, 256, 132).blocks, 1u);
  EXPECT_EQ(grid_stride_launch(std::int64_t{1} << 40, 256, 132).blocks, 132u * 16);
}

TEST(CudaAllocatorPolicy, BlockSizes) {
  using namespace kiln::runtime::cuda;
  EXPECT_EQ(block_size(0), 512u);
  EXPECT_EQ(block_size(1), 512u);
  EXPECT_EQ(block_size(513), 1024u);
  EXPECT_EQ(block_size(std::size_t{1} << 20), std::size_t{1} << 20);
  EXPECT_EQ(block_size((std::size_t{1} << 20) + 1), std::size_t{2} << 20);
  EXPECT_EQ(block_size(std::size_t{5} << 20), std::size_t{6} << 20);
  EXPECT_TRUE(block_fits(1024, 1024));
  EXPECT_TRUE(block_fits(1280, 1024));
  EXPECT_FALSE(block_fits(1536, 1024));                              // wastes more than a quarter
  EXPECT_FALSE(block_fits(512, 1024));                               // too small
  EXPECT_FALSE(block_fits(std::size_t{2} << 20, std::size_t{1} << 20));  // a large block, a small request
  EXPECT_TRUE(block_fits(std::size_t{10} << 20, std::size_t{8} << 20));
}

}  // namespace
