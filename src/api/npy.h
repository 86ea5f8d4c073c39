#pragma once
// NumPy's .npy format: a magic string, a version, and a Python dict literal
// ({'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }) saying how to
// read the raw elements that follow. Shared by save_npy/load_npy and the .npz
// functions, whose zip entries are .npy files.

#include "api/file_access.h"

#include <kiln/tensor.h>

#include <cstdint>
#include <istream>
#include <string>

namespace kiln::detail {

// The bytes before the data of a C-order array of `dtype` and `shape`: version
// 1.0 (2.0 should the dict not fit a 16-bit length), the dict padded with
// spaces and ended by a newline so that the data starts at a multiple of 64.
std::string npy_header(DType dtype, const Shape& shape);

// Reads one .npy file of `size` bytes that starts at the stream's position
// into a new CPU tensor, reordering Fortran-order data into row-major order.
// Throws IOError, DTypeError or ShapeError naming `operation`'s function and
// file when the bytes are not a .npy kiln can hold.
Tensor read_npy(std::istream& stream, std::uint64_t size, const FileOperation& operation);

}  // namespace kiln::detail
