#include "compiler/dump.h"

#include "runtime/log.h"

#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace kiln::compiler {

Dumper::Dumper(const std::string& function_name) : function_name_(function_name) {
  // One file name: a '/' in the function's name must not reach into (or out of) another directory.
  for (char& c : function_name_)
    if (c == '/') c = '_';
  const char* directory = std::getenv("KILN_DUMP_TO");
  if (!directory || !*directory) return;
  path_ = directory;
  std::error_code ignored;
  std::filesystem::create_directories(path_, ignored);
  directory_.reset(::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory_.valid()) fail("cannot open the directory: " + error_text(errno));
}

void Dumper::write(const std::string& stage, const std::string& text) {
  write_shared(function_name_ + "." + stage, text);
}

void Dumper::write_shared(const std::string& name, const std::string& text) {
  if (!enabled()) return;
  // Read by people: the umask decides who may read it, as for any file the user's programs write.
  if (std::string problem = replace_file(directory_.get(), name, {text}, {.mode = 0666}); !problem.empty())
    fail(problem);
}

void Dumper::fail(const std::string& problem) {
  runtime::warn("KILN_DUMP_TO: cannot write the stages of " + function_name_ + " to " + path_ + " (" + problem + ")");
  directory_.reset();
}

}  // namespace kiln::compiler
