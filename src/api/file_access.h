#pragma once
// What the tensor file formats (npy, npz, safetensors) share: errors that name
// the function and the file, binary input and output files that report
// failures as kiln::IOError, and moving tensors between the host and devices.

#include <kiln/error.h>
#include <kiln/tensor.h>
#include <kiln/tensor_files.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace kiln::detail {

// The formats store little-endian numbers and kiln writes its buffers as they
// are in memory; every machine kiln runs on (x86-64, NVIDIA GPUs' hosts) is
// little-endian.
static_assert(std::endian::native == std::endian::little, "kiln's tensor files assume a little-endian host");

// Who reads or writes which file, for errors such as
//   kiln::IOError: load_npy: 'weights.npy': truncated: ... (at train.cpp:12)
struct FileOperation {
  const char* op;     // "load_npy"
  std::string file;   // as messages show it: "'weights.npy'", or "'model.npz', entry 'w.npy'"
  Location location;  // the user's call

  FileOperation(const char* op, const std::filesystem::path& path, Location location)
      : op(op), file("'" + path.string() + "'"), location(location) {}

  // Throws E (a kiln::Error class) whose detail is "<file>: <what>".
  template <class E>
  [[noreturn]] void fail(const std::string& what) const {
    throw E(op, file + ": " + what, location);
  }
};

// A file opened for binary reading, with its size.
struct InputFile {
  std::ifstream stream;
  std::uint64_t size = 0;
};
// Opens `path`; an IOError when it is missing, a directory or unreadable.
InputFile open_input(const std::filesystem::path& path, const FileOperation& operation);
// Reads `bytes` bytes at the stream's position into `destination`; an IOError
// saying what was being read when the file ends early or reading fails.
void read_exactly(std::istream& stream, void* destination, std::uint64_t bytes, const FileOperation& operation,
                  const char* what);

// A file being written. If it is destroyed before finish() (an error, an
// exception) it removes what it wrote, so a failed save leaves no partial file.
class OutputFile {
 public:
  OutputFile(const std::filesystem::path& path, const FileOperation& operation);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  void write(const void* data, std::uint64_t bytes);
  void write(const std::string& text) { write(text.data(), text.size()); }
  // Flushes and closes the file; an IOError when the data did not reach it.
  void finish();

 private:
  std::filesystem::path path_;
  const FileOperation& operation_;
  std::ofstream stream_;
  bool finished_ = false;
};

// `tensor` as a concrete tensor on the host, to save: a ValueError naming
// `op` for a traced or undefined tensor, a copy for a CUDA tensor.
Tensor host_tensor(const Tensor& tensor, const char* op, const Location& location);
// Throws a DeviceError naming `op` unless tensors can be placed on `device`;
// called before a load reads anything.
void check_load_device(Device device, const char* op, const Location& location);
// `host` (a CPU tensor) on `device`.
Tensor place_on(const Tensor& host, Device device, const Location& location);

// kiln stores a bool as the byte 0 or 1; a file's bool bytes other than 0
// mean true, and are made 1.
void normalize_booleans(unsigned char* bytes, std::uint64_t count);

// Checks that the names can name the tensors of one file: a ValueError naming
// `op` for an empty name or a repeated one.
void check_tensor_names(const NamedTensors& tensors, const char* op, const Location& location);

}  // namespace kiln::detail
