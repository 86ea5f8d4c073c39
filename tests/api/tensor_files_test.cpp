// save_npy/load_npy and save_npz/load_npz (include/kiln/tensor_files.h):
// round trips of every dtype and shape kind, the exact bytes kiln writes,
// files written by NumPy (embedded below as bytes), and every error path.

#include "api/zip.h"
#include "support/files.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

#include <cstring>

namespace kiln {
namespace {

using testing::error_of;
using testing::random_tensor;
using testing::read_file;
using testing::same_tensor;
using testing::TemporaryDirectory;
using testing::write_file;

constexpr DType every_dtype[] = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }
std::string this_file_line(int line) { return "tensor_files_test.cpp:" + std::to_string(line); }

template <class T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A .npy file of format `major`.0 with header dict `dict`, padded with spaces
// and a newline to a multiple of 64 bytes as numpy.save pads it, then `data`.
std::string npy_file(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  std::string header = dict;
  header.append(63 - (8 + length_bytes + header.size()) % 64, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  for (std::size_t i = 0; i < length_bytes; ++i) file += static_cast<char>(header.size() >> (8 * i) & 0xff);
  return file + header + data;
}

// np.savez(f, weight=np.array([[1.5, -2.0], [3.25, 4.0]], dtype='<f4'),
//          step=np.array(7, dtype='<i8'), mask=np.array([True, False, True]))
// and the same with np.savez_compressed, written by NumPy 2.4.6. NumPy puts
// Zip64 sizes in each local header (sizes 0xffffffff there) and the real ones
// in the central directory.
constexpr char numpy_savez[] =
    "\x50\x4b\x03\x04\x2d\x00\x00\x00\x00\x00\x00\x00\x21\x00\x6b\x0e\x1a\x51\xff\xff"
    "\xff\xff\xff\xff\xff\xff\x0a\x00\x14\x00\x77\x65\x69\x67\x68\x74\x2e\x6e\x70\x79"
    "\x01\x00\x10\x00\x90\x00\x00\x00\x00\x00\x00\x00\x90\x00\x00\x00\x00\x00\x00\x00"
    "\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20"
    "\x27\x3c\x66\x34\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65"
    "\x72\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20"
    "\x28\x32\x2c\x20\x32\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x0a\x00\x00\xc0\x3f\x00\x00\x00\xc0\x00\x00\x50\x40"
    "\x00\x00\x80\x40\x50\x4b\x03\x04\x2d\x00\x00\x00\x00\x00\x00\x00\x21\x00\x23\xb8"
    "\xf0\x6c\xff\xff\xff\xff\xff\xff\xff\xff\x08\x00\x14\x00\x73\x74\x65\x70\x2e\x6e"
    "\x70\x79\x01\x00\x10\x00\x88\x00\x00\x00\x00\x00\x00\x00\x88\x00\x00\x00\x00\x00"
    "\x00\x00\x93\x4e\x55\x4d\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27"
    "\x3a\x20\x27\x3c\x69\x38\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72"
    "\x64\x65\x72\x27\x3a\x20\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27"
    "\x3a\x20\x28\x29\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x0a\x07\x00\x00\x00\x00\x00\x00\x00\x50\x4b"
    "\x03\x04\x2d\x00\x00\x00\x00\x00\x00\x00\x21\x00\x16\x93\x8c\xbb\xff\xff\xff\xff"
    "\xff\xff\xff\xff\x08\x00\x14\x00\x6d\x61\x73\x6b\x2e\x6e\x70\x79\x01\x00\x10\x00"
    "\x83\x00\x00\x00\x00\x00\x00\x00\x83\x00\x00\x00\x00\x00\x00\x00\x93\x4e\x55\x4d"
    "\x50\x59\x01\x00\x76\x00\x7b\x27\x64\x65\x73\x63\x72\x27\x3a\x20\x27\x7c\x62\x31"
    "\x27\x2c\x20\x27\x66\x6f\x72\x74\x72\x61\x6e\x5f\x6f\x72\x64\x65\x72\x27\x3a\x20"
    "\x46\x61\x6c\x73\x65\x2c\x20\x27\x73\x68\x61\x70\x65\x27\x3a\x20\x28\x33\x2c\x29"
    "\x2c\x20\x7d\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20\x20"
    "\x20\x20\x20\x0a\x01\x00\x01\x50\x4b\x01\x02\x2d\x03\x2d\x00\x00\x00\x00\x00\x00"
    "\x00\x21\x00\x6b\x0e\x1a\x51\x90\x00\x00\x00\x90\x00\x00\x00\x0a\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x80\x01\x00\x00\x00\x00\x77\x65\x69\x67\x68\x74\x2e"
    "\x6e\x70\x79\x50\x4b\x01\x02\x2d\x03\x2d\x00\x00\x00\x00\x00\x00\x00\x21\x00\x23"
    "\xb8\xf0\x6c\x88\x00\x00\x00\x88\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x80\x01\xcc\x00\x00\x00\x73\x74\x65\x70\x2e\x6e\x70\x79\x50\x4b\x01"
    "\x02\x2d\x03\x2d\x00\x00\x00\x00\x00\x00\x00\x21\x00\x16\x93\x8c\xbb\x83\x00\x00"
    "\x00\x83\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x8e"
    "\x01\x00\x00\x6d\x61\x73\x6b\x2e\x6e\x70\x79\x50\x4b\x05\x06\x00\x00\x00\x00\x03"
    "\x00\x03\x00\xa4\x00\x00\x00\x4b\x02\x00\x00\x00\x00";
constexpr char numpy_savez_compressed[] =
    "\x50\x4b\x03\x04\x2d\x00\x00\x00\x08\x00\x00\x00\x21\x00\x6b\x0e\x1a\x51\xff\xff"
    "\xff\xff\xff\xff\xff\xff\x0a\x00\x14\x00\x77\x65\x69\x67\x68\x74\x2e\x6e\x70\x79"
    "\x01\x00\x10\x00\x90\x00\x00\x00\x00\x00\x00\x00\x55\x00\x00\x00\x00\x00\x00\x00"
    "\x9b\xec\x17\xea\x1b\x10\xc9\xc8\x50\xc6\x50\xad\x9e\x92\x5a\x9c\x5c\xa4\x6e\xa5"
    "\xa0\x6e\x93\x66\xa2\xae\xa3\xa0\x9e\x96\x5f\x54\x52\x94\x98\x17\x9f\x5f\x94\x92"
    "\x0a\x12\x77\x4b\xcc\x29\x4e\x05\x8a\x17\x67\x24\x16\xa4\x02\xf9\x1a\x46\x3a\x0a"
    "\x46\x9a\x3a\x0a\xb5\x0a\x64\x03\x2e\x06\x86\x03\xf6\x0c\x40\x82\x81\x21\xc0\x81"
    "\x81\xa1\xc1\x01\x00\x50\x4b\x03\x04\x2d\x00\x00\x00\x08\x00\x00\x00\x21\x00\x23"
    "\xb8\xf0\x6c\xff\xff\xff\xff\xff\xff\xff\xff\x08\x00\x14\x00\x73\x74\x65\x70\x2e"
    "\x6e\x70\x79\x01\x00\x10\x00\x88\x00\x00\x00\x00\x00\x00\x00\x46\x00\x00\x00\x00"
    "\x00\x00\x00\x9b\xec\x17\xea\x1b\x10\xc9\xc8\x50\xc6\x50\xad\x9e\x92\x5a\x9c\x5c"
    "\xa4\x6e\xa5\xa0\x6e\x93\x69\xa1\xae\xa3\xa0\x9e\x96\x5f\x54\x52\x94\x98\x17\x9f"
    "\x5f\x94\x92\x0a\x12\x77\x4b\xcc\x29\x4e\x05\x8a\x17\x67\x24\x16\xa4\x02\xf9\x1a"
    "\x9a\x3a\x0a\xb5\x0a\x14\x01\x2e\x76\x06\x08\x00\x00\x50\x4b\x03\x04\x2d\x00\x00"
    "\x00\x08\x00\x00\x00\x21\x00\x16\x93\x8c\xbb\xff\xff\xff\xff\xff\xff\xff\xff\x08"
    "\x00\x14\x00\x6d\x61\x73\x6b\x2e\x6e\x70\x79\x01\x00\x10\x00\x83\x00\x00\x00\x00"
    "\x00\x00\x00\x47\x00\x00\x00\x00\x00\x00\x00\x9b\xec\x17\xea\x1b\x10\xc9\xc8\x50"
    "\xc6\x50\xad\x9e\x92\x5a\x9c\x5c\xa4\x6e\xa5\xa0\x5e\x93\x64\xa8\xae\xa3\xa0\x9e"
    "\x96\x5f\x54\x52\x94\x98\x17\x9f\x5f\x94\x92\x0a\x12\x77\x4b\xcc\x29\x4e\x05\x8a"
    "\x17\x67\x24\x16\xa4\x02\xf9\x1a\xc6\x3a\x9a\x3a\x0a\xb5\x0a\x14\x00\x2e\x46\x06"
    "\x46\x00\x50\x4b\x01\x02\x2d\x03\x2d\x00\x00\x00\x08\x00\x00\x00\x21\x00\x6b\x0e"
    "\x1a\x51\x55\x00\x00\x00\x90\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x80\x01\x00\x00\x00\x00\x77\x65\x69\x67\x68\x74\x2e\x6e\x70\x79\x50\x4b"
    "\x01\x02\x2d\x03\x2d\x00\x00\x00\x08\x00\x00\x00\x21\x00\x23\xb8\xf0\x6c\x46\x00"
    "\x00\x00\x88\x00\x00\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01"
    "\x91\x00\x00\x00\x73\x74\x65\x70\x2e\x6e\x70\x79\x50\x4b\x01\x02\x2d\x03\x2d\x00"
    "\x00\x00\x08\x00\x00\x00\x21\x00\x16\x93\x8c\xbb\x47\x00\x00\x00\x83\x00\x00\x00"
    "\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x01\x11\x01\x00\x00\x6d\x61"
    "\x73\x6b\x2e\x6e\x70\x79\x50\x4b\x05\x06\x00\x00\x00\x00\x03\x00\x03\x00\xa4\x00"
    "\x00\x00\x92\x01\x00\x00\x00\x00";

std::string fixture(const char* bytes, std::size_t size) { return std::string(bytes, size - 1); }

// ---- .npy ----------------------------------------------------------------------

TEST(Npy, RoundTripsEveryDtypeAndShapeKind) {
  TemporaryDirectory directory;
  const std::vector<Shape> shapes = {{2, 3}, {}, {0}, {3, 0, 2}, {7}, {1, 2, 1, 2, 1, 2, 1, 2}};
  std::uint64_t seed = 1;
  for (DType dtype : every_dtype) {
    for (const Shape& shape : shapes) {
      const Tensor tensor = random_tensor(dtype, shape, seed++);
      const auto path = directory / "tensor.npy";
      save_npy(path, tensor);
      EXPECT_TRUE(same_tensor(tensor, load_npy(path))) << to_string(dtype) << shape.to_string();
    }
  }
}

TEST(Npy, SavesViewsAsTheirLogicalValues) {
  TemporaryDirectory directory;
  const Tensor matrix = from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  save_npy(directory / "transposed.npy", transpose(matrix));
  const Tensor transposed = load_npy(directory / "transposed.npy");
  EXPECT_EQ(transposed.shape(), Shape({3, 2}));
  EXPECT_EQ(transposed.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 4, 2, 5, 3, 6}));

  save_npy(directory / "strided.npy", slice(matrix, {.start = {0, 0}, .stop = {2, 3}, .step = {1, 2}}));
  EXPECT_EQ(load_npy(directory / "strided.npy").to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 3, 4, 6}));

  save_npy(directory / "broadcast.npy", broadcast_to(from_vector<float>({1, 2}), {3, 2}));
  EXPECT_EQ(load_npy(directory / "broadcast.npy").to_vector<float>(), (std::vector<float>{1, 2, 1, 2, 1, 2}));
}

TEST(Npy, RoundTripsALargeTensor) {
  TemporaryDirectory directory;
  const Tensor tensor = random_tensor(DType::f32, {512, 1031}, 7);  // 2 MiB, not a multiple of anything
  save_npy(directory / "large.npy", tensor);
  EXPECT_EQ(std::filesystem::file_size(directory / "large.npy"), 128u + 512u * 1031u * 4u);
  EXPECT_TRUE(same_tensor(tensor, load_npy(directory / "large.npy")));
}

TEST(Npy, WritesTheBytesNumpySaveWrites) {
  TemporaryDirectory directory;
  // 10 bytes of magic, version 1.0 and header length 118 (0x76); the 59-byte dict, 58 spaces and a newline
  // make the header end at byte 128, a multiple of 64. numpy.save writes exactly these bytes for this array.
  const std::vector<float> values = {1, -2, 3.5f, 4, 5, 6};
  save_npy(directory / "matrix.npy", from_vector(values, {2, 3}));
  const std::string expected = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                               "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') +
                               "\n" + bytes_of(values);
  EXPECT_EQ(read_file(directory / "matrix.npy"), expected);

  // A scalar: shape (); a bool is '|b1' (byte order does not apply).
  save_npy(directory / "scalar.npy", full({}, true, DType::boolean));
  EXPECT_EQ(read_file(directory / "scalar.npy"), std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                                                     "{'descr': '|b1', 'fortran_order': False, 'shape': (), }" +
                                                     std::string(62, ' ') + "\n\x01");

  // Rank 1 has the trailing comma of a one-element Python tuple.
  save_npy(directory / "vector.npy", from_vector<std::int64_t>({5, -6}));
  EXPECT_TRUE(
      contains(read_file(directory / "vector.npy"), "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }"));
}

TEST(Npy, ReadsWhatNumpySaveWrote) {
  TemporaryDirectory directory;
  // numpy.save(f, np.arange(6, dtype='<f8').reshape(2, 3) * 0.5): NumPy adds 20 spaces of room for the
  // shape to grow, then pads to 64 bytes, which happens to give kiln's length too.
  const std::vector<double> values = {0, 0.5, 1, 1.5, 2, 2.5};
  const std::string numpy_bytes = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                                  "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') +
                                  "\n" + bytes_of(values);
  write_file(directory / "numpy.npy", numpy_bytes);
  const Tensor tensor = load_npy(directory / "numpy.npy");
  EXPECT_EQ(tensor.dtype(), DType::f64);
  EXPECT_EQ(tensor.shape(), Shape({2, 3}));
  EXPECT_EQ(tensor.to_vector<double>(), values);
  save_npy(directory / "kiln.npy", tensor);
  EXPECT_EQ(read_file(directory / "kiln.npy"), numpy_bytes);
}

TEST(Npy, ReadsFormatVersions2And3AndOtherSpellings) {
  TemporaryDirectory directory;
  const std::vector<std::int32_t> values = {3, -1, 4};
  for (int major : {2, 3}) {
    write_file(directory / "v.npy",
               npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", bytes_of(values), major));
    EXPECT_EQ(load_npy(directory / "v.npy").to_vector<std::int32_t>(), values) << "version " << major;
  }
  // Keys in another order, double quotes, no trailing comma, Python 2's long integers.
  write_file(directory / "odd.npy",
             npy_file("{\"shape\": (1L, 3L), \"fortran_order\": False, \"descr\": \"<i4\"}", bytes_of(values)));
  const Tensor odd = load_npy(directory / "odd.npy");
  EXPECT_EQ(odd.shape(), Shape({1, 3}));
  EXPECT_EQ(odd.to_vector<std::int32_t>(), values);
}

TEST(Npy, ReadsFortranOrderIntoRowMajorOrder) {
  TemporaryDirectory directory;
  // np.asfortranarray(np.arange(24, dtype='<i4').reshape(2, 3, 4)): element (i, j, k), whose value is
  // 12i + 4j + k, is stored at position i + 2j + 6k.
  std::vector<std::int32_t> fortran;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) fortran.push_back(12 * i + 4 * j + k);
  write_file(directory / "fortran.npy",
             npy_file("{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", bytes_of(fortran)));
  const Tensor tensor = load_npy(directory / "fortran.npy");
  EXPECT_EQ(tensor.shape(), Shape({2, 3, 4}));
  std::vector<std::int32_t> row_major(24);
  for (int i = 0; i < 24; ++i) row_major[static_cast<std::size_t>(i)] = i;
  EXPECT_EQ(tensor.to_vector<std::int32_t>(), row_major);

  // Rank 1 and 0 are the same in either order.
  write_file(directory / "vector.npy",
             npy_file("{'descr': '<f8', 'fortran_order': True, 'shape': (2,), }", bytes_of(std::vector<double>{1, 2})));
  EXPECT_EQ(load_npy(directory / "vector.npy").to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST(Npy, ReadsAnyNonzeroBoolByteAsTrue) {
  TemporaryDirectory directory;
  write_file(directory / "flags.npy",
             npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }", std::string("\x00\x02\x01\xff", 4)));
  EXPECT_EQ(load_npy(directory / "flags.npy").to_vector<std::uint8_t>(), (std::vector<std::uint8_t>{0, 1, 1, 1}));
}

TEST(Npy, LoadsOntoTheCpuByDefaultOrOntoAGpu) {
  TemporaryDirectory directory;
  const Tensor values = from_vector<float>({1.5f, -2});
  save_npy(directory / "x.npy", values);
  EXPECT_EQ(load_npy(directory / "x.npy").device(), Device::cpu());
  if (devices().size() > 1) {
    // With a GPU: loaded onto it, and a tensor there is copied back to the host to be saved.
    const Tensor on_gpu = load_npy(directory / "x.npy", Device::cuda(0));
    EXPECT_EQ(on_gpu.device(), Device::cuda(0));
    EXPECT_TRUE(same_tensor(values, on_gpu));
    save_npz(directory / "gpu.npz", {{"x", on_gpu}});
    EXPECT_TRUE(same_tensor(values, load_npz(directory / "gpu.npz")[0].second));
    return;
  }
  const std::string message = error_of<DeviceError>([&] { load_npy(directory / "x.npy", Device::cuda(0)); });
  EXPECT_TRUE(contains(message, "load_npy")) << message;
  EXPECT_TRUE(contains(message, "cuda:0")) << message;
}

TEST(NpyErrors, MissingFileNamesTheFunctionTheFileAndTheLine) {
  TemporaryDirectory directory;
  const auto path = directory / "missing.npy";
  const int line = __LINE__ + 1;
  const std::string message = error_of<IOError>([&] { load_npy(path); });
  EXPECT_TRUE(contains(message, "kiln::IOError: load_npy: '" + path.string() + "': cannot open: No such file"))
      << message;
  EXPECT_TRUE(contains(message, this_file_line(line))) << message;
  EXPECT_TRUE(contains(error_of<IOError>([&] { load_npy(directory.path()); }), "it is a directory"));
}

TEST(NpyErrors, UnwritablePathLeavesNoFile) {
  TemporaryDirectory directory;
  const auto path = directory / "no-such-directory" / "x.npy";
  const int line = __LINE__ + 1;
  const std::string message = error_of<IOError>([&] { save_npy(path, ones({2})); });
  EXPECT_TRUE(contains(message, "save_npy: '" + path.string() + "': cannot create")) << message;
  EXPECT_TRUE(contains(message, this_file_line(line))) << message;
  EXPECT_TRUE(contains(error_of<IOError>([&] { save_npy(directory.path(), ones({2})); }), "it is a directory"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(NpyErrors, TracedAndUndefinedTensorsCannotBeSaved) {
  TemporaryDirectory directory;
  const auto path = directory / "traced.npy";
  auto f = function([&](Tensor x) {
    save_npy(path, x);
    return x;
  });
  const std::string message = error_of<ValueError>([&] { f(ones({2})); });
  EXPECT_TRUE(contains(message, "save_npy: cannot read the value of traced tensor f32[2]")) << message;
  EXPECT_TRUE(contains(message, "tensor_files_test.cpp")) << message;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(contains(error_of<ValueError>([&] { save_npy(path, Tensor()); }), "undefined"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(NpyErrors, MalformedFilesSayWhatIsWrong) {
  TemporaryDirectory directory;
  const auto path = directory / "bad.npy";
  const std::string data = bytes_of(std::vector<double>(6, 1.0));
  const std::string good = npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", data);
  auto message_for = [&](const std::string& bytes) {
    write_file(path, bytes);
    const std::string message = error_of<IOError>([&] { load_npy(path); });
    EXPECT_TRUE(contains(message, "load_npy: '" + path.string() + "'")) << message;
    return message;
  };
  EXPECT_TRUE(contains(message_for(""), "not a .npy file")) << message_for("");
  EXPECT_TRUE(contains(message_for("PK\x03\x04 a zip"), "not a .npy file"));
  EXPECT_TRUE(contains(message_for(good.substr(0, 7)), "truncated"));
  EXPECT_TRUE(contains(message_for(good.substr(0, 9)), "truncated"));
  EXPECT_TRUE(contains(message_for(good.substr(0, 60)), "truncated: the header says it is 118 bytes long"));
  EXPECT_TRUE(contains(message_for(good.substr(0, good.size() - 8)),
                       "truncated: shape (2, 3) of '<f8' needs 48 bytes of data, and the file holds 40"));
  EXPECT_TRUE(contains(message_for(good + "extra"), "needs 48 bytes of data, and the file holds 53"));
  std::string version = good;
  version[6] = 4;
  EXPECT_TRUE(contains(message_for(version), "format version 4.0 is not one kiln reads"));
  EXPECT_TRUE(contains(message_for(npy_file("{'descr': '<f8', 'shape': (2, 3), }", data)), "lacks 'fortran_order'"));
  EXPECT_TRUE(contains(message_for(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", data)),
                       "unknown key 'x'"));
  EXPECT_TRUE(
      contains(message_for(npy_file("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}", data)),
               "given twice"));
  EXPECT_TRUE(contains(message_for(npy_file("{'descr': '<f8', 'fortran_order': Maybe, 'shape': (2, 3)}", data)),
                       "expected True or False"));
  EXPECT_TRUE(contains(message_for(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, -3)}", data)),
                       "expected a dimension"));
  EXPECT_TRUE(contains(message_for(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)} junk", data)),
                       "text after the closing '}'"));
  // A shape whose size overflows 64 bits is refused before anything is allocated for it.
  EXPECT_TRUE(contains(
      message_for(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", data)),
      "needs 18446744073709551615 bytes"));
}

TEST(NpyErrors, UnsupportedDtypesAndRanks) {
  TemporaryDirectory directory;
  const auto path = directory / "bad.npy";
  auto dtype_message = [&](const std::string& descr) {
    write_file(path,
               npy_file("{'descr': " + descr + ", 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')));
    return error_of<DTypeError>([&] { load_npy(path); });
  };
  const std::string big_endian = dtype_message("'>f8'");
  EXPECT_TRUE(contains(big_endian, "load_npy: '" + path.string() + "': dtype '>f8' is big-endian")) << big_endian;
  EXPECT_TRUE(contains(dtype_message("'<c8'"), "dtype '<c8' is not one kiln has"));
  EXPECT_TRUE(contains(dtype_message("'|u1'"), "dtype '|u1' is not one kiln has"));
  EXPECT_TRUE(contains(dtype_message("[('x', '<f4'), ('y', '<f4')]"), "structured dtype"));

  write_file(path, npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 1), }",
                            std::string(4, '\0')));
  EXPECT_TRUE(contains(error_of<ShapeError>([&] { load_npy(path); }), "has rank 9; kiln tensors have at most 8"));
}

// ---- .npz ----------------------------------------------------------------------

TEST(Npz, RoundTripsNamedTensorsInOrder) {
  TemporaryDirectory directory;
  NamedTensors tensors;
  std::uint64_t seed = 20;
  for (DType dtype : every_dtype) {
    const std::string name(to_string(dtype));
    tensors.emplace_back("z_" + name, random_tensor(dtype, {3, 4}, seed++));
    tensors.emplace_back("scalar/" + name, random_tensor(dtype, {}, seed++));
    tensors.emplace_back("empty " + name, random_tensor(dtype, {2, 0}, seed++));
  }
  tensors.emplace_back("transposed", transpose(random_tensor(DType::f64, {5, 7}, seed++)));
  save_npz(directory / "all.npz", tensors);
  const NamedTensors loaded = load_npz(directory / "all.npz");
  ASSERT_EQ(loaded.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(loaded[i].first, tensors[i].first);
    EXPECT_TRUE(same_tensor(tensors[i].second, loaded[i].second)) << tensors[i].first;
  }

  save_npz(directory / "none.npz", {});
  EXPECT_TRUE(load_npz(directory / "none.npz").empty());
}

TEST(Npz, WritesAStoredZipOfNpyFilesTheSameEachTime) {
  TemporaryDirectory directory;
  const Tensor weight = from_vector<float>({1, 2, 3, 4}, {2, 2});
  save_npz(directory / "a.npz", {{"weight", weight}, {"bias", zeros({2})}});
  save_npz(directory / "b.npz", {{"weight", weight}, {"bias", zeros({2})}});
  const std::string bytes = read_file(directory / "a.npz");
  EXPECT_EQ(bytes, read_file(directory / "b.npz"));
  // The first local header: signature, version 2.0, no flags, stored, 1980-01-01, then the name and the
  // entry, which is the .npy file save_npy writes.
  EXPECT_EQ(bytes.substr(0, 14), std::string("PK\x03\x04\x14\x00\x00\x00\x00\x00\x00\x00\x21\x00", 14));
  EXPECT_EQ(bytes.substr(30, 10), "weight.npy");
  save_npy(directory / "weight.npy", weight);
  const std::string npy = read_file(directory / "weight.npy");
  EXPECT_EQ(bytes.substr(40, npy.size()), npy);
  // The sizes in the local header are those of the .npy file.
  std::uint32_t size = 0;
  std::memcpy(&size, bytes.data() + 22, 4);
  EXPECT_EQ(size, npy.size());
  // The end record: 2 entries.
  EXPECT_EQ(bytes.substr(bytes.size() - 22, 4), "PK\x05\x06");
  EXPECT_EQ(bytes[bytes.size() - 12], 2);
}

TEST(Npz, ReadsWhatNumpySavezWrote) {
  TemporaryDirectory directory;
  write_file(directory / "numpy.npz", fixture(numpy_savez, sizeof(numpy_savez)));
  const NamedTensors loaded = load_npz(directory / "numpy.npz");
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].first, "weight");
  EXPECT_TRUE(same_tensor(from_vector<float>({1.5f, -2, 3.25f, 4}, {2, 2}), loaded[0].second));
  EXPECT_EQ(loaded[1].first, "step");
  EXPECT_TRUE(same_tensor(full({}, 7, DType::i64), loaded[1].second));
  EXPECT_EQ(loaded[2].first, "mask");
  EXPECT_TRUE(same_tensor(from_vector<bool>({true, false, true}), loaded[2].second));
}

TEST(Npz, ReadsWhatNumpySavezCompressedWroteWhenBuiltWithZlib) {
  TemporaryDirectory directory;
  const auto path = directory / "compressed.npz";
  write_file(path, fixture(numpy_savez_compressed, sizeof(numpy_savez_compressed)));
  if (!npz_reads_compressed()) {
    const std::string message = error_of<IOError>([&] { load_npz(path); });
    EXPECT_TRUE(contains(message, "entry 'weight.npy': the entry is compressed")) << message;
    EXPECT_TRUE(contains(message, "without zlib")) << message;
    return;
  }
  const NamedTensors loaded = load_npz(path);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].first, "weight");
  EXPECT_TRUE(same_tensor(from_vector<float>({1.5f, -2, 3.25f, 4}, {2, 2}), loaded[0].second));
  EXPECT_TRUE(same_tensor(full({}, 7, DType::i64), loaded[1].second));
  EXPECT_TRUE(same_tensor(from_vector<bool>({true, false, true}), loaded[2].second));
}

TEST(Npz, Crc32MatchesTheStandardCheckValue) {
  const std::string digits = "123456789";
  const std::span<const unsigned char> bytes(reinterpret_cast<const unsigned char*>(digits.data()), digits.size());
  EXPECT_EQ(detail::crc32(bytes), 0xcbf43926u);
  EXPECT_EQ(detail::crc32(bytes.subspan(4), detail::crc32(bytes.subspan(0, 4))), 0xcbf43926u);
}

TEST(NpzErrors, BadArchivesSayWhatIsWrong) {
  TemporaryDirectory directory;
  const auto path = directory / "bad.npz";
  const std::string good = fixture(numpy_savez, sizeof(numpy_savez));
  auto message_for = [&](const std::string& bytes) {
    write_file(path, bytes);
    const std::string message = error_of<IOError>([&] { load_npz(path); });
    EXPECT_TRUE(contains(message, "load_npz: '" + path.string() + "'")) << message;
    return message;
  };
  EXPECT_TRUE(contains(message_for("not a zip at all"), "not an .npz file"));
  EXPECT_TRUE(contains(message_for(good.substr(0, good.size() / 2)), "not an .npz file"));
  EXPECT_TRUE(
      contains(message_for(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", std::string(8, '\0'))),
               "it is a single .npy array (read it with load_npy)"));
  EXPECT_TRUE(contains(error_of<IOError>([&] { load_npz(directory / "missing.npz"); }), "No such file"));

  // A flipped byte in the first entry's elements: its .npy starts at byte 60, after the name and NumPy's Zip64
  // extra field, and its 128-byte header.
  std::string flipped = good;
  flipped[200] ^= 0x40;
  EXPECT_TRUE(contains(message_for(flipped), "entry 'weight.npy': corrupt zip: the entry's CRC-32"));

  // The end record claims 0xffff entries: a Zip64 archive.
  std::string zip64 = good;
  zip64[zip64.size() - 12] = '\xff';
  zip64[zip64.size() - 11] = '\xff';
  zip64[zip64.size() - 14] = '\xff';
  zip64[zip64.size() - 13] = '\xff';
  EXPECT_TRUE(contains(message_for(zip64), "Zip64"));

  // The central directory said to start past the end record.
  std::string far = good;
  far[far.size() - 5] = 0x7f;
  EXPECT_TRUE(contains(message_for(far), "central directory"));

  // An entry that is not a .npy: rename weight.npy to weight.txt in the central directory.
  std::string renamed = good;
  const std::size_t central = renamed.rfind("weight.npy");
  renamed.replace(central, 10, "weight.txt");
  EXPECT_TRUE(contains(message_for(renamed), "entry 'weight.txt': not a .npy array"));

  // A deflate-method entry whose data is not deflate, or method 12 (bzip2).
  std::string method = good;
  method[good.find(std::string("PK\x01\x02", 4)) + 10] = 12;
  EXPECT_TRUE(contains(message_for(method), "compression method 12 is not one kiln reads"));
}

TEST(NpzErrors, NamesAndTensorsAreCheckedBeforeWriting) {
  TemporaryDirectory directory;
  const auto path = directory / "x.npz";
  const int line = __LINE__ + 1;
  const std::string repeated = error_of<ValueError>([&] { save_npz(path, {{"a", ones({1})}, {"a", ones({2})}}); });
  EXPECT_TRUE(contains(repeated, "save_npz: the name 'a' is given twice")) << repeated;
  EXPECT_TRUE(contains(repeated, this_file_line(line))) << repeated;
  EXPECT_TRUE(contains(error_of<ValueError>([&] { save_npz(path, {{"", ones({1})}}); }), "tensor 0 has an empty name"));
  EXPECT_TRUE(contains(error_of<ValueError>([&] {
                         save_npz(path, {{"a", ones({1})}, {"b", Tensor()}});
                       }),
                       "save_npz: the tensor is undefined"));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(contains(error_of<IOError>([&] {
                         save_npz(directory / "missing" / "x.npz", {{"a", ones({1})}});
                       }),
                       "save_npz: '" + (directory / "missing" / "x.npz").string() + "': cannot create"));
}

}  // namespace
}  // namespace kiln
