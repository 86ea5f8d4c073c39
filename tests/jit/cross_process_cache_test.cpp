// A second process running the same function compiles nothing: the module
// comes from the disk cache. A corrupted entry is rebuilt, not trusted.

#include "build_test_fixture.h"

#include <cstdio>
#include <fstream>

namespace kiln::testing {
namespace {

// Runs the probe program with the test's cache directory; returns its output.
std::string run_probe(const std::string& cache_dir) {
  std::string command = "KILN_CACHE_DIR='" + cache_dir + "' '" KILN_CACHE_PROBE "' 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return "popen failed";
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  ::pclose(pipe);
  return output;
}

TEST_F(BuildTest, SecondProcessLoadsTheModuleFromDisk) {
  std::string first = run_probe(cache_dir());
  EXPECT_NE(first.find("compiles=1 cache_hits=0 fallbacks=0"), std::string::npos) << first;
  std::string second = run_probe(cache_dir());
  EXPECT_NE(second.find("compiles=0 cache_hits=1 fallbacks=0"), std::string::npos) << second;
  // Same answer both times.
  EXPECT_EQ(first.substr(first.find("total=")), second.substr(second.find("total=")));

  // Flip a byte of the module: the third process warns, rebuilds, and is right.
  std::vector<std::string> entries = cache_files();
  ASSERT_EQ(entries.size(), 1u);
  {
    std::fstream file(entries[0], std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-10, std::ios::end);
    file.put('\x5a');
  }
  std::string third = run_probe(cache_dir());
  EXPECT_NE(third.find("compiles=1 cache_hits=0"), std::string::npos) << third;
  EXPECT_NE(third.find("kiln warning"), std::string::npos) << third;
  EXPECT_EQ(first.substr(first.find("total=")), third.substr(third.find("total=")));
}

}  // namespace
}  // namespace kiln::testing
