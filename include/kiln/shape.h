#pragma once
// Tensor shapes: rank 0 (a scalar) to 8, dimensions >= 0.
//
// Shapes are static (XLA semantics): every value of a traced graph has a
// shape known at trace time. The one exception is a dimension produced by an
// op whose output size depends on data (kiln::nonzero): inside a traced graph
// it is `Shape::dynamic` ("?" when printed); concrete tensors never have one,
// and a graph holding one always runs on the standard executor.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>

namespace kiln {

class Shape {
 public:
  static constexpr int max_rank = 8;
  static constexpr std::int64_t dynamic = -1;

  Shape() = default;  // rank 0: a scalar
  // Throws kiln::ShapeError for rank > 8 or a negative dimension other than
  // `dynamic`.
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);

  int rank() const { return rank_; }
  std::int64_t operator[](int axis) const { return dims_[static_cast<std::size_t>(axis)]; }
  std::int64_t& operator[](int axis) { return dims_[static_cast<std::size_t>(axis)]; }
  std::span<const std::int64_t> dims() const { return {dims_.data(), static_cast<std::size_t>(rank_)}; }
  // Number of elements; 1 for a scalar, 0 if any dimension is 0, `dynamic`
  // if any dimension is.
  std::int64_t numel() const;
  bool is_static() const;
  // Row-major element strides (in elements, not bytes).
  std::array<std::int64_t, max_rank> strides() const;

  // "[2,3]" ("[]" for a scalar).
  std::string to_string() const;
  // Prints what to_string gives.
  friend std::ostream& operator<<(std::ostream& stream, const Shape& shape);

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[static_cast<std::size_t>(i)] != b.dims_[static_cast<std::size_t>(i)]) return false;
    return true;
  }

 private:
  std::array<std::int64_t, max_rank> dims_{};
  int rank_ = 0;
};

}  // namespace kiln
