// The public device API (kiln/device.h, kiln/cuda.h): discovery,
// synchronize, events. Built with and without CUDA support; without it there
// is only the CPU.

#include <kiln/cuda.h>
#include <kiln/device.h>
#include <kiln/error.h>

#if KILN_HAVE_CUDA
#include "runtime/cuda/cuda_context.h"
#endif

#include <chrono>

namespace kiln {

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> result;
  result.push_back(DeviceInfo{.device = Device::cpu(), .name = "cpu"});
#if KILN_HAVE_CUDA
  for (int index = 0; index < runtime::cuda::device_count(); ++index) {
    const cudaDeviceProp& properties = runtime::cuda::context(Device::cuda(index), "kiln::devices").properties;
    result.push_back(DeviceInfo{.device = Device::cuda(index),
                                .name = properties.name,
                                .memory_bytes = static_cast<std::int64_t>(properties.totalGlobalMem),
                                .compute_capability = properties.major * 10 + properties.minor,
                                .multiprocessors = properties.multiProcessorCount});
  }
#endif
  return result;
}

std::string cuda_unavailable_reason() {
#if KILN_HAVE_CUDA
  return runtime::cuda::unavailable_reason();
#else
  return "kiln was built without CUDA support (configure with -DKILN_CUDA=ON on a machine with the CUDA toolkit)";
#endif
}

#if !KILN_HAVE_CUDA
namespace {

[[noreturn]] void no_cuda(const char* op, Device device) {
  throw DeviceError(op, device.to_string() + " is not available: " + cuda_unavailable_reason(), std::string());
}

}  // namespace
#endif

void synchronize(Device device) {
  if (device.is_cpu()) return;
#if KILN_HAVE_CUDA
  runtime::cuda::synchronize(device, "kiln::synchronize");
#else
  no_cuda("kiln::synchronize", device);
#endif
}

struct Event::State {
  std::chrono::steady_clock::time_point time;  // CPU events
  bool recorded = false;
#if KILN_HAVE_CUDA
  cudaEvent_t event = nullptr;  // CUDA events, created on first record()
#endif
};

Event::Event(Device device) : device_(device), state_(std::make_unique<State>()) {
#if KILN_HAVE_CUDA
  if (device.is_cuda()) runtime::cuda::context(device, "kiln::Event");  // a bad device fails here
#else
  if (device.is_cuda()) no_cuda("kiln::Event", device);
#endif
}

Event::~Event() {
#if KILN_HAVE_CUDA
  if (state_ && state_->event) (void)cudaEventDestroy(state_->event);
#endif
}

Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
#if KILN_HAVE_CUDA
    if (state_ && state_->event) (void)cudaEventDestroy(state_->event);
#endif
    device_ = other.device_;
    state_ = std::move(other.state_);
  }
  return *this;
}

void Event::record() {
  if (!state_) throw ValueError("kiln::Event::record", "the event was moved from", std::string());
  if (device_.is_cpu()) {
    state_->time = std::chrono::steady_clock::now();
    state_->recorded = true;
    return;
  }
#if KILN_HAVE_CUDA
  runtime::cuda::DeviceContext& context = runtime::cuda::context(device_, "kiln::Event::record");
  runtime::cuda::DeviceGuard guard(context.index);
  if (!state_->event) runtime::cuda::check(cudaEventCreate(&state_->event), "cudaEventCreate", "kiln::Event::record");
  runtime::cuda::check(cudaEventRecord(state_->event, context.stream), "cudaEventRecord", "kiln::Event::record");
  state_->recorded = true;  // only once it is: a failed record leaves "never recorded"
#endif
}

void Event::wait() const {
  if (!state_ || !state_->recorded) throw ValueError("kiln::Event::wait", "the event was never recorded", std::string());
#if KILN_HAVE_CUDA
  if (device_.is_cuda()) {
    runtime::cuda::DeviceGuard guard(device_.index);
    runtime::cuda::check(cudaEventSynchronize(state_->event), "cudaEventSynchronize", "kiln::Event::wait");
  }
#endif
}

double elapsed_milliseconds(const Event& start, const Event& end) {
  const char* op = "kiln::elapsed_milliseconds";
  if (!(start.device_ == end.device_))
    throw DeviceError(op, "the events are on different devices (" + start.device_.to_string() + " and " +
                              end.device_.to_string() + ")",
                      std::string());
  if (!start.state_ || !end.state_ || !start.state_->recorded || !end.state_->recorded)
    throw ValueError(op, "both events must be recorded", std::string());
  if (start.device_.is_cpu())
    return std::chrono::duration<double, std::milli>(end.state_->time - start.state_->time).count();
  float milliseconds = 0;
#if KILN_HAVE_CUDA
  end.wait();
  runtime::cuda::check(cudaEventElapsedTime(&milliseconds, start.state_->event, end.state_->event),
                       "cudaEventElapsedTime", op);
#endif
  return milliseconds;
}

}  // namespace kiln
