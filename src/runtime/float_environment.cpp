#include "runtime/float_environment.h"

#include <kiln/config.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace kiln::runtime {
namespace {

#if defined(__x86_64__) || defined(__i386__)
constexpr std::uint32_t flush_to_zero = 1u << 15, denormals_are_zero = 1u << 6;
#else
constexpr std::uint32_t flush_to_zero = 0, denormals_are_zero = 0;
#endif
constexpr std::uint32_t flush_bits = flush_to_zero | denormals_are_zero;
// MXCSR's sticky exception flags (bits 0-5): status, not control. They are left as the arithmetic sets them.
constexpr std::uint32_t status_bits = 0x3f;

// `control`'s control bits with the calling thread's current status flags, written if they differ from now.
// Returns whether anything was written.
bool apply_control(std::uint32_t control) {
  const std::uint32_t now = float_control();
  const std::uint32_t wanted = (control & ~status_bits) | (now & status_bits);
  if (wanted == now) return false;
  set_float_control(wanted);
  return true;
}

}  // namespace

std::uint32_t float_control() {
#if defined(__x86_64__) || defined(__i386__)
  return _mm_getcsr();
#else
  return 0;
#endif
}

void set_float_control([[maybe_unused]] std::uint32_t control) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(control);
#endif
}

std::uint32_t computing_control() {
  const std::uint32_t control = float_control();
  return config::flush_denormals.load(std::memory_order_relaxed) ? (control | flush_bits) : (control & ~flush_bits);
}

ScopedFloatControl::ScopedFloatControl(std::uint32_t control) : previous_(float_control()) {
  changed_ = apply_control(control);
}

ScopedFloatControl::~ScopedFloatControl() {
  if (changed_) apply_control(previous_);
}

}  // namespace kiln::runtime
