// save_npy, load_npy, save_npz, load_npz (include/kiln/tensor_files.h); the
// safetensors functions are in safetensors.cpp.

#include "api/file_access.h"
#include "api/npy.h"
#include "api/tensor_impl.h"
#include "api/zip.h"

#include <kiln/tensor_files.h>

#include <set>
#include <streambuf>

namespace kiln {
namespace {

// The elements of a host tensor as bytes, as the formats store them.
std::span<const unsigned char> element_bytes(const Tensor& host) {
  const runtime::Array& array = host.impl().array;
  return {static_cast<const unsigned char*>(array.raw()), array.bytes()};
}

// Reads an .npz entry from memory through the same istream code as a file.
class MemoryStreamBuffer : public std::streambuf {
 public:
  explicit MemoryStreamBuffer(std::string& bytes) { setg(bytes.data(), bytes.data(), bytes.data() + bytes.size()); }
};

constexpr std::string_view npy_suffix = ".npy";

// NumPy has f16 ('<f2') but no bfloat16.
void check_npy_dtype(const Tensor& tensor, const char* op, Location location) {
  if (tensor.dtype() == DType::bf16)
    throw DTypeError(op,
                     "NumPy has no bfloat16 dtype: save bf16 tensors with save_safetensors, or cast them to f32 "
                     "first",
                     location);
}

}  // namespace

void save_npy(const std::filesystem::path& path, const Tensor& tensor, Location location) {
  const Tensor host = detail::host_tensor(tensor, "save_npy", location);
  check_npy_dtype(host, "save_npy", location);
  const detail::FileOperation operation("save_npy", path, location);
  detail::OutputFile file(path, operation);
  file.write(detail::npy_header(host.dtype(), host.shape()));
  const std::span<const unsigned char> bytes = element_bytes(host);
  file.write(bytes.data(), bytes.size());
  file.finish();
}

Tensor load_npy(const std::filesystem::path& path, Device device, Location location) {
  detail::check_load_device(device, "load_npy", location);
  const detail::FileOperation operation("load_npy", path, location);
  detail::InputFile file = detail::open_input(path, operation);
  return detail::place_on(detail::read_npy(file.stream, file.size, operation), device, location);
}

void save_npz(const std::filesystem::path& path, const NamedTensors& tensors, Location location) {
  detail::check_tensor_names(tensors, "save_npz", location);
  std::vector<Tensor> hosts;
  std::vector<std::string> headers;
  for (const auto& [name, tensor] : tensors) {
    hosts.push_back(detail::host_tensor(tensor, "save_npz", location));
    check_npy_dtype(hosts.back(), "save_npz", location);
    headers.push_back(detail::npy_header(hosts.back().dtype(), hosts.back().shape()));
  }
  std::vector<detail::ZipEntry> entries;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string& header = headers[i];
    entries.push_back(
        {tensors[i].first + std::string(npy_suffix),
         {{reinterpret_cast<const unsigned char*>(header.data()), header.size()}, element_bytes(hosts[i])}});
  }
  const detail::FileOperation operation("save_npz", path, location);
  detail::OutputFile file(path, operation);
  detail::write_zip(file, entries, operation);
  file.finish();
}

NamedTensors load_npz(const std::filesystem::path& path, Device device, Location location) {
  detail::check_load_device(device, "load_npz", location);
  const detail::FileOperation operation("load_npz", path, location);
  detail::InputFile file = detail::open_input(path, operation);
  detail::ZipReader zip(file, operation);
  NamedTensors tensors;
  std::set<std::string> names;
  for (const detail::ZipEntryInfo& entry : zip.entries()) {
    detail::FileOperation entry_operation = operation;
    entry_operation.file += ", entry '" + entry.name + "'";
    const std::string_view name(entry.name);
    if (name.size() <= npy_suffix.size() || !name.ends_with(npy_suffix))
      entry_operation.fail<IOError>("not a .npy array (an .npz holds one '<name>.npy' per tensor)");
    if (!names.insert(entry.name).second) entry_operation.fail<IOError>("the zip holds two entries of this name");
    std::string bytes = zip.read(entry, entry_operation);
    MemoryStreamBuffer buffer(bytes);
    std::istream stream(&buffer);
    Tensor host = detail::read_npy(stream, bytes.size(), entry_operation);
    tensors.emplace_back(std::string(name.substr(0, name.size() - npy_suffix.size())),
                         detail::place_on(host, device, location));
  }
  return tensors;
}

bool npz_reads_compressed() { return detail::zip_reads_deflated(); }

}  // namespace kiln
