#pragma once
// What the CUDA simulator's cuBLAS (blas.cpp) and cuBLASLt (blas_lt.cpp)
// share (tools/cuda-simulator/README.md). Both take the calls kiln makes
// (src/runtime/cuda/cuda_context.cpp, src/kernels/cuda/blas_lt.cpp,
// src/kernels/cuda/matmul.cu, tools/kiln-bench/device_timing.cpp), with the
// real libraries' C signatures, computing on the host the column-major product
//
//   D = epilogue(alpha op(A) op(B) + beta C (+ bias))
//
// at reference quality: products summed in double and rounded once to the
// output type, with every A and B element first rounded to TF32 under
// CUBLAS_COMPUTE_32F_FAST_TF32, so TF32's error shows here as on a GPU.
//
// A call checks its arguments as the libraries document and returns their
// status; the arithmetic is queued on the call's stream and runs when the
// runtime runs that stream's work (simulator.h), with everything it needs
// (pointers, sizes, alpha and beta, the descriptors' contents) copied at the
// call, as a GPU's launch does. Every matrix the product reads or writes must
// lie in one device allocation (a GPU would fault on a host pointer), and
// alpha and beta must be host memory (pointer mode host, the only one here).
//
// Only what kiln uses is simulated: f32 and f64, bf16 and f16 operands of a
// product summed in f32 (CUBLAS_COMPUTE_32F: their exact values summed in
// double as well; C and D f32, or of the operands' type, the sum rounded to
// f32 and then to it), the compute types
// CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32 and CUBLAS_COMPUTE_64F,
// column-major strided batches, and the epilogues RELU, BIAS, RELU_BIAS,
// GELU and GELU_BIAS (f32). An attribute, operation, type or value outside
// that is refused with CUBLAS_STATUS_NOT_SUPPORTED, never ignored, so that a
// new use in kiln is noticed here before it meets a GPU.
//
// Nothing here is an API: only blas.cpp and blas_lt.cpp include this file,
// and blas_product.cpp defines what it declares.

#include "simulator.h"

#include <cublas_v2.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>

namespace kiln::cuda_simulator::blas {

using std::int64_t;

// ---- the product ----------------------------------------------------------------------

// The element types and activations kiln uses: a call that names any other is
// refused before a Gemm is made, so the arithmetic meets no other.
enum class Element { f32, f64, bf16, f16 };
enum class Activation { none, relu, gelu };

inline std::size_t size_of(Element element) {
  switch (element) {
    case Element::f32:
      return sizeof(float);
    case Element::f64:
      return sizeof(double);
    case Element::bf16:
    case Element::f16:
      return 2;
  }
  return 0;
}

// One column-major matrix of a batch as stored (before op()).
template <class Pointer>
struct Matrix {
  Pointer data = nullptr;
  int64_t leading = 0;       // elements from one column to the next
  int64_t batch_stride = 0;  // elements from one batch item to the next
};

// Everything a queued product needs, copied at the call.
struct Gemm {
  Element element = Element::f32;   // the bias's and the scalars' (the compute type's)
  Element operands = Element::f32;  // A's and B's: element, or bf16 or f16 with element f32 (operands_fit)
  Element result = Element::f32;    // C's and D's: element, or the operands' 16-bit type (results_fit)
  bool tf32 = false;  // round A and B to TF32 first
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  Matrix<const void*> a{}, b{}, c{};
  Matrix<void*> d{};
  double alpha = 1, beta = 0;  // beta == 0: C is not read
  Activation activation = Activation::none;
  const void* bias = nullptr;  // m values of the element type, the same for every batch item, or nullptr
};

// Queues the product `gemm` describes on `stream`, to run when the runtime
// runs that stream's work (simulator.h), at the quality the file-top comment
// states. `gemm` is copied, as a GPU's launch copies its arguments, so the
// caller's descriptors may change or go away at once; its pointers are not
// checked again here, so the caller checks them first (operands_on_device).
void enqueue_product(cudaStream_t stream, const Gemm& gemm);

// ---- argument checks ------------------------------------------------------------------

// The element of a data type kiln uses (CUDA_R_32F, CUDA_R_64F, CUDA_R_16BF,
// CUDA_R_16F); nullopt for any other, which the callers refuse with
// CUBLAS_STATUS_NOT_SUPPORTED.
std::optional<Element> element_of(int type);

struct Precision {
  Element element;
  bool tf32;
};

// Whether A and B of `operands` go with a compute type of `precision`, as
// cuBLAS's tables of type combinations list them: the compute type's own data
// type, or 16-bit floats under CUBLAS_COMPUTE_32F (f32 C). (16-bit C and D,
// which the tables also list, kiln does not use.)
bool operands_fit(const Precision& precision, Element operands);

// Whether C and D of `result` go with them: the compute type's data type, or
// the 16-bit type of the operands.
bool results_fit(const Precision& precision, Element operands, Element result);

// The compute types kiln uses, each with the one data (and scale) type it
// takes here. CUBLAS_COMPUTE_32F_PEDANTIC, _64F_PEDANTIC and the rest are
// refused: kiln does not use them.
std::optional<Precision> precision_of(int compute);

// CUBLAS_OP_C is CUBLAS_OP_T for real matrices, but kiln never passes it, so
// it is refused to be noticed; anything else is not an operation.
cublasStatus_t read_operation(int operation, bool& transpose);

// alpha and beta are read on the host at the call (pointer mode host); a
// host that dereferences device memory faults, so a device pointer is refused.
bool host_scalars(const void* alpha, const void* beta, Element element);

// The value behind alpha or beta, as double (exact for both elements). Only
// for a pointer host_scalars accepted.
double read_scalar(const void* pointer, Element element);

// Every buffer the product reads or writes, in device memory: A and B unless
// k is 0, C unless beta is 0, D, and the bias. A GPU would fault on a host
// pointer, so a call refuses the product (CUBLAS_STATUS_INVALID_VALUE)
// rather than queue it.
bool operands_on_device(const Gemm& gemm);

// ---- live handles and descriptors -----------------------------------------------------

// What cuBLAS or cuBLASLt handed out and has not destroyed, found by the
// pointer the caller holds: a destroyed or made-up one gets a status, not
// undefined behaviour.
template <class Object>
class Registry {
 public:
  void add(const void* key, std::unique_ptr<Object> object) {
    std::lock_guard lock(mutex_);
    objects_[key] = std::move(object);
  }
  Object* find(const void* key) const {
    std::lock_guard lock(mutex_);
    auto found = objects_.find(key);
    return found == objects_.end() ? nullptr : found->second.get();
  }
  bool remove(const void* key) {
    std::lock_guard lock(mutex_);
    return objects_.erase(key) == 1;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<const void*, std::unique_ptr<Object>> objects_;
};

// Never destroyed: kiln destroys descriptors from static destructors
// (src/kernels/cuda/blas_lt.cpp's plans), which may run after the
// simulator's. One per Object in the whole program, as a template's static.
template <class Object>
Registry<Object>& registry() {
  static auto* objects = new Registry<Object>;
  return *objects;
}

// Creates an Object, hands its `public_part` (the fixed-size struct the
// header's pointer type names) to the caller, and remembers it.
template <class Object, class Public>
Object& create(Public** result) {
  auto object = std::make_unique<Object>();
  Object& created = *object;
  *result = &object->public_part;
  registry<Object>().add(*result, std::move(object));
  return created;
}

// A pointer not live (destroyed already, or made up) gets INVALID_VALUE and
// frees nothing.
template <class Object>
cublasStatus_t destroy(const void* pointer) {
  if (!pointer) return CUBLAS_STATUS_SUCCESS;  // as free(nullptr)
  return registry<Object>().remove(pointer) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// An attribute's value, of the one type the attribute has.
template <class Value>
cublasStatus_t read_attribute(const void* buffer, std::size_t size, Value& value) {
  if (!buffer || size != sizeof(Value)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&value, buffer, sizeof(Value));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace kiln::cuda_simulator::blas
