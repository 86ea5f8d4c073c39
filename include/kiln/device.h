#pragma once
// Where a tensor lives. CUDA devices arrive with the CUDA backend; the type
// exists from the start so signatures and errors already carry it.

#include <string>

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

  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace kiln
