#include "npy.h"

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace kiln::bench {
namespace {

// Little-endian descriptors; x86 and ARM Linux are little-endian.
const char* descriptor(DType dtype) {
  switch (dtype) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    default: throw std::runtime_error("write_npy: unsupported dtype " + std::string(to_string(dtype)));
  }
}

template <class T> void write_elements(std::ofstream& file, const Tensor& tensor) {
  std::vector<T> elements = tensor.to_vector<T>();
  file.write(reinterpret_cast<const char*>(elements.data()), static_cast<std::streamsize>(elements.size() * sizeof(T)));
}

}  // namespace

void write_npy(const std::string& path, const Tensor& tensor) {
  // The header is a Python dict literal, padded with spaces and ended by a
  // newline so that the data starts at a multiple of 64 bytes.
  std::string shape;  // "()", "(4,)", "(2, 3)"
  for (int axis = 0; axis < tensor.rank(); ++axis)
    shape += (axis ? ", " : "") + std::to_string(tensor.shape()[axis]);
  shape = "(" + shape + (tensor.rank() == 1 ? ",)" : ")");
  std::string header = "{'descr': '" + std::string(descriptor(tensor.dtype())) +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  const std::size_t preamble = 10;  // magic (6) + version (2) + header length (2)
  header.append(63 - (preamble + header.size()) % 64, ' ');
  header += '\n';

  std::ofstream file(path, std::ios::binary);
  if (!file) throw std::runtime_error("write_npy: cannot create " + path);
  file.write("\x93NUMPY\x01\x00", 8);
  const auto length = static_cast<std::uint16_t>(header.size());
  const char length_bytes[2] = {static_cast<char>(length & 0xff), static_cast<char>(length >> 8)};
  file.write(length_bytes, 2);
  file << header;
  switch (tensor.dtype()) {
    case DType::f32: write_elements<float>(file, tensor); break;
    case DType::f64: write_elements<double>(file, tensor); break;
    case DType::i32: write_elements<std::int32_t>(file, tensor); break;
    default: write_elements<std::int64_t>(file, tensor); break;
  }
  if (!file) throw std::runtime_error("write_npy: cannot write " + path);
}

}  // namespace kiln::bench
