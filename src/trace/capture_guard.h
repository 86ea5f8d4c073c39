#pragma once
// Guards on the tensors a trace captured, as torch.compile guards the globals
// a frame read: a concrete function is reused only while every tensor it
// captured from the enclosing scope is still where the trace found it. C++
// gives no way to look a captured variable up again, so the guard watches the
// tensor instead, and changes when
//  - a Tensor handle holding it is assigned another tensor (`weight = w2;` on
//    a variable the callable captured by reference), or
//  - the tensor is released (its last handle destroyed).
// A handle to the same tensor reassigned elsewhere gives a needless retrace,
// never a stale result. Not seen: a handle destroyed without an assignment (a
// container's element erased, a new one inserted) while another handle keeps
// the old tensor alive; and captures that are not tensors (a double, an int),
// which a trace bakes in (README, "Sharp bits").

#include <atomic>
#include <cstdint>
#include <memory>

namespace kiln::trace {

// Part of every concrete tensor: whether a trace captured it, and how many
// times since then a Tensor handle holding it was assigned another tensor.
struct TensorIdentity {
  std::atomic<bool> captured{false};
  std::atomic<std::uint64_t> reassignments{0};
};

// Counts an assignment to a handle holding the tensor with `identity`, if a
// trace captured it (Tensor's assignment operators call this).
inline void note_reassignment(TensorIdentity& identity) {
  if (identity.captured.load(std::memory_order_acquire)) identity.reassignments.fetch_add(1);
}

// One captured tensor as its trace left it.
class CaptureGuard {
 public:
  // `identity` points into the captured tensor and shares its ownership (an
  // aliasing shared_ptr); the guard holds it weakly, so it keeps nothing alive.
  explicit CaptureGuard(const std::shared_ptr<TensorIdentity>& identity)
      : identity_(identity), reassignments_(identity->reassignments.load()) {}

  // Whether the tensor was released, or a handle holding it assigned another
  // tensor, since the guard was made.
  bool changed() const {
    std::shared_ptr<TensorIdentity> identity = identity_.lock();
    return !identity || identity->reassignments.load() != reassignments_;
  }

 private:
  std::weak_ptr<TensorIdentity> identity_;
  std::uint64_t reassignments_;
};

}  // namespace kiln::trace
