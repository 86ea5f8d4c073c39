// The CPU JIT's module in several translation units (cpu::translation_units):
// every kernel in exactly one unit, each unit with the math its kernels need,
// no split where it would not finish sooner; and a transformer block built in
// parallel units computes what it computes built whole.

#include "compiler/codegen/cpu/cpu_codegen.h"
#include "compiler/fusion.h"
#include "compiler/pipeline.h"
#include "ir/parser.h"
#include "jit/build_test_fixture.h"
#include "runtime/parallel.h"
#include "support/differential.h"
#include "support/workloads.h"

#include <kiln/kiln.h>

#include <cctype>
#include <cmath>
#include <set>

namespace kiln::testing {
namespace {

// A pre-norm transformer block (attention with 2 heads, then a gelu MLP), small: 14 kernels on the CPU.
Tensor transformer_block(Tensor x, Tensor wq, Tensor wk, Tensor wv, Tensor wo, Tensor w1, Tensor b1, Tensor w2,
                         Tensor b2, Tensor g1, Tensor be1, Tensor g2, Tensor be2) {
  const std::int64_t tokens = x.shape()[0], width = x.shape()[1], heads = 2, head_width = width / heads;
  auto split_heads = [&](Tensor t) { return transpose(reshape(t, {tokens, heads, head_width}), {1, 0, 2}); };
  Tensor h = nn::layer_norm(x, g1, be1);
  Tensor q = split_heads(matmul(h, wq)), k = split_heads(matmul(h, wk)), v = split_heads(matmul(h, wv));
  Tensor scores = nn::softmax(matmul(q, k, {.transpose_b = true}) * (1.0 / std::sqrt(double(head_width))));
  Tensor attended = reshape(transpose(matmul(scores, v), {1, 0, 2}), {tokens, width});
  Tensor x1 = x + matmul(attended, wo);
  Tensor m = nn::gelu(matmul(nn::layer_norm(x1, g2, be2), w1) + b1);
  return x1 + matmul(m, w2) + b2;
}

std::vector<Tensor> block_inputs(std::int64_t tokens, std::int64_t width, std::int64_t hidden) {
  std::uint64_t seed = 11;
  auto r = [&](Shape shape) { return random::normal(shape, {.seed = seed++}); };
  return {r({tokens, width}), r({width, width}), r({width, width}),  r({width, width}), r({width, width}),
          r({width, hidden}), r({hidden}),       r({hidden, width}), r({width}),        r({width}),
          r({width}),         r({width}),        r({width})};
}

// body(inputs[0], ..., inputs[12]): the block's thirteen tensors as arguments.
template <class Body>
auto with_block_inputs(const std::vector<Tensor>& inputs, Body body) {
  return [&]<std::size_t... I>(std::index_sequence<I...>) { return body(inputs[I]...); }
  (std::make_index_sequence<13>());
}

// The traced, optimized graph of `body` on `inputs`, and its CPU fusion plan.
struct Lowered {
  ir::Graph graph;
  compiler::FusionPlan plan;
};
template <class Body, class... Inputs>
Lowered lower_for_cpu(Body body, const Inputs&... inputs) {
  Lowered lowered{ir::parse(function(body).get_compiler_ir(Stage::traced, inputs...)), {}};
  compiler::optimize(lowered.graph);
  lowered.plan = compiler::fuse(lowered.graph, compiler::capabilities(Device::cpu()));
  return lowered;
}

// The entry points `kiln_kernel_<k>` a source defines (not std::regex: GCC 12 warns inside it under ASan).
std::multiset<std::string> entry_points(const std::string& source) {
  std::multiset<std::string> found;
  const std::string prefix = "void kiln_kernel_", parameters = "(const kiln_runtime* runtime";
  for (std::size_t at = source.find(prefix); at != std::string::npos; at = source.find(prefix, at + 1)) {
    std::size_t end = at + prefix.size();
    while (end < source.size() && std::isdigit(static_cast<unsigned char>(source[end]))) ++end;
    if (end > at + prefix.size() && source.compare(end, parameters.size(), parameters) == 0)
      found.insert(source.substr(at + 5, end - at - 5));
  }
  return found;
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

TEST(TranslationUnits, EveryKernelIsInOneUnitWithTheMathItNeeds) {
  Lowered block = with_block_inputs(block_inputs(24, 32, 48),
                                    [](const auto&... inputs) { return lower_for_cpu(transformer_block, inputs...); });
  const std::string whole = compiler::cpu::generate_source(block.graph, block.plan);
  const std::multiset<std::string> entries = entry_points(whole);
  ASSERT_GE(entries.size(), 10u) << whole;

  std::vector<std::string> one = compiler::cpu::translation_units(block.graph, block.plan, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].substr(one[0].find('\n')), whole.substr(whole.find('\n'))) << "the whole source but its heading";

  std::vector<std::string> units = compiler::cpu::translation_units(block.graph, block.plan, 3);
  ASSERT_GE(units.size(), 2u);
  ASSERT_LE(units.size(), 3u);
  std::multiset<std::string> seen;
  for (std::size_t unit = 0; unit < units.size(); ++unit) {
    const std::string& text = units[unit];
    EXPECT_TRUE(contains(text, "translation unit " + std::to_string(unit + 1) + " of " + std::to_string(units.size())))
        << text.substr(0, 200);
    std::multiset<std::string> own = entry_points(text);
    EXPECT_FALSE(own.empty()) << "unit " << unit + 1;
    seen.insert(own.begin(), own.end());
    // The f32 math is in a unit exactly when one of its kernels computes a transcendental (exp, sigmoid here).
    const bool transcendental = contains(text, " exp(%") || contains(text, " sigmoid(%");
    EXPECT_EQ(contains(text, "#define KILN_JIT_FLOAT_MATH 1"), transcendental) << "unit " << unit + 1;
    EXPECT_TRUE(contains(text, "#define KILN_JIT_DOUBLE_MATH 0")) << "unit " << unit + 1;
  }
  EXPECT_EQ(seen, entries) << "every kernel once";
}

TEST(TranslationUnits, NoSplitWhereItWouldNotFinishSooner) {
  // One kernel.
  const Tensor x = random::normal({32, 32}, {.seed = 1}), y = random::normal({32, 32}, {.seed = 2});
  Lowered seed = lower_for_cpu(seed_function, x, y);
  ASSERT_EQ(seed.plan.kernels.size(), 1u);
  EXPECT_EQ(compiler::cpu::translation_units(seed.graph, seed.plan, 8).size(), 1u);
  // Two small copies (a transpose, then a reshape of its result): a second compiler process costs more than
  // either kernel.
  Lowered copies = lower_for_cpu(
      [](Tensor t) {
        return reshape(transpose(reshape(t, {8, 2, 16}), {1, 0, 2}) + 1.0, {8, 32});
      },
      random::normal({8, 32}, {.seed = 3}));
  ASSERT_EQ(copies.plan.kernels.size(), 2u) << compiler::print_plan(copies.graph, copies.plan);
  EXPECT_EQ(compiler::cpu::translation_units(copies.graph, copies.plan, 8).size(), 1u);
}

using ParallelBuild = BuildTest;

TEST_F(ParallelBuild, ATransformerBlockBuiltInUnitsComputesWhatItComputesBuiltWhole) {
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  const std::vector<Tensor> inputs = block_inputs(40, 64, 96);
  struct RestoreThreads {
    int count = runtime::thread_count();
    ~RestoreThreads() { runtime::set_thread_count(count); }
  } restore;
  auto run = [&](int jobs) {
    runtime::set_thread_count(jobs);  // the JIT runs as many compilers at once as kiln has threads
    compiler::clear_memory_cache_for_testing();
    std::filesystem::remove_all(cache_dir());
    auto jit = function(transformer_block, {.jit_compile = true, .on_compile_failure = Fallback::none});
    return with_block_inputs(inputs, jit).to_vector<float>();
  };
  const std::vector<float> whole = run(1);
  EXPECT_EQ(compiler_runs(), 1);
  const std::vector<float> split = run(3);
  std::ifstream calls(root() + "/calls");
  int compiles = 0, links = 0;
  for (std::string line; std::getline(calls, line);) {
    compiles += contains(line, " -c ");
    links += contains(line, ".o -lm");
  }
  EXPECT_GE(compiles, 2) << "the second build was split";
  EXPECT_LE(compiles, 3);
  EXPECT_EQ(links, 1);
  EXPECT_EQ(split, whole) << "bit for bit";
  // And both agree with the standard executor and the float64 reference.
  with_block_inputs(inputs, [](const auto&... tensors) {
    return expect_agreement("transformer block built in units", transformer_block, tensors...);
  });
}

}  // namespace
}  // namespace kiln::testing
