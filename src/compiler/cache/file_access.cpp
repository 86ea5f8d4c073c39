#include "compiler/cache/file_access.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <random>
#include <system_error>

namespace kiln::compiler {

void FileDescriptor::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string error_text(int error) { return std::error_code(error, std::generic_category()).message(); }

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mode & 07777));
  return text;
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return false;
    data.remove_prefix(std::size_t(written));
  }
  return true;
}

FileContent read_file(int fd, std::uint64_t limit) {
  FileContent content;
  struct stat status {};
  std::uint64_t expected = ::fstat(fd, &status) == 0 && status.st_size > 0 ? std::uint64_t(status.st_size) : 0;
  // The size is a hint (the file may change while it is read): the loop stops at its end or past the limit.
  std::string& bytes = content.bytes;
  bytes.resize(std::size_t(std::min(expected, limit) + 1));
  std::size_t done = 0;
  for (;;) {
    if (done == bytes.size()) {
      if (done > limit) break;
      bytes.resize(std::size_t(std::min<std::uint64_t>(2 * bytes.size(), limit + 1)));
    }
    ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done, off_t(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      content.error = errno;
      bytes.clear();
      return content;
    }
    if (got == 0) break;
    done += std::size_t(got);
  }
  content.complete = done <= limit;
  bytes.resize(std::min<std::size_t>(done, std::size_t(limit)));
  return content;
}

std::string private_directory_problem(const struct stat& status) {
  if (status.st_uid != ::getuid())
    return "it is owned by uid " + std::to_string(status.st_uid) + ", not by the current user";
  if (status.st_mode & (S_IWGRP | S_IWOTH))
    return "it is group- or world-writable (mode " + mode_text(status.st_mode) + ")";
  return {};
}

namespace {

// mkdir -p, every missing component with mode 0700. Returns 0 or an errno value.
int make_directories(const std::string& path) {
  for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && prefix.back() != '/' && ::mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) return errno;
    if (slash == std::string::npos) return 0;
  }
}

}  // namespace

FileDescriptor open_private_directory(const std::string& path, std::string& problem) {
  FileDescriptor directory(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory.valid() && errno == ENOENT) {
    if (int error = make_directories(path)) {
      problem = "cannot create it: " + error_text(error);
      return FileDescriptor();
    }
    directory.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  if (!directory.valid()) {
    problem = "cannot open it: " + error_text(errno);
    return directory;
  }
  struct stat status {};
  if (::fstat(directory.get(), &status) != 0)
    problem = "cannot stat it: " + error_text(errno);
  else
    problem = private_directory_problem(status);
  return problem.empty() ? std::move(directory) : FileDescriptor();
}

std::string unique_suffix() {
  static std::atomic<std::uint64_t> counter{0};
  static const std::uint64_t seed = std::random_device{}();
  char text[64];
  std::snprintf(
      text, sizeof text, "%d.%llx.%llx", int(::getpid()), (unsigned long long)counter++,
      (unsigned long long)(seed ^ std::uint64_t(std::chrono::steady_clock::now().time_since_epoch().count())));
  return text;
}

std::string replace_file(int directory, const std::string& name, std::initializer_list<std::string_view> pieces,
                         const ReplaceOptions& options) {
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    temporary = "." + name + ".tmp." + unique_suffix();
    fd = ::openat(directory, temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, options.mode);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) return "cannot create a file in it: " + error_text(errno);
  std::string problem;
  for (std::string_view piece : pieces)
    if (problem.empty() && !write_all(fd, piece)) problem = "cannot write " + temporary + ": " + error_text(errno);
  if (problem.empty() && options.sync && ::fsync(fd) != 0)
    problem = "cannot sync " + temporary + ": " + error_text(errno);
  if (problem.empty() && options.exact_mode && ::fchmod(fd, options.mode) != 0)
    problem = "cannot chmod " + temporary + ": " + error_text(errno);
  if (::close(fd) != 0 && problem.empty()) problem = "cannot write " + temporary + ": " + error_text(errno);
  if (problem.empty() && ::renameat(directory, temporary.c_str(), directory, name.c_str()) != 0)
    problem = "cannot rename " + temporary + " to " + name + ": " + error_text(errno);
  if (!problem.empty()) ::unlinkat(directory, temporary.c_str(), 0);
  return problem;
}

}  // namespace kiln::compiler
