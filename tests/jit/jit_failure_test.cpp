// The JIT's failure policy end to end: each way compiling can fail gives,
// by default, one warning per signature (reason, op or function, the user's
// line) and correct results from the standard executor; with
// Fallback::none it throws kiln::CompileError. Either way the function stays
// usable.

#include "build_test_fixture.h"
#include "support/test_support.h"

#include <kiln/kiln.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iterator>

namespace kiln::testing {
namespace {

class JitFailureTest : public BuildTest {
 protected:
  // A function whose graph (and so its module) is unique to this test, so no
  // cache can hide a failing compiler.
  static auto make_function(double salt, Fallback policy = Fallback::standard) {
    return function([salt](Tensor x) { return sin(x) * salt + 1; },
                    {.jit_compile = true, .on_compile_failure = policy, .name = "salted"});
  }

  // Runs f on a random input and checks the result against eager ops.
  template <class F>
  void expect_correct(F& f, double salt, std::int64_t size) {
    Tensor x = random_tensor(DType::f32, {size}, 42);
    std::vector<float> got = f(x).template to_vector<float>(), input = x.to_vector<float>();
    std::vector<float> expected = (sin(x) * salt + 1).to_vector<float>();
    ASSERT_EQ(got.size(), input.size());
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_FLOAT_EQ(got[i], expected[i]);
  }
};

TEST_F(JitFailureTest, MissingCompilerFallsBackWithOneWarningPerSignature) {
  ::setenv("KILN_CXX", "/nonexistent/c++", 1);
  auto f = make_function(1.25);
  expect_correct(f, 1.25, 33);
  expect_correct(f, 1.25, 33);
  EXPECT_EQ(warnings({"could not be compiled", "/nonexistent/c++", "jit_failure_test.cpp"}), 1) << all_messages();
  EXPECT_EQ(f.statistics().fallbacks, 1);
  expect_correct(f, 1.25, 34);  // a new signature warns again
  EXPECT_EQ(warnings({"could not be compiled"}), 2);

  // With a compiler back, the next signature compiles: the function stayed usable.
  ::unsetenv("KILN_CXX");
  expect_correct(f, 1.25, 35);
  EXPECT_EQ(f.statistics().compiles, 1);
}

// The fused stage is the plan that runs: after a fallback, the standard executor's, and why. The stages that
// only a compiled function has are errors that give the reason.
TEST_F(JitFailureTest, FusedStageOfAFallbackSaysItFellBackAndWhy) {
  ::setenv("KILN_CXX", "/nonexistent/c++", 1);
  auto f = make_function(2.25);
  Tensor x = random_tensor(DType::f32, {12}, 3);
  const std::string fused = f.get_compiler_ir(Stage::fused, x);
  EXPECT_EQ(fused.find("fell back to the standard executor"), 0u) << fused;
  EXPECT_NE(fused.find("/nonexistent/c++"), std::string::npos) << fused;
  EXPECT_EQ(f.statistics().fallbacks, 1);
  try {
    f.get_compiler_ir(Stage::source, x);
    FAIL() << "expected kiln::ValueError";
  } catch (const ValueError& error) {
    EXPECT_NE(error.detail().find("/nonexistent/c++"), std::string::npos) << error.what();
    EXPECT_NE(error.location().find("jit_failure_test.cpp"), std::string::npos) << error.what();
  }
  ::unsetenv("KILN_CXX");
  expect_correct(f, 2.25, 12);
}

// A graph the JIT can never compile (a host callback) falls back without trying a compiler.
TEST_F(JitFailureTest, FusedStageOfAHostCallbackSaysWhichOp) {
  auto f = function([](Tensor x) { return nonzero(x > 0.0); }, {.jit_compile = true, .name = "with_nonzero"});
  Tensor x = random_tensor(DType::f32, {10}, 4);
  const std::string fused = f.get_compiler_ir(Stage::fused, x);
  EXPECT_EQ(fused.find("fell back to the standard executor"), 0u) << fused;
  EXPECT_NE(fused.find("nonzero"), std::string::npos) << fused;
  EXPECT_NE(fused.find("jit_failure_test.cpp"), std::string::npos) << "names the op's line: " << fused;
}

TEST_F(JitFailureTest, MissingCompilerInStrictModeThrowsCompileError) {
  ::setenv("KILN_CXX", "/nonexistent/c++", 1);
  auto f = make_function(1.5, Fallback::none);
  Tensor x = random_tensor(DType::f32, {8}, 1);
  try {
    f(x);
    FAIL() << "expected kiln::CompileError";
  } catch (const CompileError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/c++"), std::string::npos) << error.what();
  }
  ::unsetenv("KILN_CXX");
  expect_correct(f, 1.5, 8);  // the failed signature was not cached
}

TEST_F(JitFailureTest, FailingCompilerReportsItsMessage) {
  ::setenv("KILN_CXX", write_script("broken-cxx", "echo 'internal compiler error: out of ideas' >&2\nexit 1\n").c_str(),
           1);
  auto f = make_function(1.75);
  expect_correct(f, 1.75, 17);
  EXPECT_EQ(warnings({"could not be compiled", "out of ideas"}), 1) << all_messages();
}

TEST_F(JitFailureTest, HangingCompilerIsStoppedAtTheTimeLimit) {
  ::setenv("KILN_CXX", write_script("hanging-cxx", "sleep 600\n").c_str(), 1);
  ::setenv("KILN_COMPILE_TIMEOUT", "1", 1);
  auto f = make_function(2.25);
  auto start = std::chrono::steady_clock::now();
  expect_correct(f, 2.25, 17);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10);
  EXPECT_EQ(warnings({"could not be compiled", "time limit"}), 1) << all_messages();
}

TEST_F(JitFailureTest, CompilerWritingABrokenSharedObjectFallsBack) {
  // The "compiler" writes garbage to the path after -o.
  ::setenv("KILN_CXX",
           write_script("garbage-cxx",
                        "while [ $# -gt 0 ]; do if [ \"$1\" = -o ]; then echo garbage > \"$2\"; fi; shift; done\n")
               .c_str(),
           1);
  auto f = make_function(2.5);
  expect_correct(f, 2.5, 17);
  EXPECT_EQ(warnings({"could not be compiled"}), 1) << all_messages();
  EXPECT_TRUE(cache_files().empty()) << "a module that does not load is never cached";
}

TEST_F(JitFailureTest, ModuleWithoutKilnsKernelsFallsBackAndIsNotCached) {
  // A valid shared object built from another source: it loads, but has no kiln_kernel_0.
  std::ofstream(root() + "/other.cpp") << "extern \"C\" int unrelated() { return 1; }\n";
  ::setenv(
      "KILN_CXX",
      compiler_writing_output("other-cxx", "echo call >> '" + root() + "/calls'; exec c++ -fPIC -shared -o \"$out\" '" +
                                               root() + "/other.cpp'")
          .c_str(),
      1);
  auto f = make_function(4.5);
  expect_correct(f, 4.5, 17);
  EXPECT_EQ(warnings({"could not be compiled", "kiln_kernel_0"}), 1) << all_messages();
  EXPECT_TRUE(cache_files().empty()) << "a module that failed to load is never cached";
  // So the next build (here a second function with the same graph; a new process alike) compiles again.
  auto g = make_function(4.5);
  expect_correct(g, 4.5, 17);
  EXPECT_EQ(g.statistics().cache_hits, 0);
  std::ifstream calls(root() + "/calls");
  EXPECT_EQ(std::count(std::istreambuf_iterator<char>(calls), {}, '\n'), 2);
  EXPECT_TRUE(cache_files().empty());
}

TEST_F(JitFailureTest, SharedObjectOverTheSizeLimitFallsBack) {
  compiler::set_module_size_limit_for_testing(1 << 20);  // 1 GiB made 1 MiB
  ::setenv("KILN_CXX", compiler_writing_output("bloating-cxx", "head -c 2097152 /dev/zero > \"$out\"").c_str(), 1);
  auto f = make_function(4.75);
  expect_correct(f, 4.75, 17);
  compiler::set_module_size_limit_for_testing(0);
  EXPECT_EQ(warnings({"could not be compiled", "over the limit of 1048576 bytes", "jit_failure_test.cpp"}), 1)
      << all_messages();
  EXPECT_EQ(f.statistics().fallbacks, 1);
  EXPECT_TRUE(cache_files().empty());
}

TEST_F(JitFailureTest, UnwritableCacheDirectoryWarnsOnceAndStillCompiles) {
  ::setenv("KILN_CACHE_DIR", "/proc/kiln-cannot-exist", 1);
  auto f = make_function(2.75);
  expect_correct(f, 2.75, 17);
  auto g = make_function(3.25);
  expect_correct(g, 3.25, 17);
  EXPECT_EQ(f.statistics().compiles, 1);
  EXPECT_EQ(f.statistics().fallbacks, 0);
  EXPECT_EQ(warnings({"/proc/kiln-cannot-exist"}), 1) << all_messages();
}

TEST_F(JitFailureTest, SecondFunctionWithTheSameGraphReusesTheModule) {
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  auto f = make_function(3.5);
  auto g = make_function(3.5);
  expect_correct(f, 3.5, 64);
  expect_correct(g, 3.5, 64);
  EXPECT_EQ(compiler_runs(), 1) << "the second function's module comes from the memory cache";
}

TEST_F(JitFailureTest, DumpDirectoryReceivesEveryStage) {
  std::string dump = root() + "/dump";
  ::setenv("KILN_DUMP_TO", dump.c_str(), 1);
  auto f = make_function(3.75);
  expect_correct(f, 3.75, 9);
  ::unsetenv("KILN_DUMP_TO");
  for (const char* stage :
       {"salted.0-traced.txt", "salted.2-optimized.txt", "salted.3-fused.txt", "salted.4-source.cpp"})
    EXPECT_TRUE(std::filesystem::exists(dump + "/" + stage)) << stage;
  std::ifstream source(dump + "/salted.4-source.cpp");
  std::string text((std::istreambuf_iterator<char>(source)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("kiln_kernel_0"), std::string::npos);
  EXPECT_NE(text.find("sin("), std::string::npos);
  // The prelude, the same in every module, is included by name and written beside the source, so the function's
  // own kernels come first and the dumped file compiles as it is.
  EXPECT_NE(text.find("#include \"kiln-prelude.h\""), std::string::npos);
  EXPECT_LT(std::count(text.begin(), text.end(), '\n'), 400) << text;
  EXPECT_TRUE(std::filesystem::exists(dump + "/kiln-prelude.h"));
  const std::string check = "c++ -std=c++20 -march=native -fsyntax-only -w '" + dump + "/salted.4-source.cpp'";
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}

}  // namespace
}  // namespace kiln::testing

namespace kiln::testing {
namespace {

// A full disk: the cache directory is a tiny tmpfs, filled up. Compiling
// still works (temporary files live elsewhere); storing the module fails,
// which warns once and changes nothing else. Needs permission to mount.
class FullDiskTest : public JitFailureTest {};

TEST_F(FullDiskTest, FullCacheDirectoryWarnsAndStillCompiles) {
  std::string mount_point = root() + "/full";
  std::filesystem::create_directories(mount_point);
  std::string command = "mount -t tmpfs -o size=64k,mode=0700 tmpfs '" + mount_point + "' 2>/dev/null";
  if (std::system(command.c_str()) != 0) GTEST_SKIP() << "cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)";
  {
    std::ofstream filler(mount_point + "/filler", std::ios::binary);
    std::string block(4096, 'x');
    for (int i = 0; i < 64 && filler; ++i) filler << block;
  }
  ::setenv("KILN_CACHE_DIR", mount_point.c_str(), 1);
  auto f = make_function(4.25);
  expect_correct(f, 4.25, 17);
  EXPECT_EQ(f.statistics().compiles, 1);
  EXPECT_EQ(f.statistics().fallbacks, 0);
  EXPECT_GE(warnings({mount_point}), 1) << all_messages();
  ::unsetenv("KILN_CACHE_DIR");
  EXPECT_EQ(std::system(("umount '" + mount_point + "'").c_str()), 0);
}

}  // namespace
}  // namespace kiln::testing
