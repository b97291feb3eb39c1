// Device identity: where a buffer lives and where a kernel runs.
#pragma once

#include <string>
#include <string_view>

namespace mg {

enum class DeviceType { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index) { return {DeviceType::kCUDA, index}; }
  // Parses "cpu", "cuda", "cuda:N"; throws mg::Error naming the text otherwise.
  static Device parse(std::string_view text);

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  // "cpu" or "cuda:N"
  std::string str() const;
  bool operator==(const Device&) const = default;
};

}  // namespace mg
