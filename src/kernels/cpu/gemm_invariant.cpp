#include "kernels/cpu/gemm_invariant.h"

#include "runtime/buffer.h"

#include <kiln/device.h>

#include <algorithm>

namespace kiln::kernels::cpu {
namespace {

thread_local InvariantOperands* innermost = nullptr;

}  // namespace

InvariantOperands::InvariantOperands(std::vector<std::span<const std::byte>> ranges)
    : ranges_(std::move(ranges)), enclosing_(innermost) {
  innermost = this;
}

InvariantOperands::~InvariantOperands() { innermost = enclosing_; }

InvariantOperands* InvariantOperands::current() { return innermost; }

bool InvariantOperands::contains(const void* begin, std::size_t bytes) const {
  const auto* first = static_cast<const std::byte*>(begin);
  return std::any_of(ranges_.begin(), ranges_.end(), [&](std::span<const std::byte> range) {
    return first >= range.data() && bytes <= range.size() &&
           static_cast<std::size_t>(first - range.data()) <= range.size() - bytes;
  });
}

const float* InvariantOperands::packed(const PackedOperandKey& key, std::size_t floats,
                                       const std::function<void(float*)>& pack) {
  if (!packings_.contains(key) && packings_.size() >= kMaxPackings) return nullptr;
  std::shared_ptr<runtime::Buffer>& buffer = packings_[key];
  if (!buffer) {
    auto made = runtime::allocate(Device::cpu(), std::max<std::size_t>(1, floats) * sizeof(float));
    pack(static_cast<float*>(made->data()));
    buffer = std::move(made);  // only once packed: a pack that throws leaves no half-made entry behind
  }
  return static_cast<const float*>(buffer->data());
}

}  // namespace kiln::kernels::cpu
