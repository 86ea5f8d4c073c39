// kiln::to_dlpack and kiln::from_dlpack (include/kiln/dlpack.h): zero copy both ways where the layout allows,
// copies of strided or misaligned data, the deleter called exactly once and only when the memory is no longer
// used, and errors that leave the managed tensor the caller's.

#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/dlpack.h>
#include <kiln/kiln.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kiln {
namespace {

using testing::random_tensor;

// A producer's tensor: its own 64-byte aligned memory, and a deleter that counts its calls.
struct Produced {
  DLManagedTensorVersioned managed{};
  std::vector<std::int64_t> shape, strides;
  void* memory = nullptr;
  int* deleted = nullptr;
};

void delete_produced(DLManagedTensorVersioned* managed) {
  auto* produced = static_cast<Produced*>(managed->manager_ctx);
  ++*produced->deleted;
  std::free(produced->memory);
  delete produced;
}

// `values` (doubles) laid out with `strides` (null: dense) from `offset` bytes into 64-byte aligned memory.
DLManagedTensorVersioned* produce(const std::vector<double>& values, std::vector<std::int64_t> shape,
                                  std::vector<std::int64_t> strides, std::uint64_t offset, int* deleted) {
  auto* produced = new Produced;
  produced->shape = std::move(shape);
  produced->strides = std::move(strides);
  produced->deleted = deleted;
  std::size_t span = 1;
  for (std::size_t axis = 0; axis < produced->shape.size(); ++axis)
    span += static_cast<std::size_t>((produced->shape[axis] - 1) *
                                     (produced->strides.empty() ? 1 : produced->strides[axis]));
  span = std::max(span, values.size());
  produced->memory = std::aligned_alloc(64, (span * sizeof(double) + offset + 63) / 64 * 64);
  std::memcpy(static_cast<char*>(produced->memory) + offset, values.data(), values.size() * sizeof(double));
  DLManagedTensorVersioned& managed = produced->managed;
  managed.version = {1, 0};
  managed.manager_ctx = produced;
  managed.deleter = delete_produced;
  managed.dl_tensor.data = produced->memory;
  managed.dl_tensor.device = {kDLCPU, 0};
  managed.dl_tensor.ndim = static_cast<std::int32_t>(produced->shape.size());
  managed.dl_tensor.dtype = {kDLFloat, 64, 1};
  managed.dl_tensor.shape = produced->shape.data();
  managed.dl_tensor.strides = produced->strides.empty() ? nullptr : produced->strides.data();
  managed.dl_tensor.byte_offset = offset;
  return &managed;
}

TEST(DLPack, ExportSharesTheTensorsMemoryReadOnly) {
  for (DType dtype : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Tensor x = random_tensor(dtype, {3, 5}, 1);
    DLManagedTensorVersioned* managed = to_dlpack(x);
    const DLTensor& tensor = managed->dl_tensor;
    EXPECT_EQ(managed->version.major, 1u);
    EXPECT_EQ(managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_READ_ONLY);
    EXPECT_EQ(tensor.device.device_type, kDLCPU);
    EXPECT_EQ(tensor.ndim, 2);
    EXPECT_EQ(tensor.shape[0], 3);
    EXPECT_EQ(tensor.shape[1], 5);
    EXPECT_EQ(tensor.strides[0], 5);
    EXPECT_EQ(tensor.strides[1], 1);
    EXPECT_EQ(tensor.byte_offset, 0u);
    EXPECT_EQ(tensor.dtype.bits, size_of(dtype) * 8);
    EXPECT_EQ(tensor.dtype.lanes, 1);
    // The consumer reads the tensor's own bytes.
    const std::vector<double> values = cast(x, DType::f64).to_vector<double>();
    for (std::size_t i = 0; i < values.size(); ++i) {
      double element = 0;
      const char* at = static_cast<const char*>(tensor.data) + i * size_of(dtype);
      switch (dtype) {
        case DType::boolean:
          element = *reinterpret_cast<const std::uint8_t*>(at);
          break;
        case DType::i32:
          element = *reinterpret_cast<const std::int32_t*>(at);
          break;
        case DType::i64:
          element = static_cast<double>(*reinterpret_cast<const std::int64_t*>(at));
          break;
        case DType::f32:
          element = *reinterpret_cast<const float*>(at);
          break;
        case DType::f64:
          element = *reinterpret_cast<const double*>(at);
          break;
        case DType::bf16:
          element = to_float(*reinterpret_cast<const bfloat16*>(at));
          break;
        case DType::f16:
          element = to_float(*reinterpret_cast<const float16*>(at));
          break;
      }
      EXPECT_EQ(element, values[i]) << to_string(dtype) << " element " << i;
    }
    // The memory outlives the tensor until the consumer's deleter runs.
    const std::vector<double> before = values;
    x = Tensor();
    EXPECT_EQ(cast(from_dlpack(managed), DType::f64).to_vector<double>(), before) << to_string(dtype);
  }
}

TEST(DLPack, RoundTripIsZeroCopyAndKeepsRank0AndEmptyShapes) {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{4, 0, 2}, Shape{2, 3, 4}}) {
    Tensor x = random_tensor(DType::f32, shape, 2);
    DLManagedTensorVersioned* managed = to_dlpack(x);
    const void* data = managed->dl_tensor.data;
    Tensor y = from_dlpack(managed);
    EXPECT_EQ(y.shape(), shape);
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
    DLManagedTensorVersioned* back = to_dlpack(y);
    if (shape.numel() > 0) {
      EXPECT_EQ(back->dl_tensor.data, data) << "the round trip copied " << shape.to_string();
    }
    back->deleter(back);
  }
}

TEST(DLPack, ImportReadsInPlaceAndDeletesWithTheLastTensor) {
  int deleted = 0;
  DLManagedTensorVersioned* managed = produce({1, 2, 3, 4, 5, 6}, {2, 3}, {}, 0, &deleted);
  const void* memory = managed->dl_tensor.data;
  {
    Tensor x = from_dlpack(managed);
    EXPECT_EQ(x.to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
    Tensor copy = x;  // another handle on the same memory
    x = Tensor();
    EXPECT_EQ(deleted, 0);
    DLManagedTensorVersioned* again = to_dlpack(copy);
    EXPECT_EQ(again->dl_tensor.data, memory) << "kiln copied dense aligned memory";
    Tensor sum = copy + copy;  // a new buffer: the producer's is not needed by it
    copy = Tensor();
    EXPECT_EQ(deleted, 0) << "the export still uses the memory";
    again->deleter(again);
    EXPECT_EQ(deleted, 1);
    EXPECT_EQ(sum.to_vector<double>(), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  }
  EXPECT_EQ(deleted, 1);
}

// DLPack 0.x's unversioned struct (what JAX's from_dlpack asks for): an export is a copy (the struct cannot say
// read-only), an import reads in place as for the versioned struct, and the deleter runs once.
struct ProducedUnversioned {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::vector<float> values;  // a std::vector's memory: 64-byte aligned or not, read in place or copied
  int* deleted = nullptr;
};

TEST(DLPack, UnversionedStructsAreExportedAsCopiesAndImported) {
  const Tensor x = random_tensor(DType::f32, Shape{5, 3}, 1);
  DLManagedTensor* exported = to_dlpack_unversioned(x);
  ASSERT_NE(exported, nullptr);
  EXPECT_NE(exported->dl_tensor.data, x.data()) << "a copy: a consumer of the old struct may write into it";
  EXPECT_EQ(exported->dl_tensor.ndim, 2);
  EXPECT_EQ(exported->dl_tensor.shape[0], 5);
  EXPECT_EQ(exported->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(std::memcmp(exported->dl_tensor.data, x.data(), 15 * sizeof(float)), 0);
  static_cast<float*>(exported->dl_tensor.data)[0] += 1;  // the consumer writes: kiln's tensor does not change
  EXPECT_EQ(x.to_vector<float>(), random_tensor(DType::f32, Shape{5, 3}, 1).to_vector<float>());
  // Taken back in: read in place (kiln's copy is 64-byte aligned), the deleter run with the last tensor.
  const void* memory = exported->dl_tensor.data;
  Tensor back = from_dlpack(exported);
  EXPECT_EQ(back.data(), memory);
  EXPECT_EQ(back.to_vector<float>()[0], x.to_vector<float>()[0] + 1);
  back = Tensor();

  int deleted = 0;
  auto* produced = new ProducedUnversioned;
  produced->shape = {2, 2};
  produced->values = {1.5f, -2.0f, 3.25f, 4.0f};
  produced->deleted = &deleted;
  produced->managed.manager_ctx = produced;
  produced->managed.deleter = [](DLManagedTensor* self) {
    auto* owner = static_cast<ProducedUnversioned*>(self->manager_ctx);
    ++*owner->deleted;
    delete owner;
  };
  produced->managed.dl_tensor = {produced->values.data(), {kDLCPU, 0}, 2, {kDLFloat, 32, 1},
                                 produced->shape.data(),  nullptr,     0};
  {
    const Tensor imported = from_dlpack(&produced->managed);
    EXPECT_EQ(imported.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f, 4.0f}));
  }
  EXPECT_EQ(deleted, 1);
  EXPECT_THROW((void)from_dlpack(static_cast<DLManagedTensor*>(nullptr)), ValueError);
}

TEST(DLPack, StridedOrMisalignedDataIsCopiedAndReleasedAtOnce) {
  int deleted = 0;
  // The transpose of a row-major [3, 2] array of 0..5: strides 1 and 2 over shape [2, 3].
  Tensor transposed = from_dlpack(produce({0, 1, 2, 3, 4, 5}, {2, 3}, {1, 2}, 0, &deleted));
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(transposed.to_vector<double>(), (std::vector<double>{0, 2, 4, 1, 3, 5}));
  // Every other element of a row (a strided slice), then rows 2 apart.
  Tensor sliced = from_dlpack(produce({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {2, 3}, {6, 2}, 0, &deleted));
  EXPECT_EQ(deleted, 2);
  EXPECT_EQ(sliced.to_vector<double>(), (std::vector<double>{0, 2, 4, 6, 8, 10}));
  // Dense, but 8 bytes past an alignment kiln's kernels expect.
  Tensor shifted = from_dlpack(produce({7, 8, 9}, {3}, {}, 8, &deleted));
  EXPECT_EQ(deleted, 3);
  EXPECT_EQ(shifted.to_vector<double>(), (std::vector<double>{7, 8, 9}));
  // A 64-byte offset keeps the alignment: read in place.
  Tensor offset = from_dlpack(produce({7, 8, 9}, {3}, {}, 64, &deleted));
  EXPECT_EQ(deleted, 3);
  EXPECT_EQ(offset.to_vector<double>(), (std::vector<double>{7, 8, 9}));
  offset = Tensor();
  EXPECT_EQ(deleted, 4);
  // Size-1 axes may have any stride and are still dense.
  Tensor unit = from_dlpack(produce({1, 2, 3}, {1, 3}, {99, 1}, 0, &deleted));
  EXPECT_EQ(deleted, 4);
  EXPECT_EQ(unit.to_vector<double>(), (std::vector<double>{1, 2, 3}));
}

TEST(DLPack, ImportedTensorsWorkInCompiledFunctions) {
  int deleted = 0;
  Tensor x = from_dlpack(produce({0.5, -1, 2, 4}, {2, 2}, {}, 0, &deleted));
  auto f = function([](Tensor a) { return exp(a) * 2 - a; }, {.jit_compile = true});
  const std::vector<double> result = f(x).to_vector<double>();
  const std::vector<double> inputs = {0.5, -1, 2, 4};
  for (std::size_t i = 0; i < inputs.size(); ++i) EXPECT_NEAR(result[i], std::exp(inputs[i]) * 2 - inputs[i], 1e-12);
}

// from_dlpack(managed) throws a `Kind` naming from_dlpack, `fragment` and this file's line.
template <class Kind>
void expect_error(DLManagedTensorVersioned* managed, const std::string& fragment) {
  try {
    from_dlpack(managed);
    ADD_FAILURE() << "no error for " << fragment;
  } catch (const Kind& error) {
    EXPECT_EQ(error.op(), "from_dlpack") << error.what();
    EXPECT_NE(error.detail().find(fragment), std::string::npos) << error.what();
    EXPECT_NE(error.location().find("dlpack_test.cpp"), std::string::npos) << error.what();
  }
}

TEST(DLPack, BadInputThrowsAndLeavesTheManagedTensorToTheCaller) {
  expect_error<ValueError>(nullptr, "null pointer");
  int deleted = 0;
  DLManagedTensorVersioned* managed = produce({1, 2}, {2}, {}, 0, &deleted);
  managed->version.major = 2;
  expect_error<ValueError>(managed, "DLPack version 2.0");
  managed->version.major = 1;
  managed->dl_tensor.dtype = {kDLComplex, 64, 1};
  expect_error<DTypeError>(managed, "complex64");
  managed->dl_tensor.dtype = {kDLFloat, 64, 2};
  expect_error<DTypeError>(managed, "lanes");
  managed->dl_tensor.dtype = {kDLFloat, 64, 1};
  managed->dl_tensor.device = {kDLMetal, 0};
  expect_error<DeviceError>(managed, "device type 8");
  managed->dl_tensor.device = {kDLCPU, 0};
  managed->dl_tensor.shape[0] = -2;
  expect_error<ShapeError>(managed, "size -2");
  managed->dl_tensor.shape[0] = 2;
  EXPECT_EQ(deleted, 0) << "a failed import released the producer's memory";
  EXPECT_EQ(from_dlpack(managed).to_vector<double>(), (std::vector<double>{1, 2}));
  EXPECT_EQ(deleted, 1);
}

TEST(DLPack, GpuTensorsAreSharedInPlace) {
  if (devices().size() > 1) {
    // With a GPU (or the CUDA simulator): exported as kDLCUDA memory and taken back without a copy.
    const Tensor values = from_vector<float>({1.5f, -2, 4});
    const Tensor on_gpu = values.to(Device::cuda(0));
    DLManagedTensorVersioned* managed = to_dlpack(on_gpu);
    EXPECT_EQ(managed->dl_tensor.device.device_type, kDLCUDA);
    EXPECT_EQ(managed->dl_tensor.device.device_id, 0);
    const void* data = managed->dl_tensor.data;
    const Tensor back = from_dlpack(managed);
    EXPECT_EQ(back.device(), Device::cuda(0));
    EXPECT_EQ(back.to(Device::cpu()).to_vector<float>(), values.to_vector<float>());
    DLManagedTensorVersioned* again = to_dlpack(back);
    EXPECT_EQ(again->dl_tensor.data, data);
    again->deleter(again);
    return;
  }
  int deleted = 0;
  DLManagedTensorVersioned* managed = produce({1, 2}, {2}, {}, 0, &deleted);
  managed->dl_tensor.device = {kDLCUDA, 0};
  expect_error<DeviceError>(managed, "cuda:0");
  EXPECT_EQ(deleted, 0);
  managed->deleter(managed);
}

TEST(DLPack, ExportingATracedTensorIsAnError) {
  auto f = function([](Tensor x) {
    EXPECT_THROW(to_dlpack(x), ValueError);
    return x + 1;
  });
  EXPECT_EQ(f(Tensor(from_vector(std::vector<float>{1}))).to_vector<float>(), (std::vector<float>{2}));
  EXPECT_THROW(to_dlpack(Tensor()), ValueError);
}

}  // namespace
}  // namespace kiln
