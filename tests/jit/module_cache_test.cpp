// The compiled-module cache: memory and disk hits, corrupt and tampered
// entries, unusable directories, concurrent builds; and SHA-256.

#include "compiler/cache/module_cache.h"
#include "compiler/cache/sha256.h"
#include "jit/build_test_fixture.h"

#include <kiln/error.h>

#include <fcntl.h>
#include <sys/wait.h>

#include <barrier>
#include <thread>

namespace kiln::testing {
namespace {

using compiler::BuildResult;

// ---- SHA-256 ----

TEST(Sha256, StandardVectors) {
  using compiler::sha256, compiler::to_hex;
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      to_hex(sha256("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                    "mnopqrstnopqrstu")),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(to_hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundariesAndIncrementalUpdates) {
  // sha256sum of n 'a's: lengths around the 55/56/64-byte padding boundaries.
  const std::pair<int, const char*> expected[] = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
      {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
      {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
      {128, "6836cf13bac400e9105071cd6af47084dfacad4e5e302c94bfed24e013afb73e"}};
  for (const auto& [length, digest] : expected) {
    std::string message(std::size_t(length), 'a');
    EXPECT_EQ(compiler::to_hex(compiler::sha256(message)), digest) << length;
    for (std::size_t chunk : {1, 3, 7, 63, 64, 65}) {
      compiler::Sha256 hasher;
      for (std::size_t offset = 0; offset < message.size(); offset += chunk)
        hasher.update(std::string_view(message).substr(offset, chunk));
      EXPECT_EQ(compiler::to_hex(hasher.finish()), digest) << length << " in chunks of " << chunk;
    }
  }
}

// ---- Memory and disk hits ----

using ModuleCacheTest = BuildTest;

TEST_F(ModuleCacheTest, BuildsThenHitsMemoryThenDiskWithoutRunningTheCompiler) {
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  BuildResult first = build();
  EXPECT_EQ(call_answer(first), 42);
  EXPECT_FALSE(first.from_memory_cache);
  EXPECT_FALSE(first.from_disk_cache);
  EXPECT_GT(first.compile_seconds, 0);
  EXPECT_EQ(first.key.size(), 64u);
  EXPECT_EQ(compiler_runs(), 1);
  EXPECT_EQ(logged(LogLevel::info, {"compiled answer"}), 1);
  ASSERT_EQ(cache_files().size(), 1u);
  EXPECT_EQ(cache_files()[0], cache_dir() + "/" + first.key + ".kiln");

  BuildResult second = build();
  EXPECT_TRUE(second.from_memory_cache);
  EXPECT_EQ(second.module, first.module);
  EXPECT_EQ(second.compile_seconds, 0);

  compiler::clear_memory_cache_for_testing();
  BuildResult third = build();
  EXPECT_TRUE(third.from_disk_cache);
  EXPECT_FALSE(third.from_memory_cache);
  EXPECT_EQ(third.compile_seconds, 0);
  EXPECT_EQ(third.key, first.key);
  EXPECT_EQ(call_answer(third), 42);
  EXPECT_EQ(logged(LogLevel::info, {"loaded answer from the disk cache"}), 1);
  EXPECT_EQ(compiler_runs(), 1) << "a disk hit must not run the compiler";
  EXPECT_EQ(warnings(), 0) << all_messages();
}

TEST_F(ModuleCacheTest, ModuleIsUnloadedWhenTheLastReferenceGoes) {
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  std::weak_ptr<const compiler::LoadedModule> weak = build().module;
  EXPECT_TRUE(weak.expired()) << "the memory cache must not keep modules alive";
  EXPECT_TRUE(build().from_disk_cache);
  EXPECT_EQ(compiler_runs(), 1);
}

TEST_F(ModuleCacheTest, SourceFlagsAndCompilerAreInTheKey) {
  BuildResult answer = build();
  BuildResult other_source = build("extern \"C\" int kiln_answer() { return 7; }\n");
  std::vector<std::string> flags = test_flags();
  flags.push_back("-DKILN_TEST_FLAG");
  BuildResult other_flags = build(kAnswerSource, flags);
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  BuildResult other_compiler = build();
  EXPECT_EQ(call_answer(other_source), 7);
  EXPECT_FALSE(other_source.from_memory_cache || other_flags.from_memory_cache || other_compiler.from_memory_cache);
  std::set<std::string> keys = {answer.key, other_source.key, other_flags.key, other_compiler.key};
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_EQ(cache_files().size(), 4u);
}

TEST_F(ModuleCacheTest, MissingSymbolIsACompileError) {
  BuildResult result = build();
  EXPECT_EQ(result.module->find_symbol("no_such_symbol"), nullptr);
  try {
    result.module->symbol("no_such_symbol");
    FAIL() << "expected a CompileError";
  } catch (const CompileError& error) {
    EXPECT_NE(std::string(error.what()).find("no_such_symbol"), std::string::npos) << error.what();
  }
}

// ---- Corrupt and tampered entries ----

// Builds once, damages the entry with `damage(path)`, and checks that the next build warns (naming the entry
// and `reason`), compiles again, works, and leaves a good entry.
void expect_rebuilt_after(BuildTest& test, const std::function<void(const std::string&)>& damage,
                          const std::string& reason) {
  ::setenv("KILN_CXX", test.counting_compiler().c_str(), 1);
  std::string key = BuildTest::build().key;
  std::string entry = test.cache_dir() + "/" + key + ".kiln";
  damage(entry);
  compiler::clear_memory_cache_for_testing();
  BuildResult rebuilt = BuildTest::build();
  EXPECT_FALSE(rebuilt.from_disk_cache);
  EXPECT_EQ(BuildTest::call_answer(rebuilt), 42);
  EXPECT_EQ(test.compiler_runs(), 2);
  EXPECT_EQ(test.warnings({"cache entry " + entry, reason, "rebuilding"}), 1) << test.all_messages();
  compiler::clear_memory_cache_for_testing();
  EXPECT_TRUE(BuildTest::build().from_disk_cache) << "the entry must have been replaced";
  struct stat status {};
  ASSERT_EQ(::lstat(entry.c_str(), &status), 0);
  EXPECT_TRUE(S_ISREG(status.st_mode));
  EXPECT_EQ(status.st_mode & 0777, 0600u);
}

void patch(const std::string& path, off_t offset, std::string_view bytes) {
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, bytes.data(), bytes.size(), offset), ssize_t(bytes.size()));
  ::close(fd);
}

TEST_F(ModuleCacheTest, TruncatedEntryIsRebuilt) {
  expect_rebuilt_after(
      *this,
      [](const std::string& path) {
        ASSERT_EQ(::truncate(path.c_str(), off_t(std::filesystem::file_size(path) / 2)), 0);
      },
      "is truncated");
}

TEST_F(ModuleCacheTest, EntryShorterThanItsHeaderIsRebuilt) {
  expect_rebuilt_after(
      *this, [](const std::string& path) { ASSERT_EQ(::truncate(path.c_str(), 10), 0); }, "too short");
}

TEST_F(ModuleCacheTest, FlippedPayloadByteIsRebuilt) {
  expect_rebuilt_after(
      *this,
      [](const std::string& path) {
        std::ifstream file(path, std::ios::binary);
        file.seekg(200);
        char byte = 0;
        file.get(byte);
        patch(path, 200, std::string(1, char(byte ^ 0x01)));
      },
      "wrong content hash");
}

TEST_F(ModuleCacheTest, GarbageHeaderIsRebuilt) {
  expect_rebuilt_after(
      *this, [](const std::string& path) { patch(path, 0, "GARBAGE!"); }, "garbage header");
}

TEST_F(ModuleCacheTest, EntryForAnotherKeyIsRebuilt) {
  expect_rebuilt_after(
      *this, [](const std::string& path) { patch(path, 20, "xxxx"); }, "different key");
}

TEST_F(ModuleCacheTest, WorldWritableEntryIsNotLoaded) {
  expect_rebuilt_after(
      *this, [](const std::string& path) { ASSERT_EQ(::chmod(path.c_str(), 0666), 0); },
      "group- or world-writable (mode 0666)");
}

TEST_F(ModuleCacheTest, SymbolicLinkEntryIsNotFollowed) {
  expect_rebuilt_after(
      *this,
      [this](const std::string& path) {
        std::string target = root_ + "/elsewhere.kiln";
        std::filesystem::rename(path, target);
        std::filesystem::create_symlink(target, path);
      },
      "symbolic link");
}

TEST_F(ModuleCacheTest, EntryOwnedByAnotherUserIsLeftAlone) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to chown a file to another user";
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  std::string entry = cache_dir() + "/" + build().key + ".kiln";
  ASSERT_EQ(::chown(entry.c_str(), 65534, 65534), 0);
  compiler::clear_memory_cache_for_testing();
  BuildResult rebuilt = build();
  EXPECT_FALSE(rebuilt.from_disk_cache);
  EXPECT_EQ(call_answer(rebuilt), 42);
  EXPECT_EQ(warnings({entry, "owned by uid 65534", "kept in memory only"}), 1) << all_messages();
  struct stat status {};
  ASSERT_EQ(::stat(entry.c_str(), &status), 0);
  EXPECT_EQ(status.st_uid, 65534u) << "another user's entry must not be replaced";
  EXPECT_TRUE(build().from_memory_cache);
}

// ---- Unusable cache directories ----

TEST_F(ModuleCacheTest, GroupWritableDirectoryIsNotUsed) {
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  build();
  ASSERT_EQ(::chmod(cache_dir().c_str(), 0770), 0);
  compiler::clear_memory_cache_for_testing();
  EXPECT_FALSE(build().from_disk_cache) << "an entry in a group-writable directory must not be loaded";
  EXPECT_EQ(call_answer(build("extern \"C\" int kiln_answer() { return 7; }\n")), 7);
  EXPECT_EQ(compiler_runs(), 3);
  EXPECT_EQ(warnings({"cannot use the cache directory " + cache_dir(), "group- or world-writable"}), 1)
      << all_messages();
  EXPECT_EQ(warnings(), 1);
  EXPECT_EQ(cache_files().size(), 1u) << "nothing may be written there";
}

TEST_F(ModuleCacheTest, UncreatableDirectoryWarnsOnceAndBuildsWork) {
  std::ofstream(root_ + "/a-file") << "x";
  for (std::string directory : {root_ + "/a-file/cache", std::string("/proc/kiln-nope")}) {
    ::setenv("KILN_CACHE_DIR", directory.c_str(), 1);
    EXPECT_EQ(call_answer(build()), 42);
    EXPECT_EQ(call_answer(build("extern \"C\" int kiln_answer() { return 42; } // another key\n")), 42);
    EXPECT_EQ(
        warnings({"cannot use the cache directory " + directory, "compiled functions will not be cached on disk"}), 1)
        << all_messages();
  }
  EXPECT_EQ(warnings(), 2);
}

TEST_F(ModuleCacheTest, UnwritableDirectoryWarnsOnceAndBuildsWork) {
  // Owned by us and not group/world-writable, but nobody can create files in it, root included.
  ::setenv("KILN_CACHE_DIR", "/proc/self/fdinfo", 1);
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  EXPECT_EQ(call_answer(build()), 42);
  EXPECT_EQ(call_answer(build("extern \"C\" int kiln_answer() { return 42; } // another key\n")), 42);
  EXPECT_EQ(warnings({"cannot use the cache directory /proc/self/fdinfo", "cannot create a file in it"}), 1)
      << all_messages();
  EXPECT_EQ(warnings(), 1);
  EXPECT_EQ(compiler_runs(), 2);
}

TEST_F(ModuleCacheTest, DirectoryIsCreatedPrivateWithItsParents) {
  std::string directory = root_ + "/a/b/kiln";
  ::setenv("KILN_CACHE_DIR", directory.c_str(), 1);
  build();
  for (std::string path : {root_ + "/a", root_ + "/a/b", directory}) {
    struct stat status {};
    ASSERT_EQ(::stat(path.c_str(), &status), 0) << path;
    EXPECT_EQ(status.st_mode & 0777, 0700u) << path;
  }
  EXPECT_EQ(warnings(), 0) << all_messages();
}

TEST_F(ModuleCacheTest, DirectoryComesFromTheEnvironment) {
  ::setenv("KILN_CACHE_DIR", "/somewhere/kiln/", 1);
  EXPECT_EQ(compiler::cache_directory(), "/somewhere/kiln");
  ::unsetenv("KILN_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  ::setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(compiler::cache_directory(), "/xdg/kiln");
  ::setenv("XDG_CACHE_HOME", "relative/is/ignored", 1);
  EXPECT_EQ(compiler::cache_directory(), "/home/someone/.cache/kiln");
  ::unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(compiler::cache_directory(), "/home/someone/.cache/kiln");
  ::unsetenv("HOME");
  EXPECT_EQ(compiler::cache_directory(), "");
}

TEST_F(ModuleCacheTest, GarbageSharedObjectIsAnErrorAndIsNotCached) {
  std::string fake = write_script("garbage-c++",
                                  "case \"$1\" in --version) echo 'fake 1.0'; exit 0;; esac\n"
                                  "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=\"$2\"; shift; done\n"
                                  "echo call >> '" +
                                      root_ +
                                      "/calls'\n"
                                      "echo 'not an ELF file' > \"$out\"\n");
  ::setenv("KILN_CXX", fake.c_str(), 1);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    try {
      build();
      FAIL() << "expected a CompileError";
    } catch (const CompileError& error) {
      EXPECT_EQ(error.op(), "answer");
      EXPECT_NE(error.detail().find("dlopen"), std::string::npos) << error.what();
    }
    EXPECT_TRUE(cache_files().empty());
    std::ifstream calls(root_ + "/calls");
    EXPECT_EQ(std::count(std::istreambuf_iterator<char>(calls), {}, '\n'), attempt) << "failures are not cached";
  }
}

// ---- Concurrency ----

TEST_F(ModuleCacheTest, ThreadsBuildingTheSameKeyCompileOnce) {
  ::setenv("KILN_CXX", counting_compiler("sleep 0.3").c_str(), 1);
  compiler::compiler_identity("answer");  // so that --version is not what the threads wait for
  constexpr int kThreads = 4;
  std::vector<BuildResult> results(kThreads);
  std::barrier start(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = build();
    });
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(compiler_runs(), 1);
  int compiled = 0;
  for (const BuildResult& result : results) {
    EXPECT_EQ(result.module, results[0].module);
    EXPECT_EQ(call_answer(result), 42);
    compiled += result.from_memory_cache ? 0 : 1;
  }
  EXPECT_EQ(compiled, 1);
}

TEST_F(ModuleCacheTest, DifferentKeysBuildInParallel) {
  // Each compile waits (up to 10 s) until two compiles have started: serialized builds would fail.
  std::string compiler = write_script(
      "rendezvous-c++",
      "case \"$1\" in --version) exec c++ --version;; esac\n"
      "touch '" +
          root_ +
          "/started.'$$\n"
          "i=0; while [ $(ls '" +
          root_ +
          "' | grep -c '^started[.]') -lt 2 ]; do\n"
          "  i=$((i+1)); [ $i -gt 200 ] && { echo 'compiles were serialized' >&2; exit 1; }; sleep 0.05; done\n"
          "exec c++ \"$@\"\n");
  ::setenv("KILN_CXX", compiler.c_str(), 1);
  compiler::compiler_identity("answer");
  std::vector<std::string> outcomes(2);
  auto build_one = [&](int index, const std::string& source) {
    try {
      outcomes[index] = std::to_string(call_answer(build(source)));
    } catch (const CompileError& error) {
      outcomes[index] = error.what();
    }
  };
  std::thread other(build_one, 1, "extern \"C\" int kiln_answer() { return 7; }\n");
  build_one(0, kAnswerSource);
  other.join();
  EXPECT_EQ(outcomes, (std::vector<std::string>{"42", "7"}));
}

// Runs `body` in `count` forked processes released at once; returns their exit codes.
std::vector<int> run_in_processes(int count, const std::function<int(int)>& body) {
  int ready[2], go[2];
  EXPECT_EQ(::pipe(ready), 0);
  EXPECT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < count; ++i) {
    pid_t child = ::fork();
    if (child == 0) {
      char byte = 0;
      if (::write(ready[1], "r", 1) != 1 || ::read(go[0], &byte, 1) != 1) ::_exit(100);
      ::_exit(body(i));
    }
    children.push_back(child);
  }
  char byte;
  for (int i = 0; i < count; ++i) EXPECT_EQ(::read(ready[0], &byte, 1), 1);
  EXPECT_EQ(::write(go[1], std::string(std::size_t(count), 'g').data(), std::size_t(count)), count);
  std::vector<int> codes;
  for (pid_t child : children) {
    int status = 0;
    ::waitpid(child, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 200 + WTERMSIG(status));
  }
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  return codes;
}

TEST_F(ModuleCacheTest, ProcessesBuildingTheSameKeyBothSucceed) {
  std::vector<int> codes = run_in_processes(2, [this](int) {
    BuildResult result = build();
    if (call_answer(result) != 42) return 1;
    return warnings() == 0 ? 0 : 2;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0}));
  EXPECT_EQ(cache_files().size(), 1u);
  EXPECT_TRUE(cache_files(".tmp").empty());
  EXPECT_TRUE(build().from_disk_cache);
}

TEST_F(ModuleCacheTest, ReadersNeverSeeAHalfWrittenEntry) {
  // A 1 MiB module makes each write long. Writers delete the entry and store it again; readers load it.
  // A non-atomic write would show readers a short or mismatching entry, which they would warn about.
  BuildResult big = build(
      "extern \"C\" const unsigned char kiln_blob[1 << 20] = {1};\n"
      "extern \"C\" int kiln_answer() { return 42; }\n");
  std::string entry = cache_dir() + "/" + big.key + ".kiln";
  std::ifstream file(entry, std::ios::binary);
  std::string shared_object((std::istreambuf_iterator<char>(file)), {});
  ASSERT_GT(shared_object.size(), std::size_t(1 << 20));
  shared_object.erase(0, 88);
  compiler::Sha256Digest key;
  for (int i = 0; i < 32; ++i) key[i] = std::uint8_t(std::stoi(big.key.substr(2 * i, 2), nullptr, 16));
  std::vector<int> codes = run_in_processes(3, [&](int process) {
    for (int iteration = 0; iteration < 30; ++iteration) {
      compiler::clear_memory_cache_for_testing();
      if (process == 0) ::unlink(entry.c_str());
      BuildResult result = compiler::get_or_build(key, "big", [&] { return shared_object; });
      if (call_answer(result) != 42) return 1;
    }
    return warnings() == 0 ? 0 : 2;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
  EXPECT_TRUE(cache_files(".tmp").empty()) << "temporary files must be renamed or removed";
}

}  // namespace
}  // namespace kiln::testing
