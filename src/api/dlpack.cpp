// kiln::to_dlpack and kiln::from_dlpack (include/kiln/dlpack.h): DLPack 1.0 managed tensors sharing a tensor's
// buffer, and tensors reading a producer's memory through an external runtime::Buffer; the same for DLPack 0.x's
// unversioned struct, which older consumers take.

#include "api/file_access.h"
#include "api/tensor_impl.h"
#if KILN_HAVE_CUDA
#include "runtime/cuda/cuda_context.h"
#endif

#include <kiln/dlpack.h>
#include <kiln/error.h>

#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln {
namespace {

// What kiln's kernels expect of an array's start (runtime::allocate's alignment).
constexpr std::uintptr_t kernel_alignment = 64;

DLDataType dlpack_dtype(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return {kDLBool, 8, 1};
    case DType::i32:
      return {kDLInt, 32, 1};
    case DType::i64:
      return {kDLInt, 64, 1};
    case DType::f32:
      return {kDLFloat, 32, 1};
    case DType::f64:
      return {kDLFloat, 64, 1};
    case DType::bf16:
      return {kDLBfloat, 16, 1};
    case DType::f16:
      return {kDLFloat, 16, 1};
  }
  return {kDLOpaqueHandle, 0, 0};
}

// The dtype dlpack_dtype maps to `type`, if any.
std::optional<DType> kiln_dtype(DLDataType type) {
  if (type.lanes != 1) return std::nullopt;
  for (int index = 0; index < dtype_count; ++index) {
    const auto dtype = static_cast<DType>(index);
    const DLDataType known = dlpack_dtype(dtype);
    if (known.code == type.code && known.bits == type.bits) return dtype;
  }
  return std::nullopt;
}

std::string describe(DLDataType type) {
  static const char* const codes[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  const std::string code = type.code < 7 ? codes[type.code] : "code " + std::to_string(type.code);
  return code + std::to_string(type.bits) + (type.lanes == 1 ? "" : " x" + std::to_string(type.lanes) + " lanes");
}

// The exported tensor's manager: it holds the array (so its buffer), and the shape and strides the DLTensor
// points at. `Managed` is DLPack 1.0's versioned struct or 0.x's DLManagedTensor.
template <class Managed>
struct Export {
  Managed managed{};
  runtime::Array array;
  std::vector<std::int64_t> shape, strides;
};

template <class Managed>
void delete_export(Managed* managed) {
  if (managed) delete static_cast<Export<Managed>*>(managed->manager_ctx);
}

// `array` as a managed tensor sharing its buffer (the caller sets what the versioned struct adds).
template <class Managed>
Managed* export_array(runtime::Array array) {
  auto exported = std::make_unique<Export<Managed>>();
  exported->array = std::move(array);
  const runtime::Array& kept = exported->array;
  const std::span<const std::int64_t> dims = kept.shape.dims();
  exported->shape.assign(dims.begin(), dims.end());
  exported->strides.assign(exported->shape.size(), 1);
  for (std::size_t axis = exported->shape.size(); axis-- > 1;)
    exported->strides[axis - 1] = exported->strides[axis] * exported->shape[axis];
  Managed& managed = exported->managed;
  managed.manager_ctx = exported.get();
  managed.deleter = delete_export<Managed>;
  const Device device = kept.device();
  managed.dl_tensor.data = kept.mutable_raw();
  managed.dl_tensor.device = {device.is_cpu() ? kDLCPU : kDLCUDA, static_cast<std::int32_t>(device.index)};
  managed.dl_tensor.ndim = static_cast<std::int32_t>(exported->shape.size());
  managed.dl_tensor.dtype = dlpack_dtype(kept.dtype);
  managed.dl_tensor.shape = exported->shape.data();
  managed.dl_tensor.strides = exported->strides.data();
  managed.dl_tensor.byte_offset = 0;
  return &exported.release()->managed;
}

// Calls a managed tensor's deleter once: what owns the producer's memory inside an external buffer.
template <class Managed>
class Imported {
 public:
  explicit Imported(Managed* managed) : managed_(managed) {}
  Imported(const Imported&) = delete;  // one owner, one call of the deleter
  Imported& operator=(const Imported&) = delete;
  ~Imported() {
    if (managed_->deleter) managed_->deleter(managed_);
  }

 private:
  Managed* managed_;
};

// Whether `strides` (in elements; null: dense) describe the row-major layout of `shape`.
bool row_major(const std::vector<std::int64_t>& shape, const std::int64_t* strides) {
  if (!strides) return true;
  std::int64_t expected = 1, elements = 1;
  for (std::int64_t extent : shape) elements *= extent;
  if (elements == 0) return true;
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    if (shape[axis] != 1 && strides[axis] != expected) return false;
    expected *= shape[axis];
  }
  return true;
}

// Copies the elements of a strided CPU array into a dense one, in row-major order.
void copy_strided(const char* source, const std::vector<std::int64_t>& shape, const std::int64_t* strides,
                  std::size_t element_bytes, char* target) {
  const std::size_t rank = shape.size();
  std::int64_t elements = 1;
  for (std::int64_t extent : shape) elements *= extent;
  std::vector<std::int64_t> index(rank, 0);
  for (std::int64_t n = 0; n < elements; ++n) {
    std::int64_t offset = 0;
    for (std::size_t axis = 0; axis < rank; ++axis) offset += index[axis] * strides[axis];
    std::memcpy(target + static_cast<std::size_t>(n) * element_bytes,
                source + offset * static_cast<std::int64_t>(element_bytes), element_bytes);
    for (std::size_t axis = rank; axis-- > 0;) {
      if (++index[axis] < shape[axis]) break;
      index[axis] = 0;
    }
  }
}

// The managed tensor's elements as a kiln tensor, taking ownership of `managed` when it returns (a versioned
// struct's version checked by the caller).
template <class Managed>
Tensor import_managed(Managed* managed, Location location) {
  constexpr const char* op = "from_dlpack";
  const DLTensor& source = managed->dl_tensor;
  const std::optional<DType> dtype = kiln_dtype(source.dtype);
  if (!dtype)
    throw DTypeError(
        op,
        "kiln has no dtype for " + describe(source.dtype) + " elements (it has bool, i32, i64, f16, bf16, f32, f64)",
        location);
  if (source.ndim < 0 || source.ndim > Shape::max_rank)
    throw ShapeError(op,
                     "rank " + std::to_string(source.ndim) + " is not in [0, " + std::to_string(Shape::max_rank) + "]",
                     location);
  std::vector<std::int64_t> shape(static_cast<std::size_t>(source.ndim));
  for (std::size_t axis = 0; axis < shape.size(); ++axis) {
    shape[axis] = source.shape[axis];
    if (shape[axis] < 0)
      throw ShapeError(op, "axis " + std::to_string(axis) + " has size " + std::to_string(shape[axis]), location);
  }
  Device device = Device::cpu();
  if (source.device.device_type == kDLCUDA) {
    device = Device::cuda(source.device.device_id);
  } else if (source.device.device_type != kDLCPU && source.device.device_type != kDLCUDAHost) {
    throw DeviceError(
        op, "DLPack device type " + std::to_string(source.device.device_type) + " is neither the CPU nor a CUDA GPU",
        location);
  }
  detail::check_load_device(device, op, location);
  const bool dense = row_major(shape, source.strides);
  if (!dense && device.is_cuda())
    throw ValueError(op, "the CUDA data is not dense and row-major; make it contiguous before exporting it", location);

  const Shape kiln_shape{std::span<const std::int64_t>(shape)};
  char* start = static_cast<char*>(source.data) + source.byte_offset;
  const std::size_t bytes = static_cast<std::size_t>(kiln_shape.numel()) * size_of(*dtype);
  const bool aligned = reinterpret_cast<std::uintptr_t>(start) % kernel_alignment == 0;
  // An empty tensor needs no memory of the producer's (whose data pointer may be null).
  if (dense && (aligned || device.is_cuda()) && bytes > 0) {
    // The producer's memory where it lies: released (the deleter called) with the last array using it. CUDA
    // memory from cudaMalloc is aligned far beyond a vector; kiln's CUDA kernels check what they vectorize.
    auto owner = std::make_shared<Imported<Managed>>(managed);
    return detail::make_tensor(
        runtime::Array{runtime::Buffer::external(device, start, bytes, std::move(owner)), *dtype, kiln_shape});
  }
  // Strided or misaligned host data: copied into kiln's own buffer, the producer's released at once.
  runtime::Array array = runtime::allocate_array(*dtype, kiln_shape, device);
  if (bytes == 0) {
    // nothing to copy
  } else if (dense)
    std::memcpy(array.mutable_raw(), start, bytes);
  else
    copy_strided(start, shape, source.strides, size_of(*dtype), static_cast<char*>(array.mutable_raw()));
  const Imported<Managed> release(managed);
  return detail::make_tensor(std::move(array));
}

}  // namespace

DLManagedTensorVersioned* to_dlpack(const Tensor& tensor, Location location) {
  DLManagedTensorVersioned* managed =
      export_array<DLManagedTensorVersioned>(detail::concrete_array(tensor, "to_dlpack", location));
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->flags = DLPACK_FLAG_BITMASK_READ_ONLY;  // kiln tensors are immutable
  return managed;
}

DLManagedTensor* to_dlpack_unversioned(const Tensor& tensor, Location location) {
  const runtime::Array& array = detail::concrete_array(tensor, "to_dlpack_unversioned", location);
  // The old struct cannot say read-only, and its consumers (NumPy, PyTorch) hand out writable arrays: a copy
  // keeps kiln's tensor immutable.
  runtime::Array copy;
#if KILN_HAVE_CUDA
  if (array.device().is_cuda())
    copy = runtime::cuda::copy_to(array, array.device(), "to_dlpack_unversioned", kiln::to_string(location));
#endif
  if (!copy.buffer) {
    copy = runtime::allocate_array(array.dtype, array.shape, array.device());
    if (array.bytes() > 0) std::memcpy(copy.mutable_raw(), array.raw(), array.bytes());
  }
  return export_array<DLManagedTensor>(std::move(copy));
}

Tensor from_dlpack(DLManagedTensorVersioned* managed, Location location) {
  constexpr const char* op = "from_dlpack";
  if (!managed) throw ValueError(op, "the managed tensor is a null pointer", location);
  if (managed->version.major != DLPACK_MAJOR_VERSION)
    throw ValueError(op,
                     "DLPack version " + std::to_string(managed->version.major) + "." +
                         std::to_string(managed->version.minor) + " is not " + std::to_string(DLPACK_MAJOR_VERSION) +
                         ".x, the version kiln reads",
                     location);
  return import_managed(managed, location);
}

Tensor from_dlpack(DLManagedTensor* managed, Location location) {
  if (!managed) throw ValueError("from_dlpack", "the managed tensor is a null pointer", location);
  return import_managed(managed, location);
}

}  // namespace kiln
