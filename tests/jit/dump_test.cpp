// KILN_DUMP_TO's dumper: files written whole and renamed into place, so a
// symbolic or hard link planted in the dump directory is replaced, never
// written through.

#include "compiler/dump.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace kiln::testing {
namespace {

std::string contents(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

class DumperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kiln-dump-test-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    dump_ = root_ + "/dump";
    std::filesystem::create_directory(dump_);
    std::ofstream(root_ + "/victim") << "precious";
    ::setenv("KILN_DUMP_TO", dump_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("KILN_DUMP_TO");
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  std::string root_, dump_;
};

TEST_F(DumperTest, WritesEachStageAsAFile) {
  compiler::Dumper dumper("f");
  EXPECT_TRUE(dumper.enabled());
  dumper.write("0-traced.txt", "traced text\n");
  dumper.write("4-source.cpp", "source text\n");
  EXPECT_EQ(contents(dump_ + "/f.0-traced.txt"), "traced text\n");
  EXPECT_EQ(contents(dump_ + "/f.4-source.cpp"), "source text\n");
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dump_)) ++files;
  EXPECT_EQ(files, 2u) << "no temporary file is left behind";
}

TEST_F(DumperTest, SymbolicLinkAtAFileNameIsReplacedNotFollowed) {
  std::filesystem::create_symlink(root_ + "/victim", dump_ + "/f.0-traced.txt");
  compiler::Dumper dumper("f");
  dumper.write("0-traced.txt", "traced text\n");
  EXPECT_EQ(contents(root_ + "/victim"), "precious") << "the link's target must not be written";
  EXPECT_FALSE(std::filesystem::is_symlink(dump_ + "/f.0-traced.txt"));
  EXPECT_EQ(contents(dump_ + "/f.0-traced.txt"), "traced text\n");
}

TEST_F(DumperTest, HardLinkAtAFileNameIsReplacedNotWrittenThrough) {
  std::filesystem::create_hard_link(root_ + "/victim", dump_ + "/f.3-fused.txt");
  compiler::Dumper dumper("f");
  dumper.write("3-fused.txt", "plan\n");
  EXPECT_EQ(contents(root_ + "/victim"), "precious");
  EXPECT_EQ(contents(dump_ + "/f.3-fused.txt"), "plan\n");
}

TEST_F(DumperTest, SlashInTheFunctionNameStaysInTheDirectory) {
  compiler::Dumper dumper("../f");
  dumper.write("0-traced.txt", "traced text\n");
  EXPECT_EQ(contents(dump_ + "/.._f.0-traced.txt"), "traced text\n");
  EXPECT_FALSE(std::filesystem::exists(root_ + "/f.0-traced.txt"));
}

TEST_F(DumperTest, UnusableDirectoryWarnsOnceAndStops) {
  std::string not_a_directory = root_ + "/victim";
  ::setenv("KILN_DUMP_TO", not_a_directory.c_str(), 1);
  CapturedLog log;
  compiler::Dumper dumper("f");
  EXPECT_FALSE(dumper.enabled());
  dumper.write("0-traced.txt", "traced text\n");
  EXPECT_EQ(log.count("KILN_DUMP_TO: cannot write the stages of f to " + not_a_directory), 1);
  EXPECT_EQ(log.messages().size(), 1u);
  EXPECT_EQ(contents(not_a_directory), "precious");
}

TEST_F(DumperTest, NothingWithoutTheVariable) {
  ::unsetenv("KILN_DUMP_TO");
  compiler::Dumper dumper("f");
  EXPECT_FALSE(dumper.enabled());
  dumper.write("0-traced.txt", "traced text\n");
  EXPECT_TRUE(std::filesystem::is_empty(dump_));
}

}  // namespace
}  // namespace kiln::testing
