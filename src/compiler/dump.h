#pragma once
// KILN_DUMP_TO=dir: the compiler's stages of each compiled function written to
// files there, for a user to read.

#include "compiler/cache/file_access.h"

#include <string>

namespace kiln::compiler {

// Writes the stages of one function as files <dir>/<function>.<stage> (the
// caller's `stage` names carry the extension: "0-traced.txt"; a '/' in the
// function's name becomes '_'); does nothing
// when KILN_DUMP_TO is unset or empty. The directory is created (with its
// parents) if needed and opened once; each file is written whole under a
// temporary name and renamed into place, so a symbolic link or hard link
// planted at a file's name is replaced, never written through, and a reader
// never sees half a file. The first failure warns and stops this dumper.
class Dumper {
 public:
  explicit Dumper(const std::string& function_name);

  void write(const std::string& stage, const std::string& text);
  // A file every function's stages share (the CPU prelude their sources include), as <dir>/<name>.
  void write_shared(const std::string& name, const std::string& text);

  bool enabled() const { return directory_.valid(); }

 private:
  void fail(const std::string& problem);

  FileDescriptor directory_;
  std::string path_;
  std::string function_name_;
};

}  // namespace kiln::compiler
