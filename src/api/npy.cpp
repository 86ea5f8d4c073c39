#include "api/npy.h"

#include "api/tensor_impl.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

namespace kiln::detail {
namespace {

constexpr std::string_view magic = "\x93NUMPY";
// Data starts at a multiple of this many bytes, as numpy.save aligns it.
constexpr std::size_t data_alignment = 64;

// The descr of each dtype in a file: little-endian, '|' where byte order
// does not apply.
const char* descriptor(DType dtype) {
  switch (dtype) {
    case DType::boolean:
      return "|b1";
    case DType::i32:
      return "<i4";
    case DType::i64:
      return "<i8";
    case DType::f32:
      return "<f4";
    case DType::f64:
      return "<f8";
    case DType::f16:
      return "<f2";
    case DType::bf16:  // NumPy has none (save_npy refuses it)
      return "";
  }
  return "";
}

// The dtype a descr names; a DTypeError for one kiln has no dtype for.
DType dtype_of_descriptor(const std::string& descr, const FileOperation& operation) {
  for (DType dtype : {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64, DType::f16})
    if (descr == descriptor(dtype)) return dtype;
  // One-byte bools have no byte order; numpy writes '|', other writers may not.
  if (descr == "<b1" || descr == ">b1" || descr == "=b1") return DType::boolean;
  const std::string supported = "kiln reads '<f2', '<f4', '<f8', '<i4', '<i8' and '|b1'";
  if (descr.size() >= 3 && descr[0] == '>')
    operation.fail<DTypeError>("dtype '" + descr + "' is big-endian, which kiln does not read (" + supported +
                               "; convert with numpy: array.astype(array.dtype.newbyteorder('<')))");
  operation.fail<DTypeError>("dtype '" + descr + "' is not one kiln has (" + supported + ")");
}

// The header dict, as far as kiln needs it.
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

// Reads the Python dict literal of a header: string keys, and the three kinds
// of value numpy writes (a string, True/False, a tuple of integers).
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const FileOperation& operation) : text_(text), operation_(operation) {}

  Header parse() {
    Header header;
    bool has_descr = false, has_fortran_order = false, has_shape = false;
    expect('{');
    while (true) {
      skip_spaces();
      if (peek() == '}') break;
      const std::string key = string_literal();
      expect(':');
      skip_spaces();
      if (key == "descr") {
        note_key(has_descr, key);
        if (peek() == '[')
          operation_.fail<DTypeError>(
              "the array has a structured dtype (descr is a list of fields); kiln reads "
              "arrays of one element type");
        header.descr = string_literal();
      } else if (key == "fortran_order") {
        note_key(has_fortran_order, key);
        header.fortran_order = boolean_literal();
      } else if (key == "shape") {
        note_key(has_shape, key);
        header.shape = shape_tuple();
      } else {
        malformed("unknown key '" + key + "'");
      }
      skip_spaces();
      if (peek() != ',') break;
      ++position_;
    }
    expect('}');
    skip_spaces();
    if (position_ != text_.size()) malformed("text after the closing '}'");
    if (!has_descr || !has_fortran_order || !has_shape)
      malformed("it lacks " + std::string(!has_descr ? "'descr'" : !has_fortran_order ? "'fortran_order'" : "'shape'"));
    return header;
  }

 private:
  [[noreturn]] void malformed(const std::string& what) const {
    constexpr std::size_t shown = 200;
    std::string text(text_.substr(0, shown));
    if (text_.size() > shown) text += "...";
    operation_.fail<IOError>("malformed .npy header (" + what + " at character " + std::to_string(position_) + "): \"" +
                             text + "\"");
  }
  char peek() const { return position_ < text_.size() ? text_[position_] : '\0'; }
  void skip_spaces() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\n')) ++position_;
  }
  void expect(char wanted) {
    skip_spaces();
    if (peek() != wanted) malformed(std::string("expected '") + wanted + "'");
    ++position_;
  }
  void note_key(bool& seen, const std::string& key) const {
    if (seen) malformed("key '" + key + "' given twice");
    seen = true;
  }
  // 'text' or "text", without escapes (numpy's keys and descrs have none).
  std::string string_literal() {
    const char quote = peek();
    if (quote != '\'' && quote != '"') malformed("expected a string");
    const std::size_t end = text_.find(quote, position_ + 1);
    if (end == std::string_view::npos) malformed("an unterminated string");
    std::string value(text_.substr(position_ + 1, end - position_ - 1));
    if (value.find('\\') != std::string::npos) malformed("an escape in a string");
    position_ = end + 1;
    return value;
  }
  bool boolean_literal() {
    for (std::string_view word : {"True", "False"}) {
      if (text_.substr(position_, word.size()) == word) {
        position_ += word.size();
        return word == "True";
      }
    }
    malformed("expected True or False");
  }
  // (), (4,), (2, 3): dimensions as Python prints them (Python 2 wrote 3L).
  std::vector<std::int64_t> shape_tuple() {
    std::vector<std::int64_t> shape;
    expect('(');
    while (true) {
      skip_spaces();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') malformed("expected a dimension");
      std::int64_t dimension = 0;
      while (peek() >= '0' && peek() <= '9') {
        const int digit = peek() - '0';
        if (dimension > (std::numeric_limits<std::int64_t>::max() - digit) / 10) malformed("a dimension too large");
        dimension = dimension * 10 + digit;
        ++position_;
      }
      if (peek() == 'L') ++position_;
      shape.push_back(dimension);
      skip_spaces();
      if (peek() != ',') break;
      ++position_;
    }
    expect(')');
    return shape;
  }

  std::string_view text_;
  const FileOperation& operation_;
  std::size_t position_ = 0;
};

// The row-major (C order) copy of elements stored in Fortran order, where
// the first index varies fastest.
void reorder_fortran(const unsigned char* source, unsigned char* destination, const Shape& shape,
                     std::size_t element_bytes) {
  const int rank = shape.rank();
  std::array<std::int64_t, Shape::max_rank> fortran_strides{};
  std::int64_t stride = 1;
  for (int axis = 0; axis < rank; ++axis) {
    fortran_strides[static_cast<std::size_t>(axis)] = stride;
    stride *= shape[axis];
  }
  std::array<std::int64_t, Shape::max_rank> index{};
  std::int64_t source_element = 0;
  const std::int64_t count = shape.numel();
  for (std::int64_t element = 0; element < count; ++element) {
    std::memcpy(destination + static_cast<std::size_t>(element) * element_bytes,
                source + static_cast<std::size_t>(source_element) * element_bytes, element_bytes);
    // Steps to the next row-major index (the last axis fastest), moving the
    // Fortran-order position along.
    for (int axis = rank - 1; axis >= 0; --axis) {
      const auto a = static_cast<std::size_t>(axis);
      if (++index[a] < shape[axis]) {
        source_element += fortran_strides[a];
        break;
      }
      source_element -= (shape[axis] - 1) * fortran_strides[a];
      index[a] = 0;
    }
  }
}

// "(2, 3)", as the header wrote the shape.
std::string python_tuple(std::span<const std::int64_t> shape) {
  std::string text = "(";
  for (std::size_t axis = 0; axis < shape.size(); ++axis) text += (axis ? ", " : "") + std::to_string(shape[axis]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

// Little-endian unsigned integer of `bytes` bytes.
std::uint32_t little_endian(const unsigned char* bytes, int count) {
  std::uint32_t value = 0;
  for (int i = count - 1; i >= 0; --i) value = value << 8 | bytes[i];
  return value;
}

}  // namespace

std::string npy_header(DType dtype, const Shape& shape) {
  std::string dict = "{'descr': '" + std::string(descriptor(dtype)) +
                     "', 'fortran_order': False, 'shape': " + python_tuple(shape.dims()) + ", }";
  // Version 1.0 stores the header length in 2 bytes, 2.0 in 4; the 64-byte
  // alignment counts the magic and version (8 bytes) and the length too.
  const bool version_1 = 8 + 2 + dict.size() + data_alignment <= 65535;
  const std::size_t preamble = version_1 ? 10 : 12;
  dict.append(data_alignment - 1 - (preamble + dict.size()) % data_alignment, ' ');
  dict += '\n';
  std::string header(magic);
  header += version_1 ? '\x01' : '\x02';
  header += '\x00';
  const std::size_t length = dict.size();
  for (std::size_t i = 0; i < preamble - 8; ++i) header += static_cast<char>(length >> (8 * i) & 0xff);
  return header + dict;
}

Tensor read_npy(std::istream& stream, std::uint64_t size, const FileOperation& operation) {
  unsigned char preamble[12];
  const std::uint64_t magic_bytes = std::min<std::uint64_t>(size, magic.size());
  read_exactly(stream, preamble, magic_bytes, operation, "the magic string");
  if (magic_bytes < magic.size() || std::memcmp(preamble, magic.data(), magic.size()) != 0)
    operation.fail<IOError>("not a .npy file: it does not start with the magic string \"\\x93NUMPY\"");

  if (size < 8) operation.fail<IOError>("truncated: the file ends inside the format version");
  read_exactly(stream, preamble + 6, 2, operation, "the format version");
  const int major = preamble[6], minor = preamble[7];
  if (major < 1 || major > 3 || minor != 0)
    operation.fail<IOError>("format version " + std::to_string(major) + "." + std::to_string(minor) +
                            " is not one kiln reads (1.0, 2.0 and 3.0)");
  const int length_bytes = major == 1 ? 2 : 4;
  const std::uint64_t preamble_bytes = 8 + static_cast<std::uint64_t>(length_bytes);
  if (size < preamble_bytes) operation.fail<IOError>("truncated: the file ends inside the header length");
  read_exactly(stream, preamble + 8, static_cast<std::uint64_t>(length_bytes), operation, "the header length");
  const std::uint64_t header_bytes = little_endian(preamble + 8, length_bytes);
  if (header_bytes > size - preamble_bytes)
    operation.fail<IOError>("truncated: the header says it is " + std::to_string(header_bytes) +
                            " bytes long, and only " + std::to_string(size - preamble_bytes) + " follow");
  std::string text(header_bytes, '\0');
  read_exactly(stream, text.data(), header_bytes, operation, "the header");

  const Header header = HeaderParser(text, operation).parse();
  const DType dtype = dtype_of_descriptor(header.descr, operation);
  if (header.shape.size() > static_cast<std::size_t>(Shape::max_rank))
    operation.fail<ShapeError>("shape " + python_tuple(header.shape) + " has rank " +
                               std::to_string(header.shape.size()) + "; kiln tensors have at most " +
                               std::to_string(Shape::max_rank) + " dimensions");
  // Checked before anything is allocated, so that a corrupt shape cannot ask for terabytes.
  std::uint64_t data_bytes = size_of(dtype);
  for (std::int64_t dimension : header.shape)
    if (__builtin_mul_overflow(data_bytes, static_cast<std::uint64_t>(dimension), &data_bytes))
      data_bytes = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t available = size - preamble_bytes - header_bytes;
  if (data_bytes != available)
    operation.fail<IOError>(std::string(data_bytes > available ? "truncated: " : "") + "shape " +
                            python_tuple(header.shape) + " of '" + header.descr + "' needs " +
                            std::to_string(data_bytes) + " bytes of data, and the file holds " +
                            std::to_string(available) + " after the header");

  const Shape shape(std::span<const std::int64_t>(header.shape));
  runtime::Array array = runtime::allocate_array(dtype, shape, Device::cpu());
  auto* elements = static_cast<unsigned char*>(array.mutable_raw());
  if (header.fortran_order && shape.rank() > 1) {
    std::vector<unsigned char> fortran(data_bytes);
    read_exactly(stream, fortran.data(), data_bytes, operation, "the data");
    reorder_fortran(fortran.data(), elements, shape, size_of(dtype));
  } else {
    read_exactly(stream, elements, data_bytes, operation, "the data");
  }
  if (dtype == DType::boolean) normalize_booleans(elements, data_bytes);
  return make_tensor(std::move(array));
}

}  // namespace kiln::detail
