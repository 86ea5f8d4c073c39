#pragma once
// Waiting for and timing device work. CUDA kernels run asynchronously on one
// stream per GPU: an op returns once its work is queued, and reading a result
// on the host (to_vector, item, .to(Device::cpu())) waits for it. Benchmarks
// time GPU work with synchronize() around a call, or with Events recorded on
// the device's stream (like torch.cuda.Event(enable_timing=True)). On the CPU
// everything is synchronous: synchronize does nothing and Events read the
// steady clock.

#include <kiln/device.h>

#include <memory>

namespace kiln {

// Waits until all work queued on `device` has finished. Throws DeviceError
// for a device kiln cannot reach, or when queued work failed (the CUDA error
// of the failed kernel surfaces here).
void synchronize(Device device);

// A point in a device's stream of work.
class Event {
 public:
  explicit Event(Device device = Device::cpu());
  ~Event();
  Event(Event&&) noexcept;
  Event& operator=(Event&&) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the current end of the device's queued work (returns at once).
  void record();
  // Waits until the work before the last record() has finished.
  void wait() const;
  Device device() const { return device_; }

  // Milliseconds between two recorded events of one device (waits for `end`).
  friend double elapsed_milliseconds(const Event& start, const Event& end);

 private:
  struct State;
  Device device_;
  std::unique_ptr<State> state_;
};

double elapsed_milliseconds(const Event& start, const Event& end);

}  // namespace kiln
