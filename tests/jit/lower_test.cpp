// compiler::lower, what kiln-dump shows: the same stages compile() builds.

#include "compiler/jit.h"
#include "ir/parser.h"

#include <kiln/error.h>

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

constexpr const char* seed_text = R"(func @seed(%0: f32[33,17], %1: f32[17,9]) -> (f32[]) {
  %2 = f32[33,9] matmul(%0, %1) {transpose_a=false, transpose_b=false}
  %3 = f32[33,9] sin(%2)
  %4 = f32[33,9] add(%2, %3)
  %5 = f32[33,9] relu(%4)
  %6 = f32[] reduce_sum(%5) {axes=[0,1], keepdims=false}
  return %6
}
)";

TEST(Lower, GivesTheStagesCompileBuilds) {
  const ir::Graph graph = ir::parse(seed_text);
  const LoweredFunction lowered = lower(graph);
  const CompiledFunction compiled = compile(graph);
  ASSERT_EQ(lowered.stages.size(), 3u);
  EXPECT_EQ(lowered.stages, compiled.stages);
  EXPECT_EQ(lowered.stages[0].first, Stage::optimized);
  EXPECT_NE(lowered.stages[1].second.find("fusion plan for @seed: 1 kernel"), std::string::npos);
  EXPECT_NE(lowered.stages[2].second.find("kiln_kernel_0"), std::string::npos);
  EXPECT_TRUE(lowered.cuda_kernels.empty());
}

TEST(Lower, RefusesWhatCompileRefuses) {
  const ir::Graph graph = ir::parse(R"(func @host(%0: f32[2]) -> (f32[2]) {
  %1 = f32[2] host_call(%0) {callback=0} loc("model.cpp:7")
  return %1
}
)");
  try {
    lower(graph);
    FAIL() << "lower() compiled a host callback";
  } catch (const CompileError& error) {
    EXPECT_NE(std::string(error.what()).find("host_call"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("model.cpp:7"), std::string::npos) << error.what();
  }
}

#if !KILN_HAVE_CUDA
TEST(Lower, CudaNeedsABuildWithCuda) { EXPECT_THROW(lower(ir::parse(seed_text), Device::cuda()), CompileError); }
#endif

}  // namespace
}  // namespace kiln::compiler
