#include "framework/device/device.h"

#include <charconv>

#include "framework/core/error.h"

namespace mg {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view num = text.substr(5);
    int index = -1;
    auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (ec == std::errc() && ptr == num.data() + num.size() && index >= 0) return cuda(index);
  }
  MG_FAIL("unknown device '{}' (expected cpu, cuda or cuda:N)", text);
}

std::string Device::str() const {
  switch (type) {
    case DeviceType::kCPU:
      return "cpu";
    case DeviceType::kCUDA:
      return fmt::format("cuda:{}", index);
  }
  return "?";
}

}  // namespace mg
