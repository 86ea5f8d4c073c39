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
// must match the shape.
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

}  // namespace kiln
