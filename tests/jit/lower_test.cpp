// compiler::lower, what kiln-dump shows: the same stages compile() builds.

#include "compiler/jit.h"
#include "ir/parser.h"

#include <kiln/error.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

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

// KILN_DUMP_TO writes the program after every pass that changed it: the optimizations', then fuse's plan,
// assign-buffers' plan and arena, and generate's source, numbered in order.
TEST(Lower, DumpsTheProgramAfterEachPass) {
  const std::string directory = ::testing::TempDir() + "kiln-lower-dump";
  std::filesystem::remove_all(directory);
  ::setenv("KILN_DUMP_TO", directory.c_str(), 1);
  const LoweredFunction lowered = lower(ir::parse(seed_text));
  ::unsetenv("KILN_DUMP_TO");
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  const std::vector<std::string> lowering = {"after-fuse", "after-assign-buffers", "after-generate"};
  std::vector<std::string> passes;
  for (const std::string& name : names)
    if (name.rfind("seed.1-", 0) == 0) passes.push_back(name);
  ASSERT_GE(passes.size(), 3u) << testing::PrintToString(names);
  auto read = [&](const std::string& name) {
    std::ifstream file(directory + "/" + name);
    return std::string(std::istreambuf_iterator<char>(file), {});
  };
  // The last three, by their numbers: seed.1-<n>-after-<pass>.txt.
  std::sort(passes.begin(), passes.end(),
            [](const std::string& a, const std::string& b) { return std::stoi(a.substr(7)) < std::stoi(b.substr(7)); });
  for (std::size_t k = 0; k < 3; ++k)
    EXPECT_NE(passes[passes.size() - 3 + k].find(lowering[k]), std::string::npos) << testing::PrintToString(passes);
  const std::string fused = read(passes[passes.size() - 3]), assigned = read(passes[passes.size() - 2]);
  EXPECT_EQ(fused.rfind("fusion plan for @seed: 1 kernel", 0), 0u) << fused;
  EXPECT_EQ(assigned, lowered.stages[1].second);
  EXPECT_EQ(read(passes.back()), lowered.stages[2].second);
  std::filesystem::remove_all(directory);
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
