#pragma once
// A fixture for tests of compiling and caching modules: a private temporary
// directory per test (the cache lives in it), the environment knobs saved and
// restored, kiln's log captured, the memory cache cleared, and helpers to write
// fake compilers as shell scripts.

#include "compiler/cache/module_cache.h"
#include "compiler/codegen/cpu/compile_command.h"

#include <kiln/log.h>

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::testing {

inline const char* const kAnswerSource = "extern \"C\" int kiln_answer() { return 42; }\n";

class BuildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kiln-build-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    for (const char* name :
         {"KILN_CXX", "KILN_CACHE_DIR", "KILN_COMPILE_TIMEOUT", "TMPDIR", "XDG_CACHE_HOME", "HOME"}) {
      const char* value = std::getenv(name);
      saved_environment_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    }
    ::unsetenv("KILN_CXX");
    ::unsetenv("KILN_COMPILE_TIMEOUT");
    ::setenv("KILN_CACHE_DIR", cache_dir().c_str(), 1);
    compiler::clear_memory_cache_for_testing();
    previous_handler_ = set_log_handler([this](LogLevel level, const std::string& message) {
      std::lock_guard lock(log_mutex_);
      messages_.push_back({level, message});
    });
  }

  void TearDown() override {
    set_log_handler(std::move(previous_handler_));
    compiler::set_module_size_limit_for_testing(0);
    for (const auto& [name, value] : saved_environment_)
      value ? ::setenv(name.c_str(), value->c_str(), 1) : ::unsetenv(name.c_str());
    compiler::clear_memory_cache_for_testing();
    std::error_code ignored;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root_, ignored))
      if (entry.is_directory(ignored) && !entry.is_symlink(ignored)) ::chmod(entry.path().c_str(), 0700);
    std::filesystem::remove_all(root_, ignored);
  }

 public:  // helpers, also for free functions shared by several tests
  std::string cache_dir() const { return root_ + "/cache"; }
  const std::string& root() const { return root_; }

  // Writes an executable /bin/sh script; `body` follows the #! line.
  std::string write_script(const std::string& file_name, const std::string& body) const {
    std::string path = root_ + "/" + file_name;
    std::ofstream(path) << "#!/bin/sh\n" << body;
    ::chmod(path.c_str(), 0755);
    return path;
  }

  // A fake compiler: `--version` prints "<file_name> 1.0"; any other call runs the shell `command` with $out
  // set to the path after -o.
  std::string compiler_writing_output(const std::string& file_name, const std::string& command) const {
    return write_script(file_name, "case \"$1\" in --version) echo '" + file_name + " 1.0'; exit 0;; esac\n" +
                                       "while [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=\"$2\"; shift; done\n" + command +
                                       "\n");
  }

  // A compiler that appends its arguments to <root>/calls, then runs c++.
  // `before` runs first (e.g. "sleep 1").
  std::string counting_compiler(const std::string& before = "") const {
    return write_script("counting-c++", "echo \"$@\" >> '" + root_ + "/calls'\n" + before + "\nexec c++ \"$@\"\n");
  }

  // Calls of a counting compiler that compiled something (not --version).
  int compiler_runs() const {
    std::ifstream calls(root_ + "/calls");
    int runs = 0;
    for (std::string line; std::getline(calls, line);) runs += line.find(" -o ") != std::string::npos ? 1 : 0;
    return runs;
  }

  // Messages logged at `level` containing every fragment.
  int logged(LogLevel level, std::initializer_list<std::string> fragments) const {
    std::lock_guard lock(log_mutex_);
    int found = 0;
    for (const auto& [message_level, message] : messages_) {
      bool all = message_level == level;
      for (const std::string& fragment : fragments) all = all && message.find(fragment) != std::string::npos;
      found += all ? 1 : 0;
    }
    return found;
  }
  int warnings(std::initializer_list<std::string> fragments = {}) const { return logged(LogLevel::warning, fragments); }

  std::string all_messages() const {
    std::lock_guard lock(log_mutex_);
    std::string text;
    for (const auto& entry : messages_) text += entry.second + "\n";
    return text;
  }

  // Paths of the files in the cache directory whose name contains `fragment` (".tmp": temporary files) or
  // by default, of the entries.
  std::vector<std::string> cache_files(const std::string& fragment = "") const {
    std::vector<std::string> files;
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(cache_dir(), ignored)) {
      std::string file_name = entry.path().filename().string();
      bool is_entry = file_name[0] != '.' && file_name.ends_with(".kiln");
      if (fragment.empty() ? is_entry : file_name.find(fragment) != std::string::npos)
        files.push_back(entry.path().string());
    }
    return files;
  }

  static std::vector<std::string> test_flags() { return {"-std=c++20", "-O1", "-fPIC", "-shared"}; }

  static compiler::BuildResult build(const std::string& source = kAnswerSource,
                                     std::vector<std::string> flags = test_flags()) {
    return compiler::build_module(source, {std::move(flags), "answer"});
  }

  static int call_answer(const compiler::BuildResult& result) {
    return reinterpret_cast<int (*)()>(result.module->symbol("kiln_answer"))();
  }

  std::string root_;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_environment_;
  LogHandler previous_handler_;
  mutable std::mutex log_mutex_;
  std::vector<std::pair<LogLevel, std::string>> messages_;
};

}  // namespace kiln::testing
