// save_safetensors, load_safetensors, load_safetensors_metadata
// (include/kiln/tensor_files.h). A safetensors file is an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype,
// shape and byte range of the data, then the data.

#include "api/file_access.h"
#include "api/json.h"
#include "api/tensor_impl.h"

#include <kiln/tensor_files.h>

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>

namespace kiln {
namespace {

constexpr std::string_view metadata_key = "__metadata__";
constexpr std::uint64_t length_bytes = 8;
// The header is padded with spaces so that the data starts at a multiple of
// 8 bytes, as the safetensors library writes it.
constexpr std::uint64_t header_alignment = 8;

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return "BOOL";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
  }
  return "";
}

// One tensor as the header describes it.
struct TensorEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;  // data_offsets: bytes after the header
};

struct Header {
  std::vector<TensorEntry> tensors;  // in the order of the header
  std::map<std::string, std::string> metadata;
  std::uint64_t data_offset = 0;  // where the data starts in the file
};

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string text = "[";
  for (std::size_t axis = 0; axis < shape.size(); ++axis) text += (axis ? "," : "") + std::to_string(shape[axis]);
  return text + "]";
}

// The entry of tensor `name`, checked against the format: the three fields
// and nothing else, a dtype kiln has, a shape kiln can hold, and offsets
// whose range fits the shape.
TensorEntry read_entry(const std::string& name, const detail::json::Value& value,
                       const detail::FileOperation& operation) {
  using Kind = detail::json::Value::Kind;
  const std::string tensor = "tensor '" + name + "': ";
  if (value.kind != Kind::object)
    operation.fail<IOError>(tensor + "expected an object in the header, found " + detail::json::describe(value.kind));
  const detail::json::Value *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
  for (const auto& [key, field] : value.members) {
    if (key == "dtype")
      dtype = &field;
    else if (key == "shape")
      shape = &field;
    else if (key == "data_offsets")
      offsets = &field;
    else
      operation.fail<IOError>(tensor + "unknown field \"" + key + "\" (expected dtype, shape and data_offsets)");
  }
  if (!dtype || !shape || !offsets)
    operation.fail<IOError>(tensor + "the header lacks its " + (!dtype ? "dtype" : !shape ? "shape" : "data_offsets"));

  TensorEntry entry;
  entry.name = name;
  if (dtype->kind != Kind::string) operation.fail<IOError>(tensor + "dtype is not a string");
  bool known = false;
  for (DType candidate : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64, DType::bf16, DType::f16}) {
    if (dtype->text == dtype_name(candidate)) {
      entry.dtype = candidate;
      known = true;
    }
  }
  if (!known)
    operation.fail<DTypeError>(tensor + "dtype " + dtype->text +
                               " is not one kiln has (kiln reads F32, F64, BF16, F16, I32, I64 and BOOL)");

  std::vector<std::uint64_t> dimensions;
  if (shape->kind != Kind::array) operation.fail<IOError>(tensor + "shape is not an array");
  for (const detail::json::Value& dimension : shape->elements) {
    std::uint64_t size = 0;
    if (!dimension.to_unsigned(&size) || size > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      operation.fail<IOError>(tensor + "shape holds something other than a non-negative integer");
    dimensions.push_back(size);
  }
  if (dimensions.size() > static_cast<std::size_t>(Shape::max_rank))
    operation.fail<ShapeError>(tensor + "shape " + shape_text(dimensions) + " has rank " +
                               std::to_string(dimensions.size()) + "; kiln tensors have at most " +
                               std::to_string(Shape::max_rank) + " dimensions");
  std::vector<std::int64_t> signed_dimensions(dimensions.begin(), dimensions.end());
  entry.shape = Shape(std::span<const std::int64_t>(signed_dimensions));

  if (offsets->kind != Kind::array || offsets->elements.size() != 2 ||
      !offsets->elements[0].to_unsigned(&entry.begin) || !offsets->elements[1].to_unsigned(&entry.end))
    operation.fail<IOError>(tensor + "data_offsets is not a pair of non-negative integers");
  if (entry.end < entry.begin)
    operation.fail<IOError>(tensor + "data_offsets [" + std::to_string(entry.begin) + "," + std::to_string(entry.end) +
                            "] end before they begin");
  std::uint64_t bytes = size_of(entry.dtype);
  for (std::uint64_t dimension : dimensions)
    if (__builtin_mul_overflow(bytes, dimension, &bytes)) bytes = std::numeric_limits<std::uint64_t>::max();
  if (bytes != entry.end - entry.begin)
    operation.fail<IOError>(tensor + "shape " + shape_text(dimensions) + " of " + dtype->text + " needs " +
                            std::to_string(bytes) + " bytes, and its data_offsets [" + std::to_string(entry.begin) +
                            "," + std::to_string(entry.end) + "] hold " + std::to_string(entry.end - entry.begin));
  return entry;
}

// Checks that the tensors' byte ranges lie in the data, overlap nowhere and
// leave no bytes unaccounted for (as the safetensors library requires).
void check_data_layout(const std::vector<TensorEntry>& tensors, std::uint64_t data_bytes,
                       const detail::FileOperation& operation) {
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::pair(tensors[a].begin, tensors[a].end) < std::pair(tensors[b].begin, tensors[b].end);
  });
  for (const TensorEntry& entry : tensors)
    if (entry.end > data_bytes)
      operation.fail<IOError>("truncated: tensor '" + entry.name + "' ends at byte " + std::to_string(entry.end) +
                              " of the data, and the file holds " + std::to_string(data_bytes) +
                              " bytes of data after the header");
  std::uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (std::size_t index : order) {
    const TensorEntry& entry = tensors[index];
    if (entry.begin < covered)
      operation.fail<IOError>("the data of tensors '" + previous->name + "' and '" + entry.name + "' overlap");
    if (entry.begin > covered)
      operation.fail<IOError>("bytes " + std::to_string(covered) + " to " + std::to_string(entry.begin) +
                              " of the data belong to no tensor");
    covered = entry.end;
    previous = &entry;
  }
  if (covered != data_bytes)
    operation.fail<IOError>("the file holds " + std::to_string(data_bytes - covered) +
                            " bytes after the last tensor's data");
}

Header read_header(detail::InputFile& file, const detail::FileOperation& operation) {
  if (file.size < length_bytes)
    operation.fail<IOError>("truncated: the file is " + std::to_string(file.size) +
                            " bytes long, shorter than the 8-byte header length");
  unsigned char length[length_bytes];
  detail::read_exactly(file.stream, length, length_bytes, operation, "the header length");
  std::uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | length[i];
  if (header_bytes > file.size - length_bytes)
    operation.fail<IOError>("the header length " + std::to_string(header_bytes) + " is larger than the " +
                            std::to_string(file.size - length_bytes) +
                            " bytes that follow it (a truncated file, or not a safetensors file)");
  std::string text(header_bytes, '\0');
  detail::read_exactly(file.stream, text.data(), header_bytes, operation, "the header");

  using Kind = detail::json::Value::Kind;
  detail::json::Value root;
  std::string error;
  if (!detail::json::parse(text, &root, &error)) operation.fail<IOError>("the header is not valid JSON: " + error);
  if (root.kind != Kind::object)
    operation.fail<IOError>(std::string("the header is ") + detail::json::describe(root.kind) + ", not an object");

  Header header;
  header.data_offset = length_bytes + header_bytes;
  for (const auto& [name, value] : root.members) {
    if (name != metadata_key) {
      header.tensors.push_back(read_entry(name, value, operation));
      continue;
    }
    if (value.kind == Kind::null) continue;
    if (value.kind != Kind::object) operation.fail<IOError>("__metadata__ is not an object");
    for (const auto& [key, entry] : value.members) {
      if (entry.kind != Kind::string)
        operation.fail<IOError>("__metadata__ \"" + key + "\" is " + detail::json::describe(entry.kind) +
                                ", not a string");
      header.metadata.emplace(key, entry.text);
    }
  }
  check_data_layout(header.tensors, file.size - header.data_offset, operation);
  return header;
}

}  // namespace

void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata, Location location) {
  const char* op = "save_safetensors";
  detail::check_tensor_names(tensors, op, location);
  std::vector<Tensor> hosts;
  for (const auto& [name, tensor] : tensors) {
    if (name == metadata_key) throw ValueError(op, "the name __metadata__ is the format's own", location);
    hosts.push_back(detail::host_tensor(tensor, op, location));
  }

  std::string header = "{";
  if (!metadata.empty()) {
    header += detail::json::quote(metadata_key) + ":{";
    for (const auto& [key, value] : metadata)
      header += (header.back() == '{' ? "" : ",") + detail::json::quote(key) + ":" + detail::json::quote(value);
    header += "}";
  }
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& host = hosts[i];
    std::string shape;
    for (std::int64_t dimension : host.shape().dims()) shape += (shape.empty() ? "" : ",") + std::to_string(dimension);
    const std::uint64_t bytes = host.impl().array.bytes();
    header += (header.back() == '{' ? "" : ",") + detail::json::quote(tensors[i].first) + ":{\"dtype\":\"" +
              dtype_name(host.dtype()) + "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(offset) +
              "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  // Names and metadata are written as given; reading the header back catches
  // any that are not UTF-8, which JSON (and every reader) would refuse.
  detail::json::Value parsed;
  std::string error;
  if (!detail::json::parse(header, &parsed, &error))
    throw ValueError(op, "a tensor name or metadata string is not valid UTF-8 (" + error + " of the header)", location);
  header.append((header_alignment - header.size() % header_alignment) % header_alignment, ' ');

  const detail::FileOperation operation(op, path, location);
  detail::OutputFile file(path, operation);
  unsigned char length[length_bytes];
  for (std::uint64_t i = 0; i < length_bytes; ++i) length[i] = static_cast<unsigned char>(header.size() >> (8 * i));
  file.write(length, length_bytes);
  file.write(header);
  for (const Tensor& host : hosts) file.write(host.impl().array.raw(), host.impl().array.bytes());
  file.finish();
}

NamedTensors load_safetensors(const std::filesystem::path& path, Device device, Location location) {
  detail::check_load_device(device, "load_safetensors", location);
  const detail::FileOperation operation("load_safetensors", path, location);
  detail::InputFile file = detail::open_input(path, operation);
  const Header header = read_header(file, operation);
  NamedTensors tensors;
  for (const TensorEntry& entry : header.tensors) {
    runtime::Array array = runtime::allocate_array(entry.dtype, entry.shape, Device::cpu());
    auto* elements = static_cast<unsigned char*>(array.mutable_raw());
    const std::uint64_t bytes = entry.end - entry.begin;
    file.stream.seekg(static_cast<std::streamoff>(header.data_offset + entry.begin));
    detail::read_exactly(file.stream, elements, bytes, operation, "the data");
    if (entry.dtype == DType::boolean) detail::normalize_booleans(elements, bytes);
    tensors.emplace_back(entry.name, detail::place_on(detail::make_tensor(std::move(array)), device, location));
  }
  return tensors;
}

std::map<std::string, std::string> load_safetensors_metadata(const std::filesystem::path& path, Location location) {
  const detail::FileOperation operation("load_safetensors_metadata", path, location);
  detail::InputFile file = detail::open_input(path, operation);
  return read_header(file, operation).metadata;
}

}  // namespace kiln
