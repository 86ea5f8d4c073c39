#include <kiln/error.h>
#include <kiln/shape.h>

#include <ostream>

namespace kiln {

Shape::Shape(std::initializer_list<std::int64_t> dims) : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) {
  if (dims.size() > static_cast<std::size_t>(max_rank))
    throw ShapeError("Shape", "rank " + std::to_string(dims.size()) + " exceeds the maximum rank 8", std::string());
  rank_ = static_cast<int>(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0 && dims[i] != dynamic)
      throw ShapeError("Shape", "dimension " + std::to_string(i) + " is negative (" + std::to_string(dims[i]) + ")",
                       std::string());
    dims_[i] = dims[i];
  }
}

bool Shape::is_static() const {
  for (int i = 0; i < rank_; ++i)
    if (dims_[static_cast<std::size_t>(i)] == dynamic) return false;
  return true;
}

std::int64_t Shape::numel() const {
  std::int64_t count = 1;
  for (int i = 0; i < rank_; ++i) {
    std::int64_t dim = dims_[static_cast<std::size_t>(i)];
    if (dim == dynamic) return dynamic;
    count *= dim;
  }
  return count;
}

std::array<std::int64_t, Shape::max_rank> Shape::strides() const {
  std::array<std::int64_t, max_rank> strides{};
  std::int64_t stride = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    strides[static_cast<std::size_t>(i)] = stride;
    stride *= dims_[static_cast<std::size_t>(i)];
  }
  return strides;
}

std::string Shape::to_string() const {
  std::string text = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) text += ",";
    std::int64_t dim = dims_[static_cast<std::size_t>(i)];
    text += dim == dynamic ? std::string("?") : std::to_string(dim);
  }
  return text + "]";
}

std::ostream& operator<<(std::ostream& stream, const Shape& shape) { return stream << shape.to_string(); }

}  // namespace kiln
