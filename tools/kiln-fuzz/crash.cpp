#include "crash.h"

#include "differential_check.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace kiln::fuzz {
namespace {

thread_local std::string context;

// The command the handler execs, prepared in advance (exec is
// async-signal-safe; building strings is not).
std::vector<std::string> command_strings;
std::vector<char*> command;

std::string self_path() {
  char path[4096];
  ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0) return "kiln-fuzz";
  path[length] = '\0';
  return path;
}

const std::string& self() {
  static const std::string path = self_path();
  return path;
}

void write_text(const char* text, std::size_t length) {
  while (length > 0) {
    ssize_t written = ::write(STDERR_FILENO, text, length);
    if (written <= 0) return;
    text += written;
    length -= static_cast<std::size_t>(written);
  }
}

void on_crash(int signal) {
  const char* stage = current_stage();
  static const char header[] = "\nkiln-fuzz: crashed (signal ";
  static const char middle[] = ") in stage '";
  static const char trailer[] = "' while running this graph:\n";
  char number[4] = {static_cast<char>('0' + signal / 10 % 10), static_cast<char>('0' + signal % 10), 0, 0};
  write_text(header, sizeof header - 1);
  write_text(number, 2);
  write_text(middle, sizeof middle - 1);
  write_text(stage, std::strlen(stage));
  write_text(trailer, sizeof trailer - 1);
  write_text(context.data(), context.size());
  if (!command.empty()) {
    static const char again[] = "\nkiln-fuzz: looking for the crashing graph in child processes\n";
    write_text(again, sizeof again - 1);
    ::execv(command[0], command.data());
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

void set_crash_context(std::string text) { context = std::move(text); }
const std::string& crash_context() { return context; }

void set_crash_command(const std::vector<std::string>& arguments) {
  command.clear();
  command_strings.clear();
  if (arguments.empty()) return;
  command_strings.push_back(self());
  command_strings.insert(command_strings.end(), arguments.begin(), arguments.end());
  for (std::string& argument : command_strings) command.push_back(argument.data());
  command.push_back(nullptr);
}

void install_crash_handlers() {
  self();  // resolved now, not in the handler
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) std::signal(signal, on_crash);
}

bool child_crashes(const std::vector<std::string>& arguments, int timeout_seconds) {
  std::vector<std::string> strings = {self()};
  strings.insert(strings.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& argument : strings) argv.push_back(argument.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t child = 0;
  int error = posix_spawn(&child, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) return false;
  int status = 0;
  for (int waited = 0;; ++waited) {
    pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (waited >= timeout_seconds * 10) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return true;
    }
    ::usleep(100000);
  }
  return WIFSIGNALED(status);
}

bool crashes_in_child(const FuzzCase& fuzz_case, const std::vector<std::string>& check_arguments) {
  const char* directory = std::getenv("TMPDIR");
  std::string path = std::string(directory && *directory ? directory : "/tmp") + "/kiln-fuzz-XXXXXX";
  int file = ::mkstemp(path.data());
  if (file < 0) return false;
  std::string text = describe(fuzz_case);
  bool written = ::write(file, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(file);
  std::vector<std::string> arguments = {"--replay", path, "--no-shrink"};
  arguments.insert(arguments.end(), check_arguments.begin(), check_arguments.end());
  bool crashed = written && child_crashes(arguments);
  ::unlink(path.c_str());
  return crashed;
}

}  // namespace kiln::fuzz
