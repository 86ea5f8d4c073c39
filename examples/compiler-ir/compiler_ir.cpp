// compiler-ir: reading what the JIT made of a function. f.get_compiler_ir(stage, arguments...) returns one stage
// of the compiler for one signature (tracing and compiling first if the signature is new), as TensorFlow's
// experimental_get_compiler_ir does. The stages, and what to look for in each:
//
//   traced     the graph your C++ built, one line per op: `%5 = f32[64,16] matmul(%0, %1)` is value 5, its dtype
//              and static shape, the op and its operands. C++ control flow is gone (it ran while tracing), C++
//              numbers are constants. Look for ops you did not write (a cast that dtype promotion added).
//   optimized  after simplify (constant folding, algebraic identities), CSE (one copy of each repeated
//              computation) and DCE (nothing unused). Look for what disappeared.
//   fused      the kernel plan: "fusion plan for @name: N kernels", then per kernel its kind (loop, reduction,
//              gemm, ...), the ops it computes, what it reads and writes, why each op joined it ("fused %9 exp:
//              elementwise producer of the same size") and why others did not ("not fused: ..."), and the
//              per-call scratch memory (arena). N is what f.statistics().kernels_per_call reports. This is the
//              stage to read when a function is slower than expected: each kernel writes its outputs to memory
//              and the next reads them back.
//   source     the C++ the JIT compiled (CUDA C++ on a GPU): one section per kernel, "// ==== kernel 0: ...",
//              each op a commented line, after an #include of "kiln-prelude.h", kiln's helper header (thousands
//              of lines, the same in every module), which KILN_DUMP_TO writes beside the sources.
//
// KILN_DUMP_TO=<directory> writes these stages as files for every function the program compiles, with no code
// change: <name>.0-traced.txt (with each op's source line, loc("file:line")), .2-optimized.txt, .3-fused.txt,
// .4-source.cpp, and the graph after each pass of the pipeline (.1-1-after-simplify.txt, ...). Run this program
// with it set to see the list. tools/kiln-dump runs the same pipeline on a traced file, without the program.
//
//   build/examples/compiler-ir
//
// Exit status 0 when the stages show what this program's comments say they show, 1 otherwise.

#include <kiln/kiln.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

// A dense layer and a softmax over its outputs, with two things the optimizer removes, as real code often has
// them: a temperature of 1 (a C++ number, so a constant of the trace: scores / 1 is scores) and a product written
// twice (CSE computes it once). The JIT makes two kernels of it: the matmul (kiln's GEMM), and one row kernel for
// the bias, the relu, the addition and the softmax. A GEMM's epilogue takes elementwise ops and full reductions (the
// seed example's function is one kernel), not reductions over rows whose results the rows' elements read again,
// as a softmax's maximum and sum are: the fused stage's "not fused" line says so.
kiln::Tensor classify(kiln::Tensor x, kiln::Tensor w, kiln::Tensor b) {
  const double temperature = 1.0;
  kiln::Tensor hidden = kiln::nn::relu(kiln::matmul(x, w) + b);
  kiln::Tensor scores = hidden + kiln::nn::relu(kiln::matmul(x, w) + b);
  return kiln::nn::softmax(scores / temperature);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// The number of ops of this kind in an IR stage ("%5 = f32[64,16] matmul(%0, %1)" is one matmul).
long long count_ops(const std::string& ir, const std::string& op) {
  const std::vector<std::string> lines = lines_of(ir);
  return std::count_if(lines.begin(), lines.end(),
                       [&](const std::string& line) { return line.find(" " + op + "(") != std::string::npos; });
}

void print_stage(const char* name, const std::string& text) {
  std::printf("---- %s ----\n%s", name, text.c_str());
  if (!text.ends_with("\n")) std::printf("\n");
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main() {
  try {
    auto f = kiln::function(classify, {.jit_compile = true, .name = "classify"});
    const kiln::Tensor x = kiln::random::normal({64, 32}, {.seed = 1});
    const kiln::Tensor w = kiln::random::normal({32, 16}, {.seed = 2});
    const kiln::Tensor b = kiln::random::normal({16}, {.seed = 3});

    // The first get_compiler_ir traces and compiles (as a first call would); the others reuse that.
    const std::string traced = f.get_compiler_ir(kiln::Stage::traced, x, w, b);
    const std::string optimized = f.get_compiler_ir(kiln::Stage::optimized, x, w, b);
    const std::string fused = f.get_compiler_ir(kiln::Stage::fused, x, w, b);
    const std::string source = f.get_compiler_ir(kiln::Stage::source, x, w, b);
    f(x, w, b);
    const long long kernels = f.statistics().kernels_per_call;

    print_stage("traced", traced);
    print_stage("optimized", optimized);
    print_stage("fused", fused);
    print_stage("source", source);
    const std::vector<std::string> source_lines = lines_of(source);

    // What the stages show, counted from their text.
    const long long traced_matmuls = count_ops(traced, "matmul"), optimized_matmuls = count_ops(optimized, "matmul");
    const long long traced_divisions = count_ops(traced, "div"), optimized_divisions = count_ops(optimized, "div");
    const long long source_kernels = std::count_if(source_lines.begin(), source_lines.end(), [](const std::string& l) {
      return l.starts_with("// ==== kernel ");
    });
    std::printf(
        "\ntraced: %lld matmuls, %lld divisions; optimized: %lld matmul (CSE), %lld division (the "
        "softmax's: simplify removed scores / 1)\n",
        traced_matmuls, traced_divisions, optimized_matmuls, optimized_divisions);
    std::printf("fused: %lld kernels per call (statistics), %lld kernel sections in the source\n", kernels,
                source_kernels);
    bool as_described = traced_matmuls == 2 && optimized_matmuls == 1 && traced_divisions == 2 &&
                        optimized_divisions == 1 && source_kernels == kernels &&
                        fused.starts_with("fusion plan for @classify: " + std::to_string(kernels) + " kernels") &&
                        source.find("#include \"kiln-prelude.h\"") != std::string::npos;

    if (const char* directory = std::getenv("KILN_DUMP_TO"); directory && *directory) {
      std::printf("KILN_DUMP_TO=%s holds:\n", directory);
      std::vector<std::string> names;
      for (const auto& entry : std::filesystem::directory_iterator(directory))
        if (entry.path().filename().string().starts_with("classify.")) names.push_back(entry.path().filename());
      std::sort(names.begin(), names.end());
      for (const std::string& name : names) std::printf("  %s\n", name.c_str());
      // The files hold what get_compiler_ir returns (the traced file adds each op's source line), and the prelude
      // the source includes is beside them, so the dumped source compiles as it is.
      const bool same = read_file(std::filesystem::path(directory) / "classify.3-fused.txt") == fused &&
                        read_file(std::filesystem::path(directory) / "classify.4-source.cpp") == source &&
                        std::filesystem::exists(std::filesystem::path(directory) / "kiln-prelude.h");
      std::printf("the dumped fused stage and source are %s get_compiler_ir's\n", same ? "the same as" : "NOT");
      as_described &= same;
    } else {
      std::printf("(run with KILN_DUMP_TO=<directory> to have these stages written as files)\n");
    }
    if (!as_described) {
      std::fprintf(stderr, "compiler-ir: the stages do not show what this example describes\n");
      return 1;
    }
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "compiler-ir: %s\n", error.what());
    return 1;
  }
}
