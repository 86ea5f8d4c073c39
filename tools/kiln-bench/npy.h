#pragma once
// Writing tensors as NumPy .npy files (format version 1.0), so that other
// systems can load exactly the inputs kiln-bench used and compare outputs.

#include <kiln/kiln.h>

#include <string>

namespace kiln::bench {

// Writes a concrete f32, f64, i32 or i64 tensor to `path` (numpy.load reads
// it). Throws std::runtime_error on an I/O failure or another dtype.
void write_npy(const std::string& path, const Tensor& tensor);

}  // namespace kiln::bench
