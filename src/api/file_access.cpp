#include "api/file_access.h"

#include "api/tensor_impl.h"

#if KILN_HAVE_CUDA
#include "runtime/cuda/cuda_context.h"
#endif

#include <cerrno>
#include <cstring>
#include <set>
#include <system_error>

namespace kiln::detail {
namespace {

// The reason the last system call failed ("No such file or directory"), or
// `fallback` when the library did not set errno.
std::string system_reason(int error, const char* fallback) {
  return error != 0 ? std::string(std::strerror(error)) : std::string(fallback);
}

}  // namespace

InputFile open_input(const std::filesystem::path& path, const FileOperation& operation) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) operation.fail<IOError>("cannot open: it is a directory");
  InputFile input;
  errno = 0;
  input.stream.open(path, std::ios::binary);
  if (!input.stream) operation.fail<IOError>("cannot open: " + system_reason(errno, "open failed"));
  input.stream.seekg(0, std::ios::end);
  const std::streamoff end = input.stream.tellg();
  input.stream.seekg(0, std::ios::beg);
  if (end < 0 || !input.stream) operation.fail<IOError>("cannot read its size");
  input.size = static_cast<std::uint64_t>(end);
  return input;
}

void read_exactly(std::istream& stream, void* destination, std::uint64_t bytes, const FileOperation& operation,
                  const char* what) {
  if (bytes == 0) return;
  errno = 0;
  stream.read(static_cast<char*>(destination), static_cast<std::streamsize>(bytes));
  if (static_cast<std::uint64_t>(stream.gcount()) != bytes)
    operation.fail<IOError>("truncated: the file ends inside " + std::string(what));
  if (!stream) operation.fail<IOError>("cannot read " + std::string(what) + ": " + system_reason(errno, "read failed"));
}

OutputFile::OutputFile(const std::filesystem::path& path, const FileOperation& operation)
    : path_(path), operation_(operation) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) operation.fail<IOError>("cannot create: it is a directory");
  errno = 0;
  stream_.open(path, std::ios::binary | std::ios::trunc);
  if (!stream_) operation.fail<IOError>("cannot create: " + system_reason(errno, "open failed"));
}

OutputFile::~OutputFile() {
  if (finished_) return;
  stream_.close();
  std::error_code ignored;  // the error being reported matters more than a failed clean-up
  std::filesystem::remove(path_, ignored);
}

void OutputFile::write(const void* data, std::uint64_t bytes) {
  if (bytes == 0) return;
  errno = 0;
  stream_.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  if (!stream_) operation_.fail<IOError>("cannot write: " + system_reason(errno, "write failed"));
}

void OutputFile::finish() {
  errno = 0;
  stream_.close();
  if (!stream_) operation_.fail<IOError>("cannot write: " + system_reason(errno, "close failed"));
  finished_ = true;
}

Tensor host_tensor(const Tensor& tensor, const char* op, const Location& location) {
  const runtime::Array& array = concrete_array(tensor, op, location);
  if (array.device().is_cpu()) return tensor;
  return tensor.to(Device::cpu(), location);
}

void check_load_device(Device device, const char* op, const Location& location) {
  if (device.is_cpu()) return;
#if KILN_HAVE_CUDA  // kiln-cuda: any device kiln can reach (a missing GPU or bad index throws here)
  runtime::cuda::context(device, op, to_string(location));
#else
  throw DeviceError(op, "cannot load tensors onto " + device.to_string() + ": kiln was built without CUDA support",
                    location);
#endif
}

Tensor place_on(const Tensor& host, Device device, const Location& location) {
  return device.is_cpu() ? host : host.to(device, location);
}

void normalize_booleans(unsigned char* bytes, std::uint64_t count) {
  for (std::uint64_t i = 0; i < count; ++i) bytes[i] = bytes[i] != 0;
}

void check_tensor_names(const NamedTensors& tensors, const char* op, const Location& location) {
  std::set<std::string> seen;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string& name = tensors[i].first;
    if (name.empty()) throw ValueError(op, "tensor " + std::to_string(i) + " has an empty name", location);
    if (!seen.insert(name).second) throw ValueError(op, "the name '" + name + "' is given twice", location);
  }
}

}  // namespace kiln::detail
