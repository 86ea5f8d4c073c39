#pragma once
// Building generated C++ into a loaded shared object with the system compiler,
// through the module cache (compiler/cache/module_cache.h).
//
// The compiler is $KILN_CXX (default `c++`): one program, found on PATH when it
// has no '/', run without a shell. A build is limited to $KILN_COMPILE_TIMEOUT
// seconds (default 120). See docs/cache.md.

#include "compiler/cache/module_cache.h"
#include "compiler/cache/sha256.h"

#include <functional>
#include <string>
#include <vector>

namespace kiln::compiler {

struct BuildOptions {
  // Passed verbatim before `-o <tmp>.so <tmp>.cpp`; they must make the compiler
  // produce a shared object (-fPIC -shared); the JIT's are cpu::compile_flags().
  std::vector<std::string> flags;
  std::string name;  // the function's name, for messages and temporary file names
  // Passed after the source, where the linker resolves them (`-lm`); the JIT's are
  // cpu::link_libraries().
  std::vector<std::string> libraries = {};
  // Called only when the module must be compiled: when it returns two or more
  // translation units -- the source split by kernels (cpu::translation_units) --
  // they are compiled at once (`-c`, each by its own compiler process) and linked
  // into the shared object. The cache key hashes the whole source, so every split
  // must compute what the whole does.
  std::function<std::vector<std::string>()> split = {};
};

// Compiles `source` into a shared object and loads it, unless an identical
// build is cached (in memory, else on disk). The cache key hashes the source,
// the flags, the compiler's identity (compiler_identity()) and the host CPU
// (host_cpu_features()).
// Throws kiln::CompileError (op = options.name; detail = what failed and the
// compiler's first 20 lines of output) when the compiler is missing, exits
// non-zero or is killed, runs past the time limit (its process group is
// killed), or produces something dlopen rejects.
// Thread-safe: concurrent builds of the same key compile once (the others wait);
// different keys build in parallel.
BuildResult build_module(const std::string& source, const BuildOptions& options);

// ---- The pieces of build_module, for tests and other builders ----

struct CompilerIdentity {
  std::string command;         // $KILN_CXX as given (or "c++"); the compiler's argv[0]
  std::string path;            // the absolute path found (PATH searched when `command` has no '/')
  std::string canonical_path;  // realpath(path), with the file's size and mtime
  std::string version;         // the first line of `command --version` (whatever its exit status)
};

// Resolves $KILN_CXX on every call; runs `--version` once per process per
// compiler (command and path). Throws kiln::CompileError (op = `name`) naming
// the compiler when it is not found or not executable, or when --version runs
// past the time limit.
CompilerIdentity compiler_identity(const std::string& name);

// The host CPU for the cache key: the machine architecture plus vendor, family,
// model and ISA feature flags from /proc/cpuinfo (or __builtin_cpu_supports on
// x86 when /proc is unreadable). Computed once per process.
const std::string& host_cpu_features();

// SHA-256 over the length-prefixed fields: a key-format tag, source, flags,
// libraries, compiler identity, host CPU features.
Sha256Digest module_key(const std::string& source, const BuildOptions& options, const CompilerIdentity& compiler);

// $KILN_COMPILE_TIMEOUT in seconds (a positive number; default 120). An invalid
// value warns once and the default is used.
double compile_timeout_seconds();

struct CommandResult {
  int spawn_error = 0;     // errno from posix_spawn; the other fields are unset when non-zero
  bool timed_out = false;  // killed (SIGKILL to its process group) at the time limit
  int exit_status = -1;    // when it exited
  int signal = 0;          // when a signal (not ours) killed it
  std::string output;      // stdout and stderr interleaved, at most the first 64 KiB
  double seconds = 0;      // wall-clock time
};

// Runs the executable `program` with `arguments` (arguments[0] is argv[0]) via
// posix_spawn, without a shell: in `working_directory`, in a new process group,
// stdin from /dev/null, stdout and stderr into `working_directory`/output.log.
// Polls for its exit; at `timeout_seconds` kills the whole process group and
// reaps the child. Thread-safe.
CommandResult run_command(const std::string& program, const std::vector<std::string>& arguments,
                          const std::string& working_directory, double timeout_seconds);

// Compiles `source` with `compiler flags... -o <name>.so <name>.cpp libraries...`
// (options.name is <name>) in a private build directory and returns the bytes
// of the shared object; or, when options.split gives several translation units,
// each with `compiler flags... -c -o unit<N>/<name>.o unit<N>/<name>.cpp` in
// parallel and the objects linked the same way. The build directory
// (kiln-build-*, mode 0700, removed afterwards) is made in $TMPDIR (or /tmp),
// or in <cache directory>/builds, with a warning, when other users could rename
// what is in $TMPDIR (group- or world-writable without the sticky bit, or owned
// by another user than root). It is used through a descriptor only: the
// compiler runs in it and is given names relative to it, and the shared object
// is read back relative to it, as a regular file of this user of at most
// module_size_limit() bytes.
// Throws kiln::CompileError (op = options.name) as build_module does, except
// for loading; a unit's error says which unit failed.
std::string compile_shared_object(const CompilerIdentity& compiler, const std::string& source,
                                  const BuildOptions& options);

// Removes the build directories in `directory` (a $TMPDIR) that processes which
// died during a build (SIGKILL, a crash) left behind -- those whose lock no
// live process holds -- after killing what is left of their compilers: the
// processes of this user in the compilers' process groups whose working
// directory is still inside them. Returns how many it removed. The first build
// of a process in a directory does this there.
int remove_stale_build_directories(const std::string& directory);

}  // namespace kiln::compiler
