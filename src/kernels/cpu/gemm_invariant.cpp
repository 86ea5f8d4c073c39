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

const float* InvariantOperands::find(const PackedOperandKey& key) const {
  const auto found = packings_.find(key);
  return found == packings_.end() ? nullptr : static_cast<const float*>(found->second->data());
}

float* InvariantOperands::add(const PackedOperandKey& key, std::size_t floats) {
  if (packings_.size() >= kMaxPackings) return nullptr;
  std::shared_ptr<runtime::Buffer>& buffer = packings_[key];
  buffer = runtime::allocate(Device::cpu(), std::max<std::size_t>(1, floats) * sizeof(float));
  return static_cast<float*>(buffer->data());
}

}  // namespace kiln::kernels::cpu
