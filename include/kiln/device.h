#pragma once
// Where a tensor lives: the CPU or one CUDA GPU (Device::cuda(n)), and which
// devices this process can use.

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace kiln {

enum class DeviceKind { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceKind::cuda, index}; }

  bool is_cpu() const { return kind == DeviceKind::cpu; }
  bool is_cuda() const { return kind == DeviceKind::cuda; }
  // "cpu" or "cuda:0".
  std::string to_string() const;
  // Prints what to_string gives.
  friend std::ostream& operator<<(std::ostream& stream, const Device& device);

  friend bool operator==(const Device&, const Device&) = default;
};

// ---- kiln-cuda: device discovery ---------------------------------------------
// What kiln knows about a device it can use.
struct DeviceInfo {
  Device device;
  std::string name;                 // "cpu", or the GPU's name ("NVIDIA H200")
  std::int64_t memory_bytes = 0;    // the GPU's total memory; 0 for the CPU
  int compute_capability = 0;       // major * 10 + minor (90 for sm_90); 0 for the CPU
  int multiprocessors = 0;          // streaming multiprocessors; 0 for the CPU
};

// The devices kiln can use: the CPU first, then each CUDA GPU found, in CUDA's
// order (cuda:0, cuda:1, ...). Only the CPU when kiln was built without CUDA
// support or no GPU is visible; cuda_unavailable_reason() then says why.
std::vector<DeviceInfo> devices();
// Why kiln has no CUDA device ("kiln was built without CUDA support",
// "cudaGetDeviceCount: no CUDA-capable device is detected", ...), or an empty
// string when it has at least one.
std::string cuda_unavailable_reason();

}  // namespace kiln
