#include "compiler/codegen/cpu/compile_command.h"

#include "compiler/cache/file_access.h"
#include "runtime/log.h"

#include <kiln/error.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
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

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// At most the first `limit` bytes of the file `name` in `directory` (not a symbolic link); empty if it cannot be
// read.
std::string read_beginning(int directory, const std::string& name, std::size_t limit) {
  FileDescriptor file(::openat(directory, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  return file.valid() ? read_file(file.get(), limit).bytes : std::string();
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

// ---- Build directories (docs/cache.md, "Running the compiler") -------------------------------------------

constexpr const char* kBuildDirectoryPrefix = "kiln-build-";
// In every build directory: locked (flock) while its process uses the directory; lists the process groups of
// the compilers run in it, one per line.
constexpr const char* kBuildMarker = ".kiln-build";

// Why other users could rename or replace what this process creates in a directory, as fstat describes it; empty
// if they cannot. A directory others may write to is safe only with the sticky bit (/tmp: root's, mode 1777).
std::string shared_directory_problem(const struct stat& status) {
  if (status.st_uid != ::getuid() && status.st_uid != 0)
    return "it is owned by uid " + std::to_string(status.st_uid) + ", who can rename what is in it";
  if ((status.st_mode & (S_IWGRP | S_IWOTH)) && !(status.st_mode & S_ISVTX))
    return "it is group- or world-writable without the sticky bit (mode " + mode_text(status.st_mode) +
           "), so other users can rename what is in it";
  return {};
}

void warn_once(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string>* warned = new std::set<std::string>;
  {
    std::lock_guard lock(mutex);
    if (!warned->insert(message).second) return;
  }
  runtime::warn(message);
}

// The entries of the directory open as `directory` (without "." and ".."); empty if it cannot be read.
std::vector<std::string> directory_entries(int directory) {
  std::vector<std::string> names;
  int fd = ::openat(directory, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);  // an offset of its own
  if (fd < 0) return names;
  DIR* stream = ::fdopendir(fd);
  if (!stream) {
    ::close(fd);
    return names;
  }
  while (const dirent* entry = ::readdir(stream))
    if (std::strcmp(entry->d_name, ".") != 0 && std::strcmp(entry->d_name, "..") != 0) names.push_back(entry->d_name);
  ::closedir(stream);
  return names;
}

// Removes everything in the directory open as `directory`, through descriptors (symbolic links are removed,
// never followed).
void remove_contents(int directory) {
  for (const std::string& name : directory_entries(directory)) {
    if (::unlinkat(directory, name.c_str(), 0) == 0 || (errno != EISDIR && errno != EPERM)) continue;
    FileDescriptor subdirectory(::openat(directory, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!subdirectory.valid()) continue;
    remove_contents(subdirectory.get());
    ::unlinkat(directory, name.c_str(), AT_REMOVEDIR);
  }
}

// Removes the empty directory `name` of `base` if it still is the directory `identity` describes.
void remove_directory_if_same(int base, const std::string& name, const struct stat& identity) {
  struct stat status {};
  if (::fstatat(base, name.c_str(), &status, AT_SYMLINK_NOFOLLOW) == 0 && status.st_dev == identity.st_dev &&
      status.st_ino == identity.st_ino)
    ::unlinkat(base, name.c_str(), AT_REMOVEDIR);
}

// Kills what is left of the compilers a dead process ran in its build directory, as fstat describes it: the
// processes of this user in the process groups `groups` (the marker's lines) whose working directory is that
// directory (every compiler runs there), so that a reused process group id never names an unrelated process.
void kill_leftover_compilers(const std::string& groups, const struct stat& directory) {
  std::set<long> group_ids;
  std::istringstream lines(groups);
  for (long group; lines >> group;)
    if (group > 1) group_ids.insert(group);
  if (group_ids.empty()) return;
  FileDescriptor proc(::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!proc.valid()) return;
  for (const std::string& entry : directory_entries(proc.get())) {
    if (entry.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat_file("/proc/" + entry + "/stat");
    std::string line;
    if (!std::getline(stat_file, line)) continue;
    // pid (comm) state ppid pgrp ...: the command may hold spaces and parentheses, the last ')' ends it.
    std::istringstream fields(line.substr(std::min(line.size(), line.rfind(')') + 1)));
    std::string state;
    long parent = 0, group = 0;
    if (!(fields >> state >> parent >> group) || group_ids.count(group) == 0) continue;
    struct stat owner {
    }, working_directory{};
    if (::stat(("/proc/" + entry).c_str(), &owner) != 0 || owner.st_uid != ::getuid() ||
        ::stat(("/proc/" + entry + "/cwd").c_str(), &working_directory) != 0 ||
        working_directory.st_dev != directory.st_dev || working_directory.st_ino != directory.st_ino)
      continue;
    ::kill(pid_t(std::stol(entry)), SIGKILL);
  }
}

// remove_stale_build_directories for the directory open as `base`, named `base_path`.
int remove_stale_build_directories_in(int base, const std::string& base_path) {
  int removed = 0;
  for (const std::string& name : directory_entries(base)) {
    if (name.rfind(kBuildDirectoryPrefix, 0) != 0) continue;
    FileDescriptor directory(::openat(base, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat status {};
    if (!directory.valid() || ::fstat(directory.get(), &status) != 0 || status.st_uid != ::getuid()) continue;
    // Without a marker it is not a build directory (or its process died before it was one): left alone.
    FileDescriptor marker(::openat(directory.get(), kBuildMarker, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!marker.valid() || ::flock(marker.get(), LOCK_EX | LOCK_NB) != 0) continue;  // its process is alive
    const std::string path = base_path + "/" + name;
    kill_leftover_compilers(read_file(marker.get(), 64 * 1024).bytes, status);
    remove_contents(directory.get());
    remove_directory_if_same(base, name, status);
    runtime::log(LogLevel::info, "removed the build directory " + path + " of a process that died during a build");
    ++removed;
  }
  return removed;
}

// Once per process per base directory: its build directories of processes that died during a build.
void remove_stale_build_directories_once(int base, const std::string& base_path) {
  static std::mutex mutex;
  static std::set<std::string>* cleaned = new std::set<std::string>;
  {
    std::lock_guard lock(mutex);
    if (!cleaned->insert(base_path).second) return;
  }
  remove_stale_build_directories_in(base, base_path);
}

struct BuildBase {
  FileDescriptor directory;
  std::string path;
};

// The directory build directories are made in: $TMPDIR (or /tmp) unless other users can rename what is in it
// (shared_directory_problem), else <cache directory>/builds, private to the user (created 0700).
BuildBase open_build_base(const std::string& name) {
  std::string path = environment("TMPDIR");
  if (path.empty()) path = "/tmp";
  std::error_code ignored;
  if (path[0] != '/') path = std::filesystem::absolute(path, ignored).string();  // absolute in messages
  FileDescriptor directory(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory.valid())
    throw compile_error(name, "cannot create a temporary directory in " + path + ": " + error_text(errno));
  struct stat status {};
  std::string problem = ::fstat(directory.get(), &status) != 0 ? "cannot stat it: " + error_text(errno)
                                                               : shared_directory_problem(status);
  if (problem.empty()) return {std::move(directory), path};
  const std::string cache = cache_directory();
  const std::string fallback = cache.empty() ? std::string() : cache + "/builds";
  std::string fallback_problem = "no cache directory is set (KILN_CACHE_DIR, XDG_CACHE_HOME, HOME)";
  if (!fallback.empty()) {
    FileDescriptor private_directory = open_private_directory(fallback, fallback_problem);
    if (private_directory.valid()) {
      warn_once("kiln will not build in TMPDIR " + path + " (" + problem + "); building in " + fallback + " instead");
      return {std::move(private_directory), fallback};
    }
    fallback_problem = fallback + ": " + fallback_problem;
  }
  throw compile_error(name, "TMPDIR " + path + " is not safe to build in (" + problem +
                                "), and there is no private directory to build in instead (" + fallback_problem + ")");
}

// A private directory (0700) for one build, used only through its descriptor: the source is written, the
// compiler run (in it, given names relative to it) and what it wrote read back relative to the descriptor, so
// renaming the directory or anything above it meanwhile changes nothing. Its marker stays locked while this
// process lives (remove_stale_build_directories). Removed with everything in it when this goes.
class BuildDirectory {
 public:
  explicit BuildDirectory(const std::string& name) {
    BuildBase base = open_build_base(name);
    remove_stale_build_directories_once(base.directory.get(), base.path);
    for (int attempt = 0; attempt < 8 && leaf_.empty(); ++attempt) {
      std::string leaf = kBuildDirectoryPrefix + unique_suffix();
      if (::mkdirat(base.directory.get(), leaf.c_str(), 0700) == 0)
        leaf_ = leaf;
      else if (errno != EEXIST)
        break;
    }
    if (leaf_.empty())
      throw compile_error(name, "cannot create a temporary directory in " + base.path + ": " + error_text(errno));
    base_ = std::move(base.directory);
    path_ = base.path + "/" + leaf_;
    directory_.reset(::openat(base_.get(), leaf_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    std::string problem = directory_.valid() ? std::string() : "cannot open it: " + error_text(errno);
    if (problem.empty() && ::fstat(directory_.get(), &identity_) != 0) problem = "cannot stat it: " + error_text(errno);
    if (problem.empty() && (identity_.st_uid != ::getuid() || (identity_.st_mode & 077) != 0)) {
      problem = "it was replaced by another directory (owner uid " + std::to_string(identity_.st_uid) + ", mode " +
                mode_text(identity_.st_mode) + ")";
      directory_.reset();  // not ours: nothing in it is removed
    }
    // The marker is locked before it gets its name, so that no other process sees it unlocked.
    const std::string new_marker = std::string(kBuildMarker) + ".new";
    if (problem.empty())
      marker_.reset(::openat(directory_.get(), new_marker.c_str(),
                             O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (problem.empty() && (!marker_.valid() || ::flock(marker_.get(), LOCK_EX) != 0 ||
                            ::renameat(directory_.get(), new_marker.c_str(), directory_.get(), kBuildMarker) != 0))
      problem = "cannot create " + std::string(kBuildMarker) + " in it: " + error_text(errno);
    if (!problem.empty()) {
      remove();
      throw compile_error(name, "cannot use the temporary directory " + path_ + ": " + problem);
    }
  }
  ~BuildDirectory() { remove(); }
  BuildDirectory(const BuildDirectory&) = delete;
  BuildDirectory& operator=(const BuildDirectory&) = delete;

  int get() const { return directory_.get(); }
  // For messages: the directory may have been moved since.
  const std::string& path() const { return path_; }

  // Notes the process group of a compiler run in it, for remove_stale_build_directories after this process died.
  void record_process_group(pid_t group) const {
    std::string line = std::to_string(group) + "\n";
    if (marker_.valid()) write_all(marker_.get(), line);  // O_APPEND: one write per line, whole
  }

 private:
  void remove() {
    if (directory_.valid()) {
      remove_contents(directory_.get());
      remove_directory_if_same(base_.get(), leaf_, identity_);
    }
    marker_.reset();  // unlocked last: until then no other process takes the directory for a dead one's
  }

  FileDescriptor base_;
  FileDescriptor directory_;
  FileDescriptor marker_;
  std::string leaf_;
  std::string path_;
  struct stat identity_ {};
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

namespace {

// run_command in the directory open as `directory` (which may have been renamed: the child changes into the
// descriptor's directory), with stdout and stderr going to `output_name` there (relative to it). `started` is
// called with the child's process group once it runs.
CommandResult run_in_directory(const std::string& program, const std::vector<std::string>& arguments, int directory,
                               const std::string& output_name, double timeout_seconds,
                               const std::function<void(pid_t)>& started = {}) {
  CommandResult result;
  std::vector<char*> argv;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // In this order: the output file is opened relative to the new working directory.
  posix_spawn_file_actions_addfchdir_np(&actions, directory);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, output_name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
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
  if (started) started(child);

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
  result.output = read_beginning(directory, output_name, kMaxOutputBytes);
  return result;
}

}  // namespace

CommandResult run_command(const std::string& program, const std::vector<std::string>& arguments,
                          const std::string& working_directory, double timeout_seconds) {
  FileDescriptor directory(::open(working_directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory.valid()) {
    CommandResult result;
    result.spawn_error = errno;
    return result;
  }
  return run_in_directory(program, arguments, directory.get(), "output.log", timeout_seconds);
}

int remove_stale_build_directories(const std::string& directory) {
  FileDescriptor base(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  return base.valid() ? remove_stale_build_directories_in(base.get(), directory) : 0;
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
  BuildDirectory directory(name);
  double timeout = compile_timeout_seconds();
  CommandResult run =
      run_in_directory(identity.path, {identity.command, "--version"}, directory.get(), "output.log", timeout);
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

// Writes the new file `file_name` (a name relative to `directory`) holding `text`.
void write_new_file(const BuildDirectory& directory, const std::string& file_name, const std::string& text,
                    const std::string& name) {
  FileDescriptor file(
      ::openat(directory.get(), file_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!file.valid() || !write_all(file.get(), text))
    throw compile_error(
        name, "cannot write the generated source to " + directory.path() + "/" + file_name + ": " + error_text(errno));
}

// Runs the compiler with `arguments` (after argv[0]; names in them are relative to `directory`, where it runs
// and writes its output to `output_name`); throws the CompileError the contract of build_module describes when
// it cannot run, is killed, runs too long or fails. `what` names the step in messages ("" for a whole build).
// Returns what the compiler printed; logs its time at debug level.
std::string run_compiler(const CompilerIdentity& compiler, const std::vector<std::string>& arguments,
                         const BuildDirectory& directory, const std::string& output_name, const std::string& name,
                         const std::string& what) {
  std::vector<std::string> command = {compiler.command};
  command.insert(command.end(), arguments.begin(), arguments.end());
  const double timeout = compile_timeout_seconds();
  CommandResult run = run_in_directory(compiler.path, command, directory.get(), output_name, timeout,
                                       [&directory](pid_t group) { directory.record_process_group(group); });
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

// Compiles each of `units` to an object file at once, each in a subdirectory unit<N> of its own (the compiler's
// output goes to unit<N>/output.log), and returns the objects' names relative to `directory`. Waits for every
// compiler before it throws the first unit's error.
std::vector<std::string> compile_objects(const CompilerIdentity& compiler, const std::vector<std::string>& units,
                                         const BuildOptions& options, const BuildDirectory& directory,
                                         const std::string& stem) {
  const std::size_t count = units.size();
  std::vector<std::string> objects(count);
  std::vector<std::exception_ptr> errors(count);
  std::vector<std::thread> threads;
  for (std::size_t unit = 0; unit < count; ++unit) {
    const std::string unit_directory = "unit" + std::to_string(unit + 1);
    objects[unit] = unit_directory + "/" + stem + ".o";
    try {
      if (::mkdirat(directory.get(), unit_directory.c_str(), 0700) != 0)
        throw compile_error(options.name,
                            "cannot create " + directory.path() + "/" + unit_directory + ": " + error_text(errno));
      write_new_file(directory, unit_directory + "/" + stem + ".cpp", units[unit], options.name);
    } catch (...) {
      errors[unit] = std::current_exception();
      continue;
    }
    auto compile = [&, unit, unit_directory] {
      try {
        std::vector<std::string> arguments = options.flags;
        arguments.insert(arguments.end(), {"-c", "-o", objects[unit], unit_directory + "/" + stem + ".cpp"});
        run_compiler(compiler, arguments, directory, unit_directory + "/output.log", options.name,
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

// The shared object the compiler wrote as `file_name` in `directory`, read through a descriptor whose fstat
// shows a regular file of this user within module_size_limit().
std::string read_shared_object(const BuildDirectory& directory, const std::string& file_name,
                               const std::string& compiler_output, const std::string& who, const std::string& name) {
  const std::string path = directory.path() + "/" + file_name;
  FileDescriptor file(::openat(directory.get(), file_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat status {};
  if (!file.valid() && errno != ENOENT)
    throw compile_error(name,
                        "cannot open the shared object " + path + " written by " + who + ": " + error_text(errno));
  if (!file.valid() || ::fstat(file.get(), &status) != 0 || !S_ISREG(status.st_mode))
    throw compile_error(name,
                        who + " exited with status 0 but wrote no shared object" + output_excerpt(compiler_output));
  if (status.st_uid != ::getuid())
    throw compile_error(name, "the shared object " + path + " is owned by uid " + std::to_string(status.st_uid) +
                                  ", not by the current user: it is not what " + who + " wrote");
  const std::uint64_t limit = module_size_limit();
  auto too_large = [&](const std::string& size) {
    return compile_error(name, who + " wrote a shared object of " + size + ", over the limit of " +
                                   std::to_string(limit) + " bytes for a module");
  };
  if (std::uint64_t(status.st_size) > limit) throw too_large(std::to_string(status.st_size) + " bytes");
  FileContent content = read_file(file.get(), limit);
  if (content.error != 0)
    throw compile_error(
        name, "cannot read the shared object " + path + " written by " + who + ": " + error_text(content.error));
  if (!content.complete) throw too_large("more than " + std::to_string(limit) + " bytes");
  return std::move(content.bytes);
}

}  // namespace

std::string compile_shared_object(const CompilerIdentity& compiler, const std::string& source,
                                  const BuildOptions& options) {
  const std::string& name = options.name;
  BuildDirectory directory(name);
  const std::string stem = file_stem(name);
  const std::string object_name = stem + ".so";
  std::vector<std::string> units;
  if (options.split) units = options.split();
  std::vector<std::string> arguments = options.flags;
  if (units.size() > 1) {
    // In parallel, then one link; the same code as compiling `source` whole, sooner where there are cores.
    std::vector<std::string> objects = compile_objects(compiler, units, options, directory, stem);
    arguments.insert(arguments.end(), {"-o", object_name});
    arguments.insert(arguments.end(), objects.begin(), objects.end());
  } else {
    write_new_file(directory, stem + ".cpp", source, name);
    arguments.insert(arguments.end(), {"-o", object_name, stem + ".cpp"});
  }
  arguments.insert(arguments.end(), options.libraries.begin(), options.libraries.end());
  const std::string output =
      run_compiler(compiler, arguments, directory, "output.log", name, units.size() > 1 ? "linking" : "");
  return read_shared_object(directory, object_name, output, compiler_description(compiler), name);
}

BuildResult build_module(const std::string& source, const BuildOptions& options) {
  CompilerIdentity compiler = compiler_identity(options.name);
  Sha256Digest key = module_key(source, options, compiler);
  return get_or_build(key, options.name, [&] { return compile_shared_object(compiler, source, options); });
}

}  // namespace kiln::compiler
