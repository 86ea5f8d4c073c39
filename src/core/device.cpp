#include <kiln/device.h>

namespace kiln {

std::string Device::to_string() const {
  return kind == DeviceKind::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

}  // namespace kiln
