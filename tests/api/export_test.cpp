// kiln::export_function (include/kiln/export.h): the files it writes, and its errors. That a program built
// from those files computes what the JIT computes, bit for bit, with no compiler at run time, is the test
// export_program (scripts/check-export.cmake); here, what a program's first call checks is tested too: a kiln
// that lowers the graph to other kernels refuses it.

#include "support/files.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::error_of;
using testing::read_file;
using testing::TemporaryDirectory;

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }
std::string this_file_line(int line) { return "export_test.cpp:" + std::to_string(line); }

Tensor seed(Tensor x, Tensor y) {
  Tensor z = matmul(x, y);
  z = z + sin(z);
  return nn::relu(z);
}

TEST(Export, WritesTheJitsKernelsAndTheFilesAProgramBuildsThemWith) {
  TemporaryDirectory directory;
  const Tensor a = random::normal({9, 17}, {.seed = 1});
  const Tensor b = random::normal({17, 5}, {.seed = 2});
  const ExportedFiles files =
      export_function(seed, std::tuple{a, b}, {.directory = directory.path().string(), .name = "seed"});
  EXPECT_EQ(files.header, (directory / "seed.h").string());
  for (const std::string& path : {files.header, files.c_header, files.source, files.kernels, files.cmake})
    EXPECT_TRUE(std::filesystem::exists(path)) << path;

  // The kernels are the JIT's source, with the prelude it includes (the `source` stage names it), entry points
  // renamed so that several exported functions link into one program.
  auto jit = function(seed, {.jit_compile = true, .name = "seed"});
  const std::string source = jit.get_compiler_ir(Stage::source, a, b);
  const std::string kernels = read_file(files.kernels);
  const std::size_t own_code = source.find("using namespace kiln::jit;");
  ASSERT_NE(own_code, std::string::npos) << source;
  std::string renamed = source.substr(own_code);
  for (std::size_t at = renamed.find("kiln_kernel_0"); at != std::string::npos; at = renamed.find("kiln_kernel_0"))
    renamed.replace(at, std::string("kiln_kernel_").size(), "seed_kernel_");
  EXPECT_TRUE(contains(kernels, renamed));
  EXPECT_TRUE(contains(kernels, "struct kiln_runtime {")) << "the prelude is in the file";
  EXPECT_FALSE(contains(kernels, "kiln_kernel_0"));
  EXPECT_TRUE(contains(kernels, "kiln_kernel_entry")) << "the ABI's type keeps its name";
  (void)jit(a, b);
  EXPECT_EQ(files.kernel_count, jit.statistics().kernels_per_call);

  const std::string header = read_file(files.header);
  EXPECT_TRUE(contains(header, "kiln::Tensor seed(const kiln::Tensor& input0, const kiln::Tensor& input1,")) << header;
  EXPECT_TRUE(contains(header, "// Inputs: input0 f32[9,17], input1 f32[17,5], on the CPU.")) << header;
  const std::string c_header = read_file(files.c_header);
  EXPECT_TRUE(contains(c_header, "int seed_c(const float* input0, const float* input1, float* output0);")) << c_header;
  EXPECT_FALSE(contains(c_header, "kiln/")) << "the C header includes no kiln header";
  const std::string cmake = read_file(files.cmake);
  EXPECT_TRUE(contains(cmake, "add_library(seed STATIC")) << cmake;
  EXPECT_TRUE(contains(cmake, "-ffp-contract=off")) << "the kernels are compiled with the JIT's flags: " << cmake;
  EXPECT_FALSE(contains(cmake, "-shared")) << cmake;
}

TEST(Export, CapturedTensorsStaticArgumentsAndSeveralOutputs) {
  TemporaryDirectory directory;
  const Tensor weights = random::normal({6, 4}, {.seed = 3});
  auto layer = [&](Tensor x, int axis) {
    Tensor y = matmul(x, weights);
    return std::tuple{nn::softmax(y, axis), argmax(y, axis), reduce_sum(cast(y, DType::f64))};
  };
  const Tensor x = random::normal({3, 6}, {.seed = 4});
  const ExportedFiles files =
      export_function(layer, std::tuple{x, 1}, {.directory = directory.path().string(), .name = "layer"});
  const std::string header = read_file(files.header);
  EXPECT_TRUE(
      contains(header, "std::tuple<kiln::Tensor, kiln::Tensor, kiln::Tensor> layer(const kiln::Tensor& input0,"))
      << header;
  EXPECT_TRUE(contains(header, "// Outputs: output0 f32[3,4], output1 i64[3], output2 f64[].")) << header;
  EXPECT_TRUE(contains(read_file(files.c_header),
                       "int layer_c(const float* input0, float* output0, int64_t* output1, double* output2);"));
  // The captured weights are a constant of the program: their bytes, as they were at export.
  const std::string source = read_file(files.source);
  EXPECT_TRUE(contains(source, "// A captured tensor, f32[6,4], as it was exported.")) << source;
  const float first = weights.to_vector<float>()[0];
  unsigned char bytes[4];
  std::memcpy(bytes, &first, 4);
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%02x,0x%02x,0x%02x,0x%02x,", bytes[0], bytes[1], bytes[2], bytes[3]);
  EXPECT_TRUE(contains(source, hex)) << hex;
}

TEST(Export, AGraphTheJitCannotCompileIsACompileErrorNamingTheOpAndLine) {
  TemporaryDirectory directory;
  auto with_callback = [](Tensor x) {
    return host_call([](const std::vector<Tensor>& inputs) { return inputs[0]; }, {x}, DType::f32, x.shape());  // line
  };
  const int callback_line = __LINE__ - 2;
  const std::string message = error_of<CompileError>([&] {
    export_function(with_callback, std::tuple{random::normal({4})},
                    {.directory = directory.path().string(), .name = "f"});
  });
  EXPECT_TRUE(contains(message, "kiln::export_function 'f'")) << message;
  EXPECT_TRUE(contains(message, "op 'host_call' at")) << message;
  EXPECT_TRUE(contains(message, this_file_line(callback_line))) << message;
  EXPECT_TRUE(std::filesystem::is_empty(directory.path())) << "nothing is written";
}

TEST(Export, NamesMustBeCIdentifiersAndDirectoriesWritable) {
  TemporaryDirectory directory;
  const Tensor x = random::normal({4});
  auto twice = [](Tensor value) { return value * 2; };
  for (const std::string& name :
       std::vector<std::string>{"", "9lives", "has-dash", "kiln_seed", std::string(65, 'a')}) {
    const std::string message = error_of<ValueError>(
        [&] { export_function(twice, std::tuple{x}, {.directory = directory.path().string(), .name = name}); });
    EXPECT_TRUE(contains(message, "kiln::export_function")) << message;
    EXPECT_TRUE(contains(message, this_file_line(__LINE__ - 2))) << message;
  }
  testing::write_file(directory / "a-file", "x");
  const std::string message = error_of<IOError>([&] {
    export_function(twice, std::tuple{x}, {.directory = (directory / "a-file" / "below").string(), .name = "twice"});
  });
  EXPECT_TRUE(contains(message, "cannot create the directory")) << message;
}

// Control flow: each branch and loop body is a module of its own (as the JIT compiles them), written to a file of
// its own with its entry points named apart; the CMake file compiles them all with the JIT's flags. (That the
// program computes what the JIT does is export_program's check.)
TEST(Export, ABranchOrLoopStepIsAModuleOfItsOwn) {
  TemporaryDirectory directory;
  auto scanned = [](Tensor h0, Tensor xs) {
    return std::get<0>(scan(
        [](const Tensor& h, const Tensor& x) {
          const Tensor next = cond(
              reduce_sum(x) > 0.0, [&]() { return tanh(h + x); }, [&]() { return h - x; });
          return std::pair{next, next};
        },
        h0, xs));
  };
  const ExportedFiles files = export_function(scanned, std::tuple{random::normal({3, 4}), random::normal({5, 3, 4})},
                                              {.directory = directory.path().string(), .name = "scanned"});
  // The scan's step, and the cond's two branches within it.
  ASSERT_EQ(files.region_kernels.size(), 3u);
  const std::string cmake = read_file(files.cmake);
  for (std::size_t module = 1; module <= files.region_kernels.size(); ++module) {
    const std::string& path = files.region_kernels[module - 1];
    EXPECT_EQ(path, (directory / ("scanned_kernels_" + std::to_string(module) + ".cpp")).string());
    const std::string kernels = read_file(path);
    EXPECT_TRUE(contains(kernels, "scanned_module_" + std::to_string(module) + "_kernel_0")) << kernels;
    EXPECT_FALSE(contains(kernels, "kiln_kernel_0")) << kernels;
    EXPECT_TRUE(contains(cmake, "scanned_kernels_" + std::to_string(module) + ".cpp")) << cmake;
  }
  const std::string source = read_file(files.source);
  EXPECT_TRUE(contains(source, "scanned_module_3_kernel_0")) << "the kernel table holds the regions' kernels too";
  // The scan runs whole as the JIT runs it: its step's module holds the loop's driver, named apart and in the table.
  const std::string step = read_file(files.region_kernels[0]);
  EXPECT_TRUE(contains(step, "void scanned_module_1_kernel_loop(const kiln_runtime* runtime")) << step;
  EXPECT_FALSE(contains(step, "kiln_loop(")) << step;
  EXPECT_TRUE(contains(source, "scanned_module_1_kernel_loop,  // the loop of module 1: its driver")) << source;
}

TEST(Export, AKilnThatLowersTheGraphToOtherKernelsRefusesTheExportedFunction) {
  // What an exported <name>.cpp hands kiln, with the digest of another kiln's source.
  const char graph[] =
      "func @twice(%0: f32[4]) -> (f32[4]) {\n  %1 = f32[] constant(2)\n  %2 = f32[4] mul(%0, %1)\n"
      "  return %2\n}\n";
  const detail::ExportedKernel kernels[] = {nullptr};
  const detail::ExportedFunction exported = {"twice", "elsewhere.cpp:3", graph, "0123", kernels, 1, nullptr, 0};
  const std::string message = error_of<CompileError>(
      [&] { (void)detail::call_exported(exported, {random::normal({4})}, Location::current()); });
  EXPECT_TRUE(contains(message, "twice: this kiln library lowers the exported function to other kernels")) << message;
  EXPECT_TRUE(contains(message, "export it again")) << message;
  // The C entry point's way: -1 and the message.
  const float input[4] = {1, 2, 3, 4};
  float output[4];
  const void* inputs[] = {input};
  void* outputs[] = {output};
  EXPECT_EQ(detail::call_exported_raw(exported, inputs, outputs), -1);
  EXPECT_TRUE(contains(detail::exported_error(), "export it again")) << detail::exported_error();
}

}  // namespace
}  // namespace kiln
