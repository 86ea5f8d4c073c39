#pragma once
// Creating tensors. Inside kiln::function, zeros/ones/full become constant
// nodes of the graph; data from vectors and pointers becomes a captured input.

#include <kiln/tensor.h>

#include <cstdint>
#include <vector>

namespace kiln {

Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
             Location location = Location::current());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu(),
            Location location = Location::current());
Tensor full(const Shape& shape, Scalar value, DType dtype = DType::f32, Device device = Device::cpu(),
            Location location = Location::current());

// Copies `values` into a new tensor of `shape` (default: rank 1). The count
// must match the shape. T is float, double, int32_t, int64_t, bool, or
// bfloat16 / float16 (kiln/dtype.h) for bf16 and f16 tensors of those bits.
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu(),
                   Location location = Location::current());
template <class T>
Tensor from_vector(const std::vector<T>& values, Location location = Location::current());
// Copies shape.numel() elements starting at `data`.
template <class T>
Tensor from_pointer(const T* data, const Shape& shape, Device device = Device::cpu(),
                    Location location = Location::current());

// [start, stop) in steps of `step`, like numpy.arange.
Tensor arange(double start, double stop, double step = 1, DType dtype = DType::f32, Device device = Device::cpu(),
              Location location = Location::current());
Tensor arange(std::int64_t count, DType dtype = DType::i64, Location location = Location::current());

// `count` evenly spaced values from start to stop, both included (np.linspace, tf.linspace, torch.linspace):
// start + i * (stop - start) / (count - 1) computed in double, the last exactly stop, then converted to `dtype`.
// Inside kiln::function, an iota and elementwise ops, as arange.
Tensor linspace(double start, double stop, std::int64_t count, DType dtype = DType::f32, Device device = Device::cpu(),
                Location location = Location::current());
// The rows x columns matrix (columns = rows when -1) with ones on diagonal `diagonal` (above the main one when
// positive, below when negative) and zeros elsewhere (np.eye, tf.eye, torch.eye). Inside kiln::function, a
// comparison of two iotas, which the JIT fuses into what reads it.
Tensor eye(std::int64_t rows, std::int64_t columns = -1, std::int64_t diagonal = 0, DType dtype = DType::f32,
           Device device = Device::cpu(), Location location = Location::current());

}  // namespace kiln
