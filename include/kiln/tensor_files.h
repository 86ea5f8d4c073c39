#pragma once
// Saving and loading tensors: NumPy's .npy and .npz and Hugging Face's
// safetensors, the formats PyTorch, JAX and NumPy exchange weights in.
//
// Every function copies: saving a CUDA tensor copies it to the host first, and
// loading gives new tensors on the CPU, or on `device`. Elements are written in
// row-major order, little-endian, in the tensor's own dtype (bool, i32, i64,
// f32, f64); a view such as transpose(x) is saved as its logical values.
//
// Errors name the function, the file and what is wrong, with the caller's line:
//   kiln::IOError     a file that cannot be opened, read or written, or whose
//                     bytes are not a valid file of its format (wrong magic,
//                     truncated, malformed header, data that disagrees with it)
//   kiln::DTypeError  an element type kiln has no dtype for (float16, uint8,
//                     big-endian data, ...)
//   kiln::ShapeError  a shape of rank above 8
//   kiln::ValueError  a traced or undefined tensor to save (inside
//                     kiln::function values do not exist yet), a name that is
//                     empty or repeated, a file too large for its format
//   kiln::DeviceError a `device` this process cannot use
// A save that fails leaves no partly written file behind.

#include <kiln/tensor.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

// Tensors with names, in order: what an .npz or safetensors file holds.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// ---- NumPy .npy: one tensor ---------------------------------------------------
// Writes format version 1.0 (what numpy.save writes), C order, the header
// padded so that the data starts at a multiple of 64 bytes.
void save_npy(const std::filesystem::path& path, const Tensor& tensor, Location location = Location::current());
// Reads format versions 1.0, 2.0 and 3.0 with descr '<f4', '<f8', '<i4', '<i8'
// or '|b1'. A file in Fortran order (fortran_order: True) is read correctly:
// its elements are reordered into kiln's row-major layout.
Tensor load_npy(const std::filesystem::path& path, Device device = Device::cpu(),
                Location location = Location::current());

// ---- NumPy .npz: a zip of .npy files, one per name ----------------------------
// Writes an uncompressed zip (what numpy.savez writes) holding "<name>.npy" for
// each tensor, in order. Without Zip64, so no entry or offset may reach 4 GiB.
void save_npz(const std::filesystem::path& path, const NamedTensors& tensors, Location location = Location::current());
// The tensors of an .npz in the order of the zip's directory, named without
// the ".npy" suffix (numpy.load(path)[name]). Stored entries are always read;
// deflated ones (numpy.savez_compressed) when kiln was built with zlib, which
// npz_reads_compressed() tells, and are refused with an IOError otherwise.
NamedTensors load_npz(const std::filesystem::path& path, Device device = Device::cpu(),
                      Location location = Location::current());
// True when load_npz can read deflated entries (kiln was built with zlib).
bool npz_reads_compressed();

// ---- safetensors ----------------------------------------------------------------
// Writes the tensors in order, with dtypes F32, F64, I32, I64 and BOOL, and
// `metadata` as the header's "__metadata__" (left out when empty).
void save_safetensors(const std::filesystem::path& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {}, Location location = Location::current());
// The tensors of a safetensors file in the order its header lists them. The
// header is checked strictly: well-formed JSON, known fields only, offsets
// that cover the data exactly once and agree with each tensor's shape.
NamedTensors load_safetensors(const std::filesystem::path& path, Device device = Device::cpu(),
                              Location location = Location::current());
// The header's "__metadata__" (empty when it has none); checks the header as
// load_safetensors does, without reading the data.
std::map<std::string, std::string> load_safetensors_metadata(const std::filesystem::path& path,
                                                             Location location = Location::current());

}  // namespace kiln
