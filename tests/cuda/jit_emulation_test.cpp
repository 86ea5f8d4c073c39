// Generated CUDA loop kernels run without a GPU: the module's text (prelude
// included) is compiled by the host C++ compiler with CUDA's few keywords
// and built-ins defined for one thread at a time, and every thread of the
// grid is run in turn. Loop kernels need nothing more (no barriers, no warp
// shuffles), so this checks, here, the generated index math (broadcasts,
// transposes, slices, rows and packs of the `_vector` variants) and the
// op semantics of the NVRTC prelude against the standard executor and the
// float64 reference. Reduction and gemm kernels need a GPU (jit_gpu_test.cpp).

#include "cuda/cuda_test_support.h"
#include "support/differential.h"

#include "api/tensor_impl.h"
#include "compiler/cache/module_cache.h"
#include "compiler/codegen/cpu/compile_command.h"
#include "compiler/codegen/cuda/cuda_codegen.h"
#include "compiler/fusion.h"
#include "compiler/pipeline.h"
#include "ir/parser.h"
#include "runtime/buffer.h"

#include <kiln/nn.h>

#include <string>
#include <vector>

namespace kiln {
namespace {

using testing::random_tensor;

// CUDA for one host thread at a time: the built-ins the generated loop
// kernels and the prelude use. Barriers and shuffles abort: loop kernels
// have none.
constexpr const char* emulation_header = R"emulation(
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
struct EmulatedDim { unsigned x = 0, y = 0, z = 0; };
// Internal linkage: an inline variable would be a GNU unique symbol, which keeps
// the module loaded after dlclose (and /proc/self/fd/N naming it).
static EmulatedDim threadIdx, blockIdx, blockDim, gridDim;
inline float __int_as_float(int bits) { float value; std::memcpy(&value, &bits, 4); return value; }
inline double __longlong_as_double(long long bits) { double value; std::memcpy(&value, &bits, 8); return value; }
inline void __syncthreads() { std::abort(); }
inline void __threadfence() { std::abort(); }
template <class T> T __shfl_xor_sync(unsigned, T, int) { std::abort(); }
)emulation";

// Appended after the module: runs kernel `name` over the whole grid, one
// thread after another, with its pointer parameters from `parameters`.
std::string runner(const std::string& name) {
  return "template <class... P, std::size_t... I> void call_" + name +
         "(void (*kernel)(P...), void** parameters, std::index_sequence<I...>) {\n"
         "  kernel(static_cast<P>(parameters[I])...);\n}\n"
         "template <class... P> void call_" + name + "(void (*kernel)(P...), void** parameters) {\n"
         "  call_" + name + "(kernel, parameters, std::index_sequence_for<P...>{});\n}\n"
         "extern \"C\" void emulate_" + name + "(void** parameters, unsigned blocks, unsigned threads) {\n"
         "  gridDim.x = blocks;\n  blockDim.x = threads;\n"
         "  for (unsigned block = 0; block < blocks; ++block)\n"
         "    for (unsigned thread = 0; thread < threads; ++thread) {\n"
         "      blockIdx.x = block;\n      threadIdx.x = thread;\n"
         "      call_" + name + "(kiln::jit::" + name + ", parameters);\n    }\n}\n";
}

using Emulated = void (*)(void**, unsigned, unsigned);

// Generates `body`'s CUDA module (every kernel must be a loop kernel), runs
// it on the host -- the scalar kernels, or the `_vector` variants where there
// are -- and compares the results with the standard executor and the
// float64 reference. `blocks` caps the grid so grid-stride loops wrap.
template <class Body, class... Inputs>
void expect_emulated_agreement(const std::string& label, bool vector, Body body, const Inputs&... inputs) {
  std::string traced = function(body).get_compiler_ir(Stage::traced, inputs...);
  ir::Graph graph = ir::parse(traced);
  compiler::optimize(graph);
  compiler::FusionPlan plan = compiler::fuse(graph);
  for (const compiler::FusedKernel& kernel : plan.kernels)
    ASSERT_EQ(kernel.kind, compiler::KernelKind::loop) << label << "\n" << compiler::print_plan(graph, plan);
  compiler::cuda::ModuleSource module = compiler::cuda::generate_source(graph, plan);
  std::string source = std::string(emulation_header) + module.text;
  for (const auto& launch : module.launches) {
    source += runner(launch.function);
    if (!launch.vector_function.empty()) source += runner(launch.vector_function);
  }
  std::string name = "emulated_" + std::to_string(std::hash<std::string>{}(label));
  std::string image = compiler::compile_shared_object(
      compiler::compiler_identity(name), source, {"-std=c++20", "-O1", "-ffp-contract=off", "-fPIC", "-shared", "-w"},
      name);
  auto loaded = compiler::LoadedModule::load(image, name);

  std::vector<runtime::Array> values(static_cast<std::size_t>(graph.size()));
  std::vector<Tensor> arguments = {inputs...};
  for (std::size_t i = 0; i < arguments.size(); ++i)
    values[static_cast<std::size_t>(graph.parameters[i])] = arguments[i].impl().array;
  int used_vector = 0;
  for (std::size_t k = 0; k < plan.kernels.size(); ++k) {
    const compiler::FusedKernel& kernel = plan.kernels[k];
    const auto& launch = module.launches[k];
    std::vector<void*> parameters;
    for (ir::ValueId input : kernel.inputs) parameters.push_back(values[static_cast<std::size_t>(input)].mutable_raw());
    for (ir::ValueId output : kernel.outputs) {
      values[static_cast<std::size_t>(output)] = runtime::allocate_array(graph.type(output).dtype, graph.type(output).shape);
      parameters.push_back(values[static_cast<std::size_t>(output)].mutable_raw());
    }
    bool use_vector = vector && !launch.vector_function.empty();
    used_vector += use_vector ? 1 : 0;
    std::string function = use_vector ? launch.vector_function : launch.function;
    auto emulate = reinterpret_cast<Emulated>(loaded->symbol(("emulate_" + function).c_str()));
    std::int64_t blocks = std::min<std::int64_t>(use_vector ? launch.vector_blocks : launch.blocks, 3);
    emulate(parameters.data(), static_cast<unsigned>(blocks), static_cast<unsigned>(launch.threads));
  }
  if (vector) {
    EXPECT_GT(used_vector, 0) << label << ": no kernel has a vector variant";
  }
  std::vector<Tensor> emulated;
  for (ir::ValueId output : graph.outputs) emulated.push_back(detail::make_tensor(values[static_cast<std::size_t>(output)]));
  testing::check_outputs(label, traced, arguments, testing::flatten_result(function(body)(inputs...)), emulated);
}

std::tuple<Tensor, Tensor, Tensor> adam_step(Tensor parameter, Tensor gradient, Tensor m, Tensor v) {
  Tensor new_m = 0.9 * m + 0.1 * gradient;
  Tensor new_v = 0.999 * v + 0.001 * (gradient * gradient);
  Tensor step = (new_m / 0.65) / (sqrt(new_v / 0.01) + 1e-8);
  return {parameter - 1e-3 * step, new_m, new_v};
}

TEST(CudaEmulatedLoopKernels, EveryElementwiseOpOnEveryDtype) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    auto body = [dtype](Tensor a, Tensor b, Tensor p) {
      std::vector<Tensor> outputs = {neg(a), abs(a), sign(a), square(a), relu(a), floor(a), ceil(a), a + b, a - b,
                                     a * b, maximum(a, b), minimum(a, b), where(p, a, b), a < b, a <= b,
                                     a > b, a >= b, eq(a, b), ne(a, b), pow(abs(a), minimum(abs(b), cast(full({}, 3), b.dtype())))};
      if (is_floating(dtype))
        for (Tensor y : {sin(a), cos(a), exp(a), log(abs(a) + 0.1), tanh(a), sqrt(abs(a)), rsqrt(abs(a) + 0.1),
                         sigmoid(a), erf(a), a / b})
          outputs.push_back(y);
      for (DType to : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64}) outputs.push_back(cast(a * 1000, to));
      outputs.push_back(logical_and(p, logical_not(p)));
      outputs.push_back(logical_or(p, a > b));
      return outputs;
    };
    for (bool vector : {false, true})
      expect_emulated_agreement("ops " + std::string(to_string(dtype)) + (vector ? " vector" : ""), vector, body,
                                random_tensor(dtype, {3, 16}, 50), random_tensor(dtype, {16}, 51),
                                random_tensor(DType::boolean, {3, 16}, 52));
  }
}

TEST(CudaEmulatedLoopKernels, BroadcastsTransposesSlicesAndOddShapes) {
  Tensor a = random_tensor(DType::f32, {6, 9}, 53), b = random_tensor(DType::f32, {9, 6}, 54);
  expect_emulated_agreement("transpose", false, [](Tensor a, Tensor b) { return exp(transpose(a)) - b; }, a, b);
  expect_emulated_agreement("slice", false,
                            [](Tensor a) { return slice(a, {.start = {1, 0}, .stop = {5, 9}, .step = {2, 3}}) * 2; }, a);
  expect_emulated_agreement("broadcast", false, [](Tensor x, Tensor y) { return x * y + 1.0; },
                            random_tensor(DType::f32, {3, 1, 5}, 55), random_tensor(DType::f32, {4, 5}, 56));
  expect_emulated_agreement("broadcast rows vector", true, [](Tensor x, Tensor y) { return x * y + 1.0; },
                            random_tensor(DType::f32, {3, 1, 8}, 57), random_tensor(DType::f32, {4, 8}, 58));
  expect_emulated_agreement("scalar", false, [](Tensor x) { return sin(x) * 2.0; }, random_tensor(DType::f32, {}, 59));
  expect_emulated_agreement("empty", false, [](Tensor x) { return exp(x); }, random_tensor(DType::f32, {0, 4}, 60));
  expect_emulated_agreement("odd length", false, [](Tensor x) { return nn::sigmoid(x); },
                            random_tensor(DType::f32, {1001}, 61));
  expect_emulated_agreement("special constants", false,
                            [](Tensor x) { return maximum(x, -INFINITY) + minimum(x, INFINITY) + where(x > 0, x, NAN); },
                            random_tensor(DType::f32, {7}, 62));
}

TEST(CudaEmulatedLoopKernels, GeluAndAdamVectorized) {
  for (bool vector : {false, true}) {
    expect_emulated_agreement(std::string("gelu") + (vector ? " vector" : ""), vector,
                              [](Tensor x) { return nn::gelu(x); }, random_tensor(DType::f32, {4096}, 63));
    Tensor p = random_tensor(DType::f32, {1000}, 64), g = random_tensor(DType::f32, {1000}, 65);
    Tensor m = random_tensor(DType::f32, {1000}, 66), v = abs(random_tensor(DType::f32, {1000}, 67));
    expect_emulated_agreement(std::string("adam") + (vector ? " vector" : ""), vector, adam_step, p, g, m, v);
  }
}

}  // namespace
}  // namespace kiln
