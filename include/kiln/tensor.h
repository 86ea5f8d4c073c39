#pragma once
// kiln::Tensor: an immutable, dense, row-major array with a dtype, a static
// shape and a device. Copies are cheap (the storage is shared), and since no
// op mutates storage, sharing is never observable.
//
// Inside kiln::function a Tensor may be *traced*: it stands for a value of the
// graph being traced and has a shape and dtype but no data yet.

#include <kiln/device.h>
#include <kiln/dtype.h>
#include <kiln/error.h>
#include <kiln/shape.h>

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <source_location>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln {

using Location = std::source_location;

namespace detail {
struct TensorImpl;
// Counts an assignment to a handle of a tensor that a kiln::function captured.
void note_reassignment(const TensorImpl& impl) noexcept;
}  // namespace detail

class Tensor {
 public:
  // An undefined tensor (what a default-constructed std::vector<Tensor> holds).
  Tensor() = default;
  explicit Tensor(std::shared_ptr<const detail::TensorImpl> impl) : impl_(std::move(impl)) {}
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  ~Tensor() = default;
  // Assigning another tensor to a variable is how a captured variable
  // changes: a kiln::function that captured this handle's tensor traces again
  // at its next call, and sees the new one.
  Tensor& operator=(const Tensor& other) {
    if (impl_ && impl_ != other.impl_) detail::note_reassignment(*impl_);
    impl_ = other.impl_;
    return *this;
  }
  Tensor& operator=(Tensor&& other) noexcept {
    if (impl_ && impl_ != other.impl_) detail::note_reassignment(*impl_);
    impl_ = std::move(other.impl_);
    return *this;
  }

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  const Shape& shape() const;
  Device device() const;
  int rank() const { return shape().rank(); }
  std::int64_t numel() const { return shape().numel(); }
  // Size of one dimension; negative axes count from the end.
  std::int64_t dim(int axis, Location location = Location::current()) const;
  // True for a tensor of a graph being traced (no data yet).
  bool is_traced() const;

  // Copies the elements out (converted to T). Throws ValueError on a traced
  // tensor: inside kiln::function values do not exist until the graph runs.
  template <class T> std::vector<T> to_vector(Location location = Location::current()) const;
  // The single element of a one-element tensor, converted to T.
  template <class T> T item(Location location = Location::current()) const;
  // Host pointer to the elements of a concrete CPU tensor (read-only).
  const void* data(Location location = Location::current()) const;

  // A copy on `device` (the same tensor if it is there already).
  Tensor to(Device device, Location location = Location::current()) const;

  // Readable printing: "f32[2,3] cpu\n[[1, 2, 3],\n [4, 5, 6]]", long
  // dimensions summarized with "..." as NumPy does.
  std::string to_string() const;
  friend std::ostream& operator<<(std::ostream& stream, const Tensor& tensor);

  const detail::TensorImpl& impl() const { return *impl_; }
  const std::shared_ptr<const detail::TensorImpl>& impl_pointer() const { return impl_; }

 private:
  std::shared_ptr<const detail::TensorImpl> impl_;
};

// A number used as an operand (`x * 0.5`, `where(c, x, 0)`). Scalars are
// weakly typed, as in JAX: they take the tensor's dtype unless a float scalar
// meets an integer or bool tensor, which then computes in f32.
class Scalar {
 public:
  template <class T>
    requires std::is_arithmetic_v<T>
  Scalar(T value)  // NOLINT: implicit on purpose
      : value_(static_cast<double>(value)),
        integer_(static_cast<std::int64_t>(value)),
        kind_(std::is_same_v<T, bool>        ? DType::boolean
              : std::is_floating_point_v<T> ? DType::f64
                                            : DType::i64) {}

  double as_double() const { return value_; }
  std::int64_t as_int() const { return integer_; }
  // boolean, i64 (any integer) or f64 (any float): the weak kind.
  DType kind() const { return kind_; }

 private:
  double value_;
  std::int64_t integer_;
  DType kind_;
};

// An operator operand with the user's source location. Overloaded operators
// cannot take default arguments; an implicit conversion can, so `a + b`
// still reports the line it was written on.
struct Operand {
  Operand(const Tensor& tensor, Location location = Location::current())  // NOLINT
      : tensor(tensor), location(location) {}
  Tensor tensor;
  Location location;
};

extern template std::vector<float> Tensor::to_vector<float>(Location) const;
extern template std::vector<double> Tensor::to_vector<double>(Location) const;
extern template std::vector<std::int32_t> Tensor::to_vector<std::int32_t>(Location) const;
extern template std::vector<std::int64_t> Tensor::to_vector<std::int64_t>(Location) const;
extern template std::vector<std::uint8_t> Tensor::to_vector<std::uint8_t>(Location) const;
extern template std::vector<bool> Tensor::to_vector<bool>(Location) const;
extern template float Tensor::item<float>(Location) const;
extern template double Tensor::item<double>(Location) const;
extern template std::int32_t Tensor::item<std::int32_t>(Location) const;
extern template std::int64_t Tensor::item<std::int64_t>(Location) const;
extern template bool Tensor::item<bool>(Location) const;

}  // namespace kiln
