#pragma once
// Device memory: reference-counted buffers from a caching allocator, and
// dense arrays (buffer + dtype + shape) that the kernels and executors pass
// around. The api layer's Tensor wraps an Array.

#include <kiln/device.h>
#include <kiln/dtype.h>
#include <kiln/shape.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kiln::runtime {

class Buffer {
 public:
  Buffer(Device device, void* data, std::size_t bytes, std::size_t capacity)
      : device_(device), data_(data), bytes_(bytes), capacity_(capacity) {}
  // A window of `bytes` at `offset` into `parent` (for one arena per call);
  // it keeps the parent alive and frees nothing itself.
  static std::shared_ptr<Buffer> view(std::shared_ptr<Buffer> parent, std::size_t offset, std::size_t bytes);
  // Memory kiln did not allocate (a DLPack producer's, an exported function's caller's): kiln never frees it.
  // `owner`, if not null, keeps it alive, and its deleter releases it when the last array using it is gone.
  static std::shared_ptr<Buffer> external(Device device, void* data, std::size_t bytes, std::shared_ptr<void> owner);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  void* data_;
  std::size_t bytes_;
  std::size_t capacity_;            // what the allocator handed out (>= bytes_)
  std::shared_ptr<Buffer> parent_;  // set for views
  std::shared_ptr<void> owner_;     // external memory's, if it has one
  bool external_ = false;           // not kiln's to free
};

// Allocates `bytes` on `device`, 64-byte aligned (never null, even for 0
// bytes). Throws kiln::DeviceError when memory runs out after the cache of
// freed blocks has been released.
std::shared_ptr<Buffer> allocate(Device device, std::size_t bytes);

// A dense row-major array. Shapes are always static here.
struct Array {
  std::shared_ptr<Buffer> buffer;
  DType dtype = DType::f32;
  Shape shape;

  template <class T>
  const T* data() const {
    return static_cast<const T*>(buffer->data());
  }
  template <class T>
  T* mutable_data() const {
    return static_cast<T*>(buffer->data());
  }
  const void* raw() const { return buffer->data(); }
  void* mutable_raw() const { return buffer->data(); }
  std::size_t bytes() const { return static_cast<std::size_t>(shape.numel()) * size_of(dtype); }
  Device device() const { return buffer->device(); }
};

// A new array with uninitialized contents.
Array allocate_array(DType dtype, const Shape& shape, Device device = Device::cpu());

}  // namespace kiln::runtime
