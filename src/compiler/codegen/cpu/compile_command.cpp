#include "compiler/codegen/cpu/compile_command.h"

#include "runtime/log.h"

#include <kiln/error.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

extern char** environ;

namespace kiln::compiler {
namespace {

constexpr double kDefaultTimeoutSeconds = 120;
constexpr std::size_t kMaxOutputBytes = 64 * 1024;
constexpr int kOutputLinesInErrors = 20;

std::string error_text(int error) { return std::error_code(error, std::generic_category()).message(); }

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// Reads at most `limit` bytes of a file; empty if it cannot be read.
std::string read_file(const std::string& path, std::size_t limit) {
  std::ifstream file(path, std::ios::binary);
  std::string content(limit, '\0');
  file.read(content.data(), std::streamsize(limit));
  content.resize(std::size_t(file.gcount()));
  return content;
}

// "; its output:" and the first lines of a compiler's output, indented, for an error message.
std::string output_excerpt(const std::string& output) {
  std::istringstream stream(output);
  std::string line, text;
  int shown = 0, hidden = 0;
  while (std::getline(stream, line)) {
    if (shown == kOutputLinesInErrors) {
      ++hidden;
      continue;
    }
    if (line.size() > 400) line = line.substr(0, 400) + " ...";
    text += "\n  " + line;
    ++shown;
  }
  if (hidden > 0) text += "\n  ... (" + std::to_string(hidden) + " more lines)";
  return shown == 0 ? std::string("; it printed nothing") : "; its output:" + text;
}

CompileError compile_error(const std::string& name, const std::string& detail) {
  return CompileError(name, detail, std::string());
}

// Letters, digits, '_' and '-' of `name` (at most 64), for file names.
std::string file_stem(const std::string& name) {
  std::string stem;
  for (char c : name)
    if (stem.size() < 64 && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) stem += c;
  return stem.empty() ? "module" : stem;
}

// A private directory (0700) removed with everything in it when this goes.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(const std::string& name) {
    std::string base = environment("TMPDIR");
    if (base.empty()) base = "/tmp";
    // Absolute: the compiler runs inside the directory and is given paths into it.
    std::error_code ignored;
    if (base[0] != '/') base = std::filesystem::absolute(base, ignored).string();
    std::string pattern = base + "/kiln-build-XXXXXX";
    if (!::mkdtemp(pattern.data()))
      throw compile_error(name, "cannot create a temporary directory in " + base + ": " + error_text(errno));
    path_ = pattern;
  }
  ~TemporaryDirectory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool is_executable_file(const std::string& path) {
  struct stat status {};
  return ::stat(path.c_str(), &status) == 0 && S_ISREG(status.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The absolute path of `command` (searched on PATH when it has no '/'), or throws.
std::string resolve_compiler(const std::string& command, const std::string& name) {
  const std::string hint = " (set KILN_CXX to a C++ compiler)";
  if (command.find('/') != std::string::npos) {
    std::string path = command;
    std::error_code ignored;
    if (path[0] != '/') path = std::filesystem::absolute(path, ignored).string();
    struct stat status {};
    if (::stat(path.c_str(), &status) != 0)
      throw compile_error(name, "the C++ compiler " + command + " was not found: " + error_text(errno) + hint);
    if (!is_executable_file(path))
      throw compile_error(name, "the C++ compiler " + command + " is not an executable file" + hint);
    return path;
  }
  std::string search = environment("PATH");
  if (search.empty()) search = "/usr/local/bin:/usr/bin:/bin";
  std::istringstream directories(search);
  for (std::string directory; std::getline(directories, directory, ':');) {
    if (directory.empty()) directory = ".";
    std::string path = directory + "/" + command;
    std::error_code ignored;
    if (is_executable_file(path)) return path[0] == '/' ? path : std::filesystem::absolute(path, ignored).string();
  }
  throw compile_error(name, "the C++ compiler '" + command + "' was not found on PATH" + hint);
}

std::string file_identity(const std::string& path) {
  char resolved[PATH_MAX];
  std::string identity = ::realpath(path.c_str(), resolved) ? resolved : path;
  struct stat status {};
  if (::stat(identity.c_str(), &status) == 0)
    identity += " size " + std::to_string(status.st_size) + " mtime " + std::to_string(status.st_mtim.tv_sec) + "." +
                std::to_string(status.st_mtim.tv_nsec);
  return identity;
}

std::string compute_cpu_features() {
  std::string features;
  struct utsname host {};
  if (::uname(&host) == 0) features = std::string("machine: ") + host.machine + "\n";
  // The first processor's identity and ISA extensions; not its clock, ids or microcode, which vary.
  static const std::set<std::string> kKeys = {
      "vendor_id",       "cpu family",       "model",       "model name", "flags", "Features",
      "CPU implementer", "CPU architecture", "CPU variant", "CPU part",   "isa",   "uarch"};
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::string> seen;
  for (std::string line; std::getline(cpuinfo, line);) {
    std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    if (colon == 0) key.clear();
    if (kKeys.count(key) && seen.insert(key).second) features += line + "\n";
  }
#if defined(__x86_64__) || defined(__i386__)
  if (seen.count("flags") == 0) {
    __builtin_cpu_init();
    features += "builtin:";
    if (__builtin_cpu_supports("sse4.2")) features += " sse4.2";
    if (__builtin_cpu_supports("avx")) features += " avx";
    if (__builtin_cpu_supports("avx2")) features += " avx2";
    if (__builtin_cpu_supports("fma")) features += " fma";
    if (__builtin_cpu_supports("bmi2")) features += " bmi2";
    if (__builtin_cpu_supports("avx512f")) features += " avx512f";
    if (__builtin_cpu_supports("avx512bw")) features += " avx512bw";
    if (__builtin_cpu_supports("avx512dq")) features += " avx512dq";
    if (__builtin_cpu_supports("avx512vl")) features += " avx512vl";
    if (__builtin_cpu_supports("avx512cd")) features += " avx512cd";
    features += "\n";
  }
#endif
  return features;
}

}  // namespace

double compile_timeout_seconds() {
  std::string text = environment("KILN_COMPILE_TIMEOUT");
  if (text.empty()) return kDefaultTimeoutSeconds;
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (end != text.c_str() && *end == '\0' && std::isfinite(seconds) && seconds > 0) return seconds;
  static std::mutex mutex;
  static std::set<std::string>* warned = new std::set<std::string>;
  std::lock_guard lock(mutex);
  if (warned->insert(text).second)
    runtime::warn("KILN_COMPILE_TIMEOUT=" + text + " is not a positive number of seconds; using " +
                  std::to_string(int(kDefaultTimeoutSeconds)));
  return kDefaultTimeoutSeconds;
}

CommandResult run_command(const std::string& program, const std::vector<std::string>& arguments,
                          const std::string& working_directory, double timeout_seconds) {
  CommandResult result;
  const std::string output_path = working_directory + "/output.log";
  std::vector<char*> argv;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawn_file_actions_addchdir_np(&actions, working_directory.c_str());
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  // A process group of its own, so a timeout kills the compiler's children too; default signal handling.
  sigset_t no_signals, default_signals;
  sigemptyset(&no_signals);
  sigemptyset(&default_signals);
  for (int signal_number : {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGHUP, SIGCHLD})
    sigaddset(&default_signals, signal_number);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setsigmask(&attributes, &no_signals);
  posix_spawnattr_setsigdefault(&attributes, &default_signals);

  const auto start = std::chrono::steady_clock::now();
  pid_t child = -1;
  result.spawn_error = ::posix_spawn(&child, program.c_str(), &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (result.spawn_error != 0) return result;

  // Poll with WNOWAIT: the exited child stays a zombie until reaped below, so its pid (= the process group id)
  // cannot be reused while we may still signal the group.
  // At most ~115 days, so the deadline cannot overflow the clock.
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(std::min(timeout_seconds, 1e7)));
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    siginfo_t info{};
    int waited = ::waitid(P_PID, id_t(child), &info, WEXITED | WNOHANG | WNOWAIT);
    if (waited == 0 && info.si_pid == child) break;
    if (waited != 0 && errno != EINTR) break;  // ECHILD: SIGCHLD is ignored, the child was reaped already
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-child, SIGKILL);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(10));
  }
  int status = 0;
  pid_t reaped;
  do reaped = ::waitpid(child, &status, 0);
  while (reaped < 0 && errno == EINTR);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (reaped == child && !result.timed_out) {
    if (WIFEXITED(status)) result.exit_status = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  } else if (reaped != child && !result.timed_out) {
    result.exit_status = 0;  // reaped elsewhere; the caller checks its output file
  }
  result.output = read_file(output_path, kMaxOutputBytes);
  return result;
}

CompilerIdentity compiler_identity(const std::string& name) {
  CompilerIdentity identity;
  identity.command = environment("KILN_CXX");
  if (identity.command.empty()) identity.command = "c++";
  identity.path = resolve_compiler(identity.command, name);

  static std::mutex mutex;
  static auto* known = new std::map<std::pair<std::string, std::string>, CompilerIdentity>;
  std::lock_guard lock(mutex);  // held while --version runs: other first builds wait for it, once
  auto key = std::make_pair(identity.command, identity.path);
  if (auto found = known->find(key); found != known->end()) return found->second;
  TemporaryDirectory directory(name);
  double timeout = compile_timeout_seconds();
  CommandResult run = run_command(identity.path, {identity.command, "--version"}, directory.path(), timeout);
  if (run.spawn_error != 0)
    throw compile_error(name, "cannot run the C++ compiler " + identity.command + " (" + identity.path +
                                  "): " + error_text(run.spawn_error));
  if (run.timed_out)
    throw compile_error(name, "'" + identity.command + " --version' ran past the time limit of " +
                                  std::to_string(timeout) + " s (KILN_COMPILE_TIMEOUT) and was killed");
  identity.version = run.output.substr(0, run.output.find('\n'));
  if (run.exit_status != 0) identity.version += " [--version exit status " + std::to_string(run.exit_status) + "]";
  identity.canonical_path = file_identity(identity.path);
  known->emplace(key, identity);
  return identity;
}

const std::string& host_cpu_features() {
  static const std::string features = compute_cpu_features();
  return features;
}

Sha256Digest module_key(const std::string& source, const BuildOptions& options, const CompilerIdentity& compiler) {
  Sha256 hasher;
  auto field = [&hasher](std::string_view value) {
    std::uint64_t size = value.size();
    std::uint8_t size_bytes[8];
    for (int i = 0; i < 8; ++i) size_bytes[i] = std::uint8_t(size >> (8 * i));
    hasher.update(size_bytes, sizeof size_bytes);
    hasher.update(value);
  };
  field("kiln cpu module key 1");
  field(source);
  for (const std::vector<std::string>* list : {&options.flags, &options.libraries}) {
    field(std::to_string(list->size()));
    for (const std::string& item : *list) field(item);
  }
  field(compiler.command);
  field(compiler.canonical_path);
  field(compiler.version);
  field(host_cpu_features());
  return hasher.finish();
}

namespace {

// "the C++ compiler c++ (/usr/bin/c++)", as messages name it.
std::string compiler_description(const CompilerIdentity& compiler) {
  std::string who = "the C++ compiler " + compiler.command;
  if (compiler.path != compiler.command) who += " (" + compiler.path + ")";
  return who;
}

void write_file(const std::string& path, const std::string& text, const std::string& name) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  if (!file.flush()) throw compile_error(name, "cannot write the generated source to " + path);
}

// Runs the compiler with `arguments` (after argv[0]) in `directory`; throws the CompileError the
// contract of build_module describes when it cannot run, is killed, runs too long or fails. `what`
// names the step in messages ("" for a whole build). Returns what the compiler printed; logs its time at
// debug level.
std::string run_compiler(const CompilerIdentity& compiler, const std::vector<std::string>& arguments,
                         const std::string& directory, const std::string& name, const std::string& what) {
  std::vector<std::string> command = {compiler.command};
  command.insert(command.end(), arguments.begin(), arguments.end());
  const double timeout = compile_timeout_seconds();
  CommandResult run = run_command(compiler.path, command, directory, timeout);
  std::string who = compiler_description(compiler);
  if (!what.empty()) who += ", " + what + ",";
  if (run.spawn_error != 0) throw compile_error(name, "cannot run " + who + ": " + error_text(run.spawn_error));
  if (run.timed_out)
    throw compile_error(name, who + " ran past the time limit of " + std::to_string(timeout) +
                                  " s (KILN_COMPILE_TIMEOUT) and was killed" + output_excerpt(run.output));
  if (run.signal != 0)
    throw compile_error(name, who + " was killed by signal " + std::to_string(run.signal) + " (" +
                                  strsignal(run.signal) + ")" + output_excerpt(run.output));
  if (run.exit_status != 0)
    throw compile_error(name,
                        who + " exited with status " + std::to_string(run.exit_status) + output_excerpt(run.output));
  if (!what.empty()) runtime::log(LogLevel::debug, name + ": " + what + " took " + std::to_string(run.seconds) + " s");
  return run.output;
}

// Compiles each of `units` to an object file at once, each in a directory of its own (the compiler's output
// goes to <directory>/output.log), and returns the objects' paths. Waits for every compiler before it throws
// the first unit's error.
std::vector<std::string> compile_objects(const CompilerIdentity& compiler, const std::vector<std::string>& units,
                                         const BuildOptions& options, const std::string& directory,
                                         const std::string& stem) {
  const std::size_t count = units.size();
  std::vector<std::string> objects(count);
  std::vector<std::exception_ptr> errors(count);
  std::vector<std::thread> threads;
  for (std::size_t unit = 0; unit < count; ++unit) {
    const std::string unit_directory = directory + "/unit" + std::to_string(unit + 1);
    objects[unit] = unit_directory + "/" + stem + ".o";
    try {
      if (::mkdir(unit_directory.c_str(), 0700) != 0)
        throw compile_error(options.name, "cannot create " + unit_directory + ": " + error_text(errno));
      write_file(unit_directory + "/" + stem + ".cpp", units[unit], options.name);
    } catch (...) {
      errors[unit] = std::current_exception();
      continue;
    }
    auto compile = [&, unit, unit_directory] {
      try {
        std::vector<std::string> arguments = options.flags;
        arguments.insert(arguments.end(), {"-c", "-o", objects[unit], unit_directory + "/" + stem + ".cpp"});
        run_compiler(compiler, arguments, unit_directory, options.name,
                     "compiling translation unit " + std::to_string(unit + 1) + " of " + std::to_string(count));
      } catch (...) {
        errors[unit] = std::current_exception();
      }
    };
    try {
      threads.emplace_back(compile);
    } catch (const std::system_error&) {
      compile();  // no thread to be had: this one compiles the unit
    }
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
  return objects;
}

}  // namespace

std::string compile_shared_object(const CompilerIdentity& compiler, const std::string& source,
                                  const BuildOptions& options) {
  const std::string& name = options.name;
  TemporaryDirectory directory(name);
  const std::string stem = file_stem(name);
  const std::string object_path = directory.path() + "/" + stem + ".so";
  std::vector<std::string> units;
  if (options.split) units = options.split();
  std::vector<std::string> arguments = options.flags;
  if (units.size() > 1) {
    // In parallel, then one link; the same code as compiling `source` whole, sooner where there are cores.
    std::vector<std::string> objects = compile_objects(compiler, units, options, directory.path(), stem);
    arguments.insert(arguments.end(), {"-o", object_path});
    arguments.insert(arguments.end(), objects.begin(), objects.end());
  } else {
    const std::string source_path = directory.path() + "/" + stem + ".cpp";
    write_file(source_path, source, name);
    arguments.insert(arguments.end(), {"-o", object_path, source_path});
  }
  arguments.insert(arguments.end(), options.libraries.begin(), options.libraries.end());
  const std::string output =
      run_compiler(compiler, arguments, directory.path(), name, units.size() > 1 ? "linking" : "");
  const std::string who = compiler_description(compiler);
  struct stat status {};
  if (::stat(object_path.c_str(), &status) != 0 || !S_ISREG(status.st_mode))
    throw compile_error(name, who + " exited with status 0 but wrote no shared object" + output_excerpt(output));
  std::string shared_object = read_file(object_path, std::size_t(status.st_size));
  if (shared_object.size() != std::size_t(status.st_size))
    throw compile_error(name, "cannot read the shared object " + object_path + " written by " + who);
  return shared_object;
}

BuildResult build_module(const std::string& source, const BuildOptions& options) {
  CompilerIdentity compiler = compiler_identity(options.name);
  Sha256Digest key = module_key(source, options, compiler);
  return get_or_build(key, options.name, [&] { return compile_shared_object(compiler, source, options); });
}

}  // namespace kiln::compiler
