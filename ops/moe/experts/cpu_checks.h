// Support checks shared by the CPU expert backends (each returns "" or the reason).
#pragma once

#include <string>

#include "framework/device/device.h"
#include "ops/moe/config.h"

namespace mg {

inline std::string cpu_check_device(Device device) {
  return device.is_cpu() ? std::string() : "runs on the CPU only, not " + device.str();
}

inline std::string cpu_check_quant(const MoEQuantConfig& quant) {
  return quant == MoEQuantConfig::unquantized(DType::kF32)
             ? std::string()
             : "supports unquantized F32 weights and activations only, not " + quant.str();
}

}  // namespace mg
