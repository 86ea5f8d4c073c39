// Running the system compiler: no shell, output captured, failures and time
// limits reported as kiln::CompileError, temporary files cleaned up; the
// compiler's identity and the cache key.

#include "compiler/codegen/cpu/compile_command.h"
#include "jit/build_test_fixture.h"

#include <kiln/error.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

namespace kiln::testing {
namespace {

using compiler::BuildResult;
using CompileCommandTest = BuildTest;

// The error thrown by build(), or a test failure.
CompileError build_error(const std::string& source = kAnswerSource) {
  try {
    BuildTest::build(source);
  } catch (const CompileError& error) {
    return error;
  }
  ADD_FAILURE() << "expected a CompileError";
  return CompileError("", "", std::string());
}

#define EXPECT_CONTAINS(text, fragment) \
  EXPECT_NE(std::string(text).find(fragment), std::string::npos) << "missing '" << (fragment) << "' in: " << (text)

// Whether process `pid` is gone (or a zombie nobody reaped yet).
bool process_is_gone(pid_t pid) {
  std::ifstream stat_file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat_file, line)) return true;
  std::size_t name_end = line.rfind(')');
  return name_end != std::string::npos && line.size() > name_end + 2 && line[name_end + 2] == 'Z';
}

pid_t read_pid(const std::string& path) {
  std::ifstream file(path);
  pid_t pid = 0;
  file >> pid;
  return pid;
}

TEST_F(CompileCommandTest, RunsWithoutAShellAndCapturesOutput) {
  std::string directory = root_;
  compiler::CommandResult result = compiler::run_command(
      "/bin/sh", {"sh", "-c", "echo \"$0\"; echo to-stderr >&2; pwd; exit 3", "a;b $HOME `x`"}, directory, 10);
  EXPECT_EQ(result.spawn_error, 0);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.exit_status, 3);
  EXPECT_EQ(result.output, "a;b $HOME `x`\nto-stderr\n" + directory + "\n");
}

TEST_F(CompileCommandTest, SpawnErrorIsReported) {
  compiler::CommandResult result = compiler::run_command("/nonexistent", {"x"}, root_, 10);
  EXPECT_EQ(result.spawn_error, ENOENT);
}

TEST_F(CompileCommandTest, TimeLimitKillsTheWholeProcessGroup) {
  auto start = std::chrono::steady_clock::now();
  compiler::CommandResult result = compiler::run_command(
      "/bin/sh", {"sh", "-c", "sleep 1000 & echo $! > grandchild; echo $$ > child; wait"}, root_, 0.5);
  EXPECT_TRUE(result.timed_out);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
  pid_t child = read_pid(root_ + "/child"), grandchild = read_pid(root_ + "/grandchild");
  ASSERT_GT(child, 0);
  ASSERT_GT(grandchild, 0);
  EXPECT_TRUE(process_is_gone(child));
  for (int i = 0; i < 100 && !process_is_gone(grandchild); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(process_is_gone(grandchild)) << "the compiler's children must be killed too";
}

TEST_F(CompileCommandTest, MissingCompilerIsACompileErrorNamingIt) {
  ::setenv("KILN_CXX", "/nonexistent", 1);
  CompileError error = build_error();
  EXPECT_EQ(error.op(), "answer");
  EXPECT_CONTAINS(error.what(), "/nonexistent");
  EXPECT_CONTAINS(error.what(), "KILN_CXX");
  ::setenv("KILN_CXX", "kiln-no-such-compiler", 1);
  EXPECT_CONTAINS(build_error().what(), "'kiln-no-such-compiler' was not found on PATH");
  std::ofstream(root_ + "/not-executable") << "#!/bin/sh\n";
  ::setenv("KILN_CXX", (root_ + "/not-executable").c_str(), 1);
  EXPECT_CONTAINS(build_error().what(), "is not an executable file");
}

TEST_F(CompileCommandTest, CompilerFailureCarriesItsFirstLinesOfOutput) {
  std::string compiler = write_script("failing-c++",
                                      "case \"$1\" in --version) echo 'failing 1.0'; exit 0;; esac\n"
                                      "echo 'generated.cpp:3:7: error: this is what went wrong' >&2\n"
                                      "for i in $(seq 2 30); do echo \"note line $i\" >&2; done\n"
                                      "exit 1\n");
  ::setenv("KILN_CXX", compiler.c_str(), 1);
  CompileError error = build_error();
  EXPECT_EQ(error.op(), "answer");
  EXPECT_CONTAINS(error.detail(), "exited with status 1");
  EXPECT_CONTAINS(error.detail(), "error: this is what went wrong");
  EXPECT_CONTAINS(error.detail(), "note line 20\n");
  EXPECT_EQ(error.detail().find("note line 21"), std::string::npos) << error.detail();
  EXPECT_CONTAINS(error.detail(), "(10 more lines)");
  EXPECT_TRUE(cache_files().empty());
}

TEST_F(CompileCommandTest, CompilerKilledBySignalIsACompileError) {
  ::setenv("KILN_CXX",
           write_script("crashing-c++",
                        "case \"$1\" in --version) echo 'crashing 1.0'; exit 0;; esac\n"
                        "echo 'internal compiler error' >&2; kill -SEGV $$\n")
               .c_str(),
           1);
  CompileError error = build_error();
  EXPECT_CONTAINS(error.detail(), "killed by signal " + std::to_string(SIGSEGV));
  EXPECT_CONTAINS(error.detail(), "internal compiler error");
}

TEST_F(CompileCommandTest, CompilerWritingNothingIsACompileError) {
  ::setenv("KILN_CXX", write_script("lazy-c++", "echo 'lazy 1.0'\n").c_str(), 1);
  EXPECT_CONTAINS(build_error().detail(), "wrote no shared object");
}

TEST_F(CompileCommandTest, CompilerPastTheTimeLimitIsKilled) {
  std::string compiler = write_script("sleeping-c++",
                                      "case \"$1\" in --version) echo 'sleeping 1.0'; exit 0;; esac\n"
                                      "echo $$ > '" +
                                          root_ +
                                          "/child'\n"
                                          "sleep 1000 &\n"
                                          "echo $! > '" +
                                          root_ +
                                          "/grandchild'\n"
                                          "wait\n");
  ::setenv("KILN_CXX", compiler.c_str(), 1);
  ::setenv("KILN_COMPILE_TIMEOUT", "1", 1);
  auto start = std::chrono::steady_clock::now();
  CompileError error = build_error();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_CONTAINS(error.detail(), "ran past the time limit of 1");
  EXPECT_CONTAINS(error.detail(), "KILN_COMPILE_TIMEOUT");
  EXPECT_LT(seconds, 5) << "the compiler must be killed at the limit";
  for (const char* file : {"/child", "/grandchild"}) {
    pid_t pid = read_pid(root_ + file);
    ASSERT_GT(pid, 0) << file;
    for (int i = 0; i < 100 && !process_is_gone(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(process_is_gone(pid)) << file << " " << pid << " is still running";
  }
}

TEST_F(CompileCommandTest, TimeoutComesFromTheEnvironment) {
  EXPECT_EQ(compiler::compile_timeout_seconds(), 120);
  ::setenv("KILN_COMPILE_TIMEOUT", "2.5", 1);
  EXPECT_EQ(compiler::compile_timeout_seconds(), 2.5);
  for (const char* bad : {"soon", "0", "-3", "1e999", "5s"}) {
    ::setenv("KILN_COMPILE_TIMEOUT", bad, 1);
    EXPECT_EQ(compiler::compile_timeout_seconds(), 120) << bad;
    EXPECT_EQ(compiler::compile_timeout_seconds(), 120) << bad;
    EXPECT_EQ(warnings({std::string("KILN_COMPILE_TIMEOUT=") + bad}), 1) << all_messages();
  }
}

TEST_F(CompileCommandTest, CompilerRunsInAPrivateDirectoryThatIsRemoved) {
  // The fake compiler records its arguments and its directory's mode, then compiles for real.
  std::string compiler = write_script("recording-c++",
                                      "case \"$1\" in --version) exec c++ --version;; esac\n"
                                      "echo \"$@\" > '" +
                                          root_ +
                                          "/arguments'\n"
                                          "pwd > '" +
                                          root_ +
                                          "/directory'\n"
                                          "stat -c %a . > '" +
                                          root_ +
                                          "/mode'\n"
                                          "exec c++ \"$@\"\n");
  std::string temporary = root_ + "/tmp";
  std::filesystem::create_directory(temporary);
  ::setenv("TMPDIR", temporary.c_str(), 1);
  ::setenv("KILN_CXX", compiler.c_str(), 1);
  EXPECT_EQ(call_answer(build()), 42);
  std::string directory, mode, arguments;
  std::getline(std::ifstream(root_ + "/directory"), directory);
  std::getline(std::ifstream(root_ + "/mode"), mode);
  std::getline(std::ifstream(root_ + "/arguments"), arguments);
  EXPECT_EQ(directory.rfind(temporary + "/kiln-build-", 0), 0u) << directory;
  EXPECT_EQ(mode, "700");
  // Names relative to the directory it runs in: renaming the directory cannot redirect them.
  EXPECT_EQ(arguments, "-std=c++20 -O1 -fPIC -shared -o answer.so answer.cpp");
  EXPECT_TRUE(std::filesystem::is_empty(temporary)) << "the build directory must be removed";
  ::setenv("KILN_CXX", write_script("failing-c++", "echo nope; exit 1\n").c_str(), 1);
  build_error();
  EXPECT_TRUE(std::filesystem::is_empty(temporary)) << "also after a failure";
}

// Makes <root>/tmp and sets TMPDIR to it; returns its path.
std::string use_own_tmpdir(const BuildTest& test) {
  std::string temporary = test.root() + "/tmp";
  std::filesystem::create_directory(temporary);
  ::setenv("TMPDIR", temporary.c_str(), 1);
  return temporary;
}

// The names in `directory`.
std::vector<std::string> names_in(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// Waits up to 10 s for `path` to exist.
bool wait_for(const std::string& path) {
  for (int i = 0; i < 1000 && !std::filesystem::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return std::filesystem::exists(path);
}

TEST_F(CompileCommandTest, BuildDirectoryRenamedDuringTheBuildChangesNothing) {
  // Another user's move, played by the compiler itself: it renames its build directory away and puts one of its
  // own in its place, holding another source and a shared object built from it (returning 666). A build that
  // used its directory by path would compile or load those.
  use_own_tmpdir(*this);
  const std::string evil = "extern \"C\" int kiln_answer() { return 666; }";
  ::setenv("KILN_CXX",
           write_script("swapping-c++",
                        "case \"$1\" in --version) exec c++ --version;; esac\n"
                        "directory=$(pwd)\n"
                        "mv \"$directory\" '" +
                            root_ +
                            "/moved' && mkdir \"$directory\" || exit 1\n"
                            "echo '" +
                            evil +
                            "' > \"$directory/answer.cpp\"\n"
                            "c++ -fPIC -shared -o \"$directory/answer.so\" \"$directory/answer.cpp\"\n"
                            "exec c++ \"$@\"\n")
               .c_str(),
           1);
  EXPECT_EQ(call_answer(build()), 42) << "the module must be the one built from kiln's source";
  compiler::clear_memory_cache_for_testing();
  BuildResult cached = build();
  EXPECT_TRUE(cached.from_disk_cache);
  EXPECT_EQ(call_answer(cached), 42) << "and so must the cached one";
  EXPECT_TRUE(std::filesystem::is_empty(root_ + "/moved")) << "the real build directory is emptied where it went";
}

TEST_F(CompileCommandTest, TmpdirOthersCanRenameInIsNotUsed) {
  std::string compiler = write_script("recording-c++",
                                      "case \"$1\" in --version) exec c++ --version;; esac\n"
                                      "pwd >> '" +
                                          root_ +
                                          "/directories'\n"
                                          "exec c++ \"$@\"\n");
  ::setenv("KILN_CXX", compiler.c_str(), 1);
  std::string shared = root_ + "/shared";
  std::filesystem::create_directory(shared);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  ::setenv("TMPDIR", shared.c_str(), 1);
  EXPECT_EQ(call_answer(build()), 42);
  EXPECT_EQ(call_answer(build("extern \"C\" int kiln_answer() { return 42; } // another key\n")), 42);
  EXPECT_EQ(warnings({"will not build in TMPDIR " + shared, "world-writable without the sticky bit (mode 0777)",
                      "building in " + cache_dir() + "/builds instead"}),
            1)
      << all_messages();
  EXPECT_TRUE(std::filesystem::is_empty(shared));
  std::ifstream directories(root_ + "/directories");
  std::string directory;
  for (int run = 0; run < 2 && std::getline(directories, directory); ++run)
    EXPECT_EQ(directory.rfind(cache_dir() + "/builds/kiln-build-", 0), 0u) << directory;
  struct stat status {};
  ASSERT_EQ(::stat((cache_dir() + "/builds").c_str(), &status), 0);
  EXPECT_EQ(status.st_mode & 0777, 0700u);

  // With the sticky bit (as /tmp has), only a directory's owner may rename it: TMPDIR is used.
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  EXPECT_EQ(call_answer(build("extern \"C\" int kiln_answer() { return 42; } // a third key\n")), 42);
  std::getline(directories, directory);
  EXPECT_EQ(directory.rfind(shared + "/kiln-build-", 0), 0u) << directory;
  EXPECT_EQ(warnings(), 1) << all_messages();
}

TEST_F(CompileCommandTest, TmpdirOfAnotherUserIsNotUsed) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to chown a directory to another user";
  std::string theirs = root_ + "/theirs";
  std::filesystem::create_directory(theirs);
  ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
  ::setenv("TMPDIR", theirs.c_str(), 1);
  EXPECT_EQ(call_answer(build()), 42);
  EXPECT_EQ(warnings({"will not build in TMPDIR " + theirs, "owned by uid 65534"}), 1) << all_messages();
  EXPECT_TRUE(std::filesystem::is_empty(theirs));
}

TEST_F(CompileCommandTest, UnsafeTmpdirWithoutACacheDirectoryIsACompileError) {
  std::string shared = root_ + "/shared";
  std::filesystem::create_directory(shared);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  ::setenv("TMPDIR", shared.c_str(), 1);
  for (const char* variable : {"KILN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"}) ::unsetenv(variable);
  CompileError error = build_error();
  EXPECT_CONTAINS(error.detail(), "TMPDIR " + shared + " is not safe to build in");
  EXPECT_CONTAINS(error.detail(), "no private directory to build in instead");
  EXPECT_TRUE(std::filesystem::is_empty(shared));
}

TEST_F(CompileCommandTest, SharedObjectOverTheSizeLimitIsACompileError) {
  // The limit (1 GiB) made 1 MiB, so that a fake compiler can pass it quickly.
  compiler::set_module_size_limit_for_testing(1 << 20);
  ::setenv("KILN_CXX", compiler_writing_output("bloating-c++", "head -c 2097152 /dev/zero > \"$out\"").c_str(), 1);
  CompileError error = build_error();
  compiler::set_module_size_limit_for_testing(0);
  EXPECT_CONTAINS(error.detail(), "wrote a shared object of 2097152 bytes, over the limit of 1048576 bytes");
  EXPECT_TRUE(cache_files().empty());
}

TEST_F(CompileCommandTest, HugeSharedObjectIsRefusedWithoutReadingIt) {
  // 64 GiB, sparse: a build that read it whole would run out of memory and end the process.
  ::setenv("KILN_CXX", compiler_writing_output("huge-c++", "truncate -s 64G \"$out\"").c_str(), 1);
  CompileError error = build_error();
  EXPECT_CONTAINS(error.detail(), "wrote a shared object of 68719476736 bytes, over the limit of 1073741824 bytes");
}

TEST_F(CompileCommandTest, BuildDirectoryOfAKilledProcessIsRemovedWithItsCompiler) {
  const std::string temporary = use_own_tmpdir(*this);
  // The compiler records its pid and hangs; its process is then killed with SIGKILL.
  ::setenv("KILN_CXX",
           write_script("hanging-c++",
                        "case \"$1\" in --version) exec c++ --version;; esac\n"
                        "echo $$ > '" +
                            root_ +
                            "/compiler.new'\n"
                            "mv '" +
                            root_ + "/compiler.new' '" + root_ +
                            "/compiler'\n"
                            "exec sleep 1000\n")
               .c_str(),
           1);
  pid_t child = ::fork();
  if (child == 0) {
    try {
      build();
    } catch (...) {
    }
    ::_exit(0);
  }
  ASSERT_TRUE(wait_for(root_ + "/compiler"));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  pid_t compiler = read_pid(root_ + "/compiler");
  ASSERT_GT(compiler, 0);
  // What a SIGKILL leaves: the build directory, and the compiler running in it.
  std::vector<std::string> left = names_in(temporary);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].rfind("kiln-build-", 0), 0u) << left[0];
  EXPECT_FALSE(process_is_gone(compiler));

  // The next process to build there (this one) removes both.
  ::unsetenv("KILN_CXX");
  EXPECT_EQ(call_answer(build()), 42);
  EXPECT_TRUE(names_in(temporary).empty());
  for (int i = 0; i < 100 && !process_is_gone(compiler); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(process_is_gone(compiler)) << "the dead build's compiler must be killed";
  EXPECT_EQ(logged(LogLevel::info, {"removed the build directory " + temporary + "/" + left[0]}), 1) << all_messages();
}

TEST_F(CompileCommandTest, LiveBuildDirectoriesAndOtherDirectoriesAreLeftAlone) {
  const std::string temporary = use_own_tmpdir(*this);
  // A build in progress in another thread: its compiler waits for a file.
  ::setenv("KILN_CXX",
           write_script("waiting-c++",
                        "case \"$1\" in --version) exec c++ --version;; esac\n"
                        "touch '" +
                            root_ +
                            "/started'\n"
                            "while [ ! -e '" +
                            root_ +
                            "/go' ]; do sleep 0.02; done\n"
                            "exec c++ \"$@\"\n")
               .c_str(),
           1);
  int answer = 0;
  std::thread builder([&answer] { answer = call_answer(build()); });
  ASSERT_TRUE(wait_for(root_ + "/started"));
  // A directory with the prefix but no marker is not kiln's: a dead process's would have one.
  std::filesystem::create_directory(temporary + "/kiln-build-someone-elses");
  std::filesystem::create_directory(temporary + "/other");
  EXPECT_EQ(compiler::remove_stale_build_directories(temporary), 0);
  EXPECT_EQ(names_in(temporary).size(), 3u);
  std::ofstream(root_ + "/go") << "";
  builder.join();
  EXPECT_EQ(answer, 42);
  EXPECT_EQ(names_in(temporary), (std::vector<std::string>{"kiln-build-someone-elses", "other"}));
}

TEST_F(CompileCommandTest, IdentityIsComputedOncePerCompiler) {
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  compiler::CompilerIdentity identity = compiler::compiler_identity("answer");
  EXPECT_EQ(identity.command, std::getenv("KILN_CXX"));
  EXPECT_EQ(identity.path, identity.command);
  EXPECT_CONTAINS(identity.canonical_path, "counting-c++ size ");
  std::string version;
  std::getline(std::ifstream(root_ + "/calls"), version);
  EXPECT_EQ(version, "--version");
  EXPECT_FALSE(identity.version.empty());
  build();
  build("extern \"C\" int kiln_answer() { return 7; }\n");
  compiler::compiler_identity("answer");
  std::ifstream calls(root_ + "/calls");
  int version_runs = 0;
  for (std::string line; std::getline(calls, line);) version_runs += line == "--version" ? 1 : 0;
  EXPECT_EQ(version_runs, 1);
  EXPECT_EQ(compiler_runs(), 2);
}

TEST_F(CompileCommandTest, DefaultCompilerIsFoundOnPath) {
  compiler::CompilerIdentity identity = compiler::compiler_identity("answer");
  EXPECT_EQ(identity.command, "c++");
  EXPECT_EQ(identity.path.front(), '/');
  EXPECT_FALSE(identity.version.empty());
}

TEST_F(CompileCommandTest, KeyCoversEverythingTheBuildDependsOn) {
  compiler::CompilerIdentity identity{"c++", "/usr/bin/c++", "/usr/bin/g++-12 size 1 mtime 2", "g++ 12.2.0"};
  auto key = [&](const std::string& source, const std::vector<std::string>& flags,
                 const compiler::CompilerIdentity& compiler, const std::vector<std::string>& libraries = {}) {
    return compiler::to_hex(compiler::module_key(source, {flags, "f", libraries}, compiler));
  };
  const std::string base = key("int f();", {"-O2", "-shared"}, identity);
  EXPECT_EQ(key("int f();", {"-O2", "-shared"}, identity), base) << "deterministic";
  EXPECT_NE(key("int g();", {"-O2", "-shared"}, identity), base);
  EXPECT_NE(key("int f();", {"-O3", "-shared"}, identity), base);
  EXPECT_NE(key("int f();", {"-shared", "-O2"}, identity), base);
  EXPECT_NE(key("int f();", {"-O2-shared"}, identity), base) << "fields are length-prefixed";
  EXPECT_NE(key("int f();", {"-O2", "-shared"}, identity, {"-lm"}), base);
  EXPECT_NE(key("int f();", {"-O2"}, identity, {"-shared"}), base) << "flags and libraries are told apart";
  for (std::string compiler::CompilerIdentity::*field :
       {&compiler::CompilerIdentity::command, &compiler::CompilerIdentity::canonical_path,
        &compiler::CompilerIdentity::version}) {
    compiler::CompilerIdentity other = identity;
    other.*field += "x";
    EXPECT_NE(key("int f();", {"-O2", "-shared"}, other), base);
  }
}

TEST_F(CompileCommandTest, HostCpuFeaturesNameTheIsa) {
  const std::string& features = compiler::host_cpu_features();
  EXPECT_CONTAINS(features, "machine: ");
#if defined(__x86_64__) && defined(__linux__)
  EXPECT_CONTAINS(features, "flags");
  EXPECT_CONTAINS(features, " sse2");
#endif
  EXPECT_EQ(features.find("MHz"), std::string::npos) << "the clock changes; it must not be in the key";
}

TEST_F(CompileCommandTest, OptimizedNativeBuildWorks) {
  BuildResult result =
      compiler::build_module(kAnswerSource, {{"-std=c++20", "-O3", "-march=native", "-fPIC", "-shared"}, "answer"});
  EXPECT_EQ(call_answer(result), 42);
}

}  // namespace
}  // namespace kiln::testing
