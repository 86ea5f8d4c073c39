#pragma once
// Exchanging tensors with other libraries through DLPack 1.0 (PyTorch's
// torch.from_dlpack, JAX's jax.dlpack, NumPy, CuPy, ...), without copying.
//
//   DLManagedTensorVersioned* managed = kiln::to_dlpack(x);   // hand to a consumer
//   kiln::Tensor y = kiln::from_dlpack(managed);               // or take one in
//
// to_dlpack shares the tensor's memory: the consumer calls managed->deleter
// when it is done, and the memory lives until then (and as long as any kiln
// tensor uses it). kiln tensors are immutable, so the export is flagged
// read-only. from_dlpack takes ownership of `managed` when it returns: the
// tensor reads the producer's memory where it lies when it is dense, row-major
// and 64-byte aligned (what kiln's kernels expect), and the deleter runs when
// the last kiln tensor using it is gone; otherwise (other strides, an offset
// that breaks the alignment) it copies and calls the deleter at once. When
// from_dlpack throws, `managed` is untouched and still the caller's.
//
// Errors name the function and the caller's line: kiln::DTypeError for an
// element type kiln has no dtype for (kiln has bool, i32, i64, f32, f64) or
// vector lanes; kiln::DeviceError for a device kiln cannot use;
// kiln::ShapeError for a rank above 8 or a negative size; kiln::ValueError for
// a null pointer, another DLPack major version, a traced or undefined tensor,
// or CUDA data that is not dense (kiln copies strided data on the CPU only).
//
// The declarations below are DLPack 1.0's ABI (the structs and enums of
// dlpack/dlpack.h, the open standard's header). They stand under the standard
// header's include guard, so including either header first is fine, provided
// it is version 1.0 or later: the versioned structs are not in 0.x.

#if defined(DLPACK_DLPACK_H_) && (!defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION < 1)
#error \
    "kiln/dlpack.h needs DLPack 1.0 or later; an older dlpack/dlpack.h (without DLManagedTensorVersioned) was included first"
#endif

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL: dense row-major
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // DLPACK_DLPACK_H_

#include <kiln/tensor.h>

namespace kiln {

// The tensor as a DLPack 1.0 managed tensor sharing its memory (CPU or CUDA), flagged read-only; the consumer
// owns the result and calls its deleter once.
DLManagedTensorVersioned* to_dlpack(const Tensor& tensor, Location location = Location::current());

// A tensor of `managed`'s elements, taking ownership of `managed` when it returns (see above).
Tensor from_dlpack(DLManagedTensorVersioned* managed, Location location = Location::current());

// DLPack 0.x's unversioned DLManagedTensor, for consumers and producers that use only it: JAX's
// jax.numpy.from_dlpack (0.10) asks __dlpack__ for it (no max_version), as do older NumPy and PyTorch. The old
// struct cannot say read-only, and its consumers may write into the memory they are given, so
// to_dlpack_unversioned hands a copy of the tensor (on its device) rather than the tensor's own buffer.
// from_dlpack of one reads the memory in place or copies, as for the versioned struct.
DLManagedTensor* to_dlpack_unversioned(const Tensor& tensor, Location location = Location::current());
Tensor from_dlpack(DLManagedTensor* managed, Location location = Location::current());

}  // namespace kiln
