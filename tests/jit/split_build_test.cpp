// Building a module from several translation units (BuildOptions::split): the
// units compiled at once and linked, the cache keyed by the whole source, a
// failing unit named in the error with nothing left behind.

#include "compiler/codegen/cpu/compile_command.h"
#include "jit/build_test_fixture.h"

#include <kiln/error.h>

namespace kiln::testing {
namespace {

using SplitBuildTest = BuildTest;

#define EXPECT_CONTAINS(text, fragment) \
  EXPECT_NE(std::string(text).find(fragment), std::string::npos) << "missing '" << (fragment) << "' in: " << (text)

// kiln_answer() in one unit calls kiln_part() defined in the other: the link must join them.
const char* const kWhole =
    "extern \"C\" int kiln_part() { return 2; }\nextern \"C\" int kiln_answer() { return 40 + kiln_part(); }\n";
const char* const kFirstUnit =
    "extern \"C\" int kiln_part();\nextern \"C\" int kiln_answer() { return 40 + kiln_part(); }\n";
const char* const kSecondUnit = "extern \"C\" int kiln_part() { return 2; }\n";

compiler::BuildOptions split_options(std::vector<std::string> units, int* calls = nullptr) {
  compiler::BuildOptions options{BuildTest::test_flags(), "answer"};
  options.split = [units, calls] {
    if (calls) ++*calls;
    return units;
  };
  return options;
}

// Lines of <root>/calls (a counting compiler's arguments) that contain `fragment`.
int calls_with(const BuildTest& test, const std::string& fragment) {
  std::ifstream calls(test.root() + "/calls");
  int found = 0;
  for (std::string line; std::getline(calls, line);) found += line.find(fragment) != std::string::npos ? 1 : 0;
  return found;
}

TEST_F(SplitBuildTest, UnitsAreCompiledAtOnceThenLinked) {
  // Each compile records when it started and ended; both must have started before either ended.
  const std::string stamps = root() + "/stamps";
  ::setenv("KILN_CXX",
           counting_compiler("case \" $* \" in *' -c '*) echo \"start $(date +%s%N)\" >> '" + stamps +
                             "'; sleep 1; echo \"end $(date +%s%N)\" >> '" + stamps + "';; esac")
               .c_str(),
           1);
  int splits = 0;
  compiler::BuildResult built = compiler::build_module(kWhole, split_options({kFirstUnit, kSecondUnit}, &splits));
  EXPECT_EQ(call_answer(built), 42);
  EXPECT_EQ(splits, 1);
  EXPECT_EQ(calls_with(*this, " -c "), 2) << "one compile per unit";
  EXPECT_EQ(compiler_runs(), 3) << "and one link";
  EXPECT_EQ(calls_with(*this, "unit1/answer.o"), 2) << "unit 1 is compiled and linked";
  std::ifstream stamp_file(stamps);
  std::vector<std::string> order;
  for (std::string word, time; stamp_file >> word >> time;) order.push_back(word);
  EXPECT_EQ(order, (std::vector<std::string>{"start", "start", "end", "end"})) << "the units overlap";
  EXPECT_EQ(logged(LogLevel::debug, {"answer: compiling translation unit 2 of 2 took"}), 1) << all_messages();

  // The key is the whole source's: an unsplit build of it is a cache hit, and split() is not called.
  compiler::clear_memory_cache_for_testing();
  compiler::BuildResult again = compiler::build_module(kWhole, split_options({kFirstUnit, kSecondUnit}, &splits));
  EXPECT_TRUE(again.from_disk_cache);
  EXPECT_EQ(splits, 1);
  EXPECT_EQ(call_answer(again), 42);
}

TEST_F(SplitBuildTest, OneUnitBuildsTheWholeSourceInOneStep) {
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  // The unit differs from the source: the source is what must be compiled.
  compiler::BuildResult built = compiler::build_module(kWhole, split_options({"this is not C++"}));
  EXPECT_EQ(call_answer(built), 42);
  EXPECT_EQ(compiler_runs(), 1);
  EXPECT_EQ(calls_with(*this, " -c "), 0);
}

TEST_F(SplitBuildTest, AFailingUnitIsNamedAndNothingIsLeftBehind) {
  std::string temporary = root() + "/tmp";
  std::filesystem::create_directory(temporary);
  ::setenv("TMPDIR", temporary.c_str(), 1);
  ::setenv("KILN_CXX", counting_compiler().c_str(), 1);
  try {
    compiler::build_module(kWhole, split_options({kFirstUnit, "int broken( {\n"}));
    ADD_FAILURE() << "expected a CompileError";
  } catch (const CompileError& error) {
    EXPECT_EQ(error.op(), "answer");
    EXPECT_CONTAINS(error.detail(), "compiling translation unit 2 of 2, exited with status 1");
    EXPECT_CONTAINS(error.detail(), "unit2/answer.cpp:1");  // the compiler's own message, with the unit's file
  }
  EXPECT_EQ(calls_with(*this, " -c "), 2) << "the other unit was compiled too, and waited for";
  EXPECT_EQ(compiler_runs(), 2) << "no link";
  EXPECT_TRUE(std::filesystem::is_empty(temporary)) << "the build directory must be removed";
  EXPECT_TRUE(cache_files().empty());

  // Nothing is lost: the same module builds afterwards.
  EXPECT_EQ(call_answer(compiler::build_module(kWhole, split_options({kFirstUnit, kSecondUnit}))), 42);
}

}  // namespace
}  // namespace kiln::testing
