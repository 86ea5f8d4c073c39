// save_safetensors/load_safetensors (include/kiln/tensor_files.h): round
// trips, the exact bytes kiln writes, hand-written files as the safetensors
// library writes them, and a strict check of every part of the header.

#include "support/files.h"
#include "support/test_support.h"

#include <gtest/gtest.h>
#include <kiln/kiln.h>

namespace kiln {
namespace {

using testing::error_of;
using testing::random_tensor;
using testing::read_file;
using testing::same_tensor;
using testing::TemporaryDirectory;
using testing::write_file;

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

template <class T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A safetensors file: the header's length in 8 little-endian bytes, the
// header padded with spaces to a multiple of 8, the data.
std::string safetensors_file(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file;
  for (int i = 0; i < 8; ++i) file += static_cast<char>(header.size() >> (8 * i) & 0xff);
  return file + header + data;
}

TEST(Safetensors, RoundTripsEveryDtypeInOrderWithMetadata) {
  TemporaryDirectory directory;
  NamedTensors tensors;
  std::uint64_t seed = 40;
  for (DType dtype : {DType::f64, DType::boolean, DType::i32, DType::f32, DType::i64}) {
    const std::string name(to_string(dtype));
    tensors.emplace_back(name + ".weight", random_tensor(dtype, {3, 5}, seed++));
    tensors.emplace_back(name + ".scalar", random_tensor(dtype, {}, seed++));
    tensors.emplace_back(name + ".empty", random_tensor(dtype, {0, 4}, seed++));
  }
  tensors.emplace_back("large", random_tensor(DType::f32, {256, 1000}, seed++));
  tensors.emplace_back("transposed", transpose(random_tensor(DType::i32, {4, 6}, seed++)));
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "quote \" backslash \\ tab \t é"}};
  save_safetensors(directory / "model.safetensors", tensors, metadata);

  const NamedTensors loaded = load_safetensors(directory / "model.safetensors");
  ASSERT_EQ(loaded.size(), tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(loaded[i].first, tensors[i].first);
    EXPECT_TRUE(same_tensor(tensors[i].second, loaded[i].second)) << tensors[i].first;
  }
  EXPECT_EQ(load_safetensors_metadata(directory / "model.safetensors"), metadata);

  save_safetensors(directory / "empty.safetensors", {});
  EXPECT_TRUE(load_safetensors(directory / "empty.safetensors").empty());
  EXPECT_TRUE(load_safetensors_metadata(directory / "empty.safetensors").empty());
}

TEST(Safetensors, WritesTheExpectedBytes) {
  TemporaryDirectory directory;
  // A 54-byte header padded with 2 spaces to 56 (0x38), then the 8 bytes of data.
  save_safetensors(directory / "x.safetensors", {{"x", from_vector<float>({1, 2})}});
  EXPECT_EQ(read_file(directory / "x.safetensors"), std::string("\x38\0\0\0\0\0\0\0", 8) +
                                                        R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" +
                                                        "  " + bytes_of(std::vector<float>{1, 2}));

  // With metadata first; a bool scalar is one byte. 143 bytes of header padded to 144 (0x90).
  save_safetensors(directory / "y.safetensors",
                   {{"x", from_vector<float>({1, 2})}, {"flag", full({}, true, DType::boolean)}}, {{"format", "kiln"}});
  EXPECT_EQ(read_file(directory / "y.safetensors"),
            std::string("\x90\0\0\0\0\0\0\0", 8) +
                R"({"__metadata__":{"format":"kiln"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)" +
                R"("flag":{"dtype":"BOOL","shape":[],"data_offsets":[8,9]}})" + " " +
                bytes_of(std::vector<float>{1, 2}) + "\x01");
}

TEST(Safetensors, ReadsAFileAsTheSafetensorsLibraryWritesIt) {
  TemporaryDirectory directory;
  // Tensors listed in another order than their data, escapes in a name, whitespace in the JSON.
  const std::string header =
      "{\"__metadata__\": {\"format\": \"pt\"},\n"
      " \"caf\\u00e9\": {\"dtype\": \"I64\", \"shape\": [3], \"data_offsets\": [16, 40]},\n"
      " \"a.weight\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}";
  const std::string data =
      bytes_of(std::vector<float>{1, 2, 3, 4}) + bytes_of(std::vector<std::int64_t>{-5, 6, 1LL << 40});
  write_file(directory / "torch.safetensors", safetensors_file(header, data));
  const NamedTensors loaded = load_safetensors(directory / "torch.safetensors");
  ASSERT_EQ(loaded.size(), 2u);
  EXPECT_EQ(loaded[0].first, "caf\xc3\xa9");
  EXPECT_TRUE(same_tensor(from_vector<std::int64_t>({-5, 6, 1LL << 40}), loaded[0].second));
  EXPECT_EQ(loaded[1].first, "a.weight");
  EXPECT_TRUE(same_tensor(from_vector<float>({1, 2, 3, 4}, {2, 2}), loaded[1].second));
  EXPECT_EQ(load_safetensors_metadata(directory / "torch.safetensors"),
            (std::map<std::string, std::string>{{"format", "pt"}}));

  // Bool bytes other than 0 are true.
  write_file(
      directory / "flags.safetensors",
      safetensors_file(R"({"f":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x00\x07\x01", 3)));
  EXPECT_EQ(load_safetensors(directory / "flags.safetensors")[0].second.to_vector<std::uint8_t>(),
            (std::vector<std::uint8_t>{0, 1, 1}));
}

TEST(SafetensorsErrors, FilesThatAreNotSafetensors) {
  TemporaryDirectory directory;
  const auto path = directory / "bad.safetensors";
  const int line = __LINE__ + 1;
  const std::string missing = error_of<IOError>([&] { load_safetensors(directory / "missing.safetensors"); });
  EXPECT_TRUE(contains(missing, "kiln::IOError: load_safetensors: '" + (directory / "missing.safetensors").string() +
                                    "': cannot open: No such file"))
      << missing;
  EXPECT_TRUE(contains(missing, "safetensors_test.cpp:" + std::to_string(line))) << missing;

  auto message_for = [&](const std::string& bytes) {
    write_file(path, bytes);
    const std::string message = error_of<IOError>([&] { load_safetensors(path); });
    EXPECT_TRUE(contains(message, "load_safetensors: '" + path.string() + "'")) << message;
    return message;
  };
  EXPECT_TRUE(contains(message_for("abc"), "truncated: the file is 3 bytes long"));
  EXPECT_TRUE(contains(message_for(std::string("\xff\0\0\0\0\0\0\0{}", 10)),
                       "the header length 255 is larger than the 2 bytes that follow it"));
  // A .npy file: its first 8 bytes read as an enormous length.
  EXPECT_TRUE(contains(message_for(std::string("\x93NUMPY\x01\x00\x76\x00{'descr'", 18)), "is larger than the"));
  EXPECT_TRUE(contains(message_for(safetensors_file("[]", "")), "the header is an array, not an object"));
  EXPECT_TRUE(contains(
      message_for(safetensors_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},})", std::string(4, '\0'))),
      "the header is not valid JSON: expected a string key at byte"));
  EXPECT_TRUE(contains(message_for(safetensors_file(R"({"a":1,"a":2})", "")), "repeated key \"a\""));
}

TEST(SafetensorsErrors, HeaderEntriesAreCheckedStrictly) {
  TemporaryDirectory directory;
  const auto path = directory / "bad.safetensors";
  auto message_for = [&](const std::string& entry, std::size_t data_bytes = 16) {
    write_file(path, safetensors_file("{\"t\":" + entry + "}", std::string(data_bytes, '\0')));
    const std::string message = error_of<IOError>([&] { load_safetensors(path); });
    EXPECT_TRUE(contains(message, "load_safetensors: '" + path.string() + "': tensor 't': ")) << message;
    return message;
  };
  EXPECT_TRUE(contains(message_for("[1]"), "expected an object in the header, found an array"));
  EXPECT_TRUE(contains(message_for(R"({"dtype":"F32","shape":[4],"data_offsets":[0,16],"extra":1})"),
                       "unknown field \"extra\""));
  EXPECT_TRUE(contains(message_for(R"({"dtype":"F32","shape":[4]})"), "lacks its data_offsets"));
  EXPECT_TRUE(contains(message_for(R"({"dtype":4,"shape":[4],"data_offsets":[0,16]})"), "dtype is not a string"));
  EXPECT_TRUE(contains(message_for(R"({"dtype":"F32","shape":[-4],"data_offsets":[0,16]})"),
                       "shape holds something other than a non-negative integer"));
  EXPECT_TRUE(contains(message_for(R"({"dtype":"F32","shape":[4.0],"data_offsets":[0,16]})"),
                       "shape holds something other than a non-negative integer"));
  EXPECT_TRUE(contains(message_for(R"({"dtype":"F32","shape":[4],"data_offsets":[0]})"),
                       "data_offsets is not a pair of non-negative integers"));
  EXPECT_TRUE(contains(message_for(R"({"dtype":"F32","shape":[4],"data_offsets":[16,0]})"), "end before they begin"));
  EXPECT_TRUE(contains(message_for(R"({"dtype":"F32","shape":[2,2],"data_offsets":[0,12]})", 12),
                       "shape [2,2] of F32 needs 16 bytes, and its data_offsets [0,12] hold 12"));
  EXPECT_TRUE(contains(message_for(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]})"),
                       "needs 18446744073709551615 bytes"));

  write_file(path,
             safetensors_file(R"({"t":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", std::string(2, '\0')));
  const std::string fp8 = error_of<DTypeError>([&] { load_safetensors(path); });
  EXPECT_TRUE(contains(
      fp8, "tensor 't': dtype F8_E4M3 is not one kiln has (kiln reads F32, F64, BF16, F16, I32, I64 and BOOL)"))
      << fp8;
  write_file(path, safetensors_file(R"({"t":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
                                    std::string(4, '\0')));
  EXPECT_TRUE(contains(error_of<ShapeError>([&] { load_safetensors(path); }), "has rank 9"));
  write_file(path, safetensors_file(R"({"__metadata__":{"epoch":3}})", ""));
  EXPECT_TRUE(contains(error_of<IOError>([&] { load_safetensors_metadata(path); }),
                       "__metadata__ \"epoch\" is a number, not a string"));
}

TEST(SafetensorsErrors, DataOffsetsMustCoverTheDataExactlyOnce) {
  TemporaryDirectory directory;
  const auto path = directory / "bad.safetensors";
  auto message_for = [&](const std::string& a, const std::string& b, std::size_t data_bytes) {
    write_file(path, safetensors_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + a +
                                          R"(},"b":{"dtype":"F32","shape":[2],"data_offsets":)" + b + "}}",
                                      std::string(data_bytes, '\0')));
    return error_of<IOError>([&] { load_safetensors(path); });
  };
  EXPECT_TRUE(contains(message_for("[0,8]", "[4,12]", 12), "the data of tensors 'a' and 'b' overlap"));
  EXPECT_TRUE(contains(message_for("[0,8]", "[0,8]", 8), "overlap"));
  EXPECT_TRUE(contains(message_for("[0,8]", "[12,20]", 20), "bytes 8 to 12 of the data belong to no tensor"));
  EXPECT_TRUE(contains(message_for("[0,8]", "[8,16]", 12),
                       "truncated: tensor 'b' ends at byte 16 of the data, and the file holds 12"));
  EXPECT_TRUE(contains(message_for("[0,8]", "[8,16]", 20), "the file holds 4 bytes after the last tensor's data"));
}

TEST(SafetensorsErrors, SavingChecksNamesAndTensorsFirst) {
  TemporaryDirectory directory;
  const auto path = directory / "x.safetensors";
  const int line = __LINE__ + 1;
  const std::string reserved = error_of<ValueError>([&] { save_safetensors(path, {{"__metadata__", ones({1})}}); });
  EXPECT_TRUE(contains(reserved, "save_safetensors: the name __metadata__ is the format's own")) << reserved;
  EXPECT_TRUE(contains(reserved, "safetensors_test.cpp:" + std::to_string(line))) << reserved;
  EXPECT_TRUE(contains(error_of<ValueError>([&] {
                         save_safetensors(path, {{"a", ones({1})}, {"a", ones({1})}});
                       }),
                       "the name 'a' is given twice"));
  EXPECT_TRUE(contains(error_of<ValueError>([&] {
                         save_safetensors(path, {{"bad\xff", ones({1})}});
                       }),
                       "not valid UTF-8"));
  EXPECT_TRUE(contains(error_of<ValueError>([&] {
                         save_safetensors(path, {}, {{"k", "\xc0\xaf"}});
                       }),
                       "not valid UTF-8"));
  auto f = function([&](Tensor x) {
    save_safetensors(path, {{"x", x}});
    return x;
  });
  EXPECT_TRUE(contains(error_of<ValueError>([&] { f(ones({3})); }),
                       "save_safetensors: cannot read the value of traced tensor f32[3]"));
  EXPECT_FALSE(std::filesystem::exists(path));
  const auto unwritable = directory / "missing" / "x.safetensors";
  EXPECT_TRUE(contains(error_of<IOError>([&] {
                         save_safetensors(unwritable, {{"a", ones({1})}});
                       }),
                       "save_safetensors: '" + unwritable.string() + "': cannot create"));
  EXPECT_FALSE(std::filesystem::exists(unwritable));
}

}  // namespace
}  // namespace kiln
