#pragma once
// Files and directories through descriptors, shared by the module cache, the
// compiler driver (codegen/cpu/compile_command.cpp) and KILN_DUMP_TO's dumper:
// a path is resolved once, to a descriptor, and every later step works
// relative to that descriptor, so a directory renamed or a symbolic link
// planted between two steps changes nothing (docs/cache.md, "Threat model").

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace kiln::compiler {

// An open file descriptor, closed when this goes.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_;
};

// The text of an errno value ("No such file or directory").
std::string error_text(int error);

// "0770": the permission bits of `mode`, as messages show them.
std::string mode_text(mode_t mode);

// Writes all of `data`, through short writes and EINTR; false (errno set) on failure.
bool write_all(int fd, std::string_view data);

struct FileContent {
  std::string bytes;
  bool complete = true;  // false: the file holds more than the limit, and `bytes` is its first `limit` bytes
  int error = 0;         // an errno value when reading failed
};

// Reads the file open as `fd` from its start to its end, or to `limit` bytes
// when it holds more: never more than `limit` + 1 bytes, whatever its size.
FileContent read_file(int fd, std::uint64_t limit);

// Why a directory, as fstat describes it, is not private to the current user
// ("it is owned by uid 65534, not by the current user", "it is group- or
// world-writable (mode 0770)"); empty if only the current user can change
// what is in it.
std::string private_directory_problem(const struct stat& status);

// Opens directory `path` (creating it and its missing parents with mode 0700
// first, when it does not exist) and checks that it is private
// (private_directory_problem). On failure returns an invalid descriptor and
// sets `problem` ("cannot create it: ...", "cannot open it: ..." or the
// check's reason).
FileDescriptor open_private_directory(const std::string& path, std::string& problem);

// "<pid>.<counter>.<random hex>": unique among the names this process makes,
// and unlikely to be another process's.
std::string unique_suffix();

struct ReplaceOptions {
  mode_t mode = 0600;       // of the new file; the umask applies unless exact_mode
  bool exact_mode = false;  // fchmod the new file to `mode`
  bool sync = false;        // fsync it before the rename: after a crash the file is the old one or the new one
};

// Writes `pieces`, in order, into a new file of `directory`
// (".<name>.tmp.<unique suffix>", O_CREAT | O_EXCL | O_NOFOLLOW) and renames it
// over `name`. Whatever `name` was -- a symbolic link or a hard link to another
// file included -- is replaced, never written through, and a reader sees the
// old file or the whole new one. Returns "" on success; else what failed
// ("cannot create a file in it: Permission denied", "cannot write <file>:
// ..."), after removing the temporary file.
std::string replace_file(int directory, const std::string& name, std::initializer_list<std::string_view> pieces,
                         const ReplaceOptions& options);

}  // namespace kiln::compiler
