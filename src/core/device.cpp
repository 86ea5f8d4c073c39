#include <kiln/device.h>

#include <ostream>

namespace kiln {

std::string Device::to_string() const {
  return kind == DeviceKind::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& stream, const Device& device) { return stream << device.to_string(); }

}  // namespace kiln
