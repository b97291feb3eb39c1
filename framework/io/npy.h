// NumPy .npy files: debug dumps and test fixtures that Python reads with numpy.load.
//
// write_npy writes format 1.0 (2.0 when the header does not fit 64 KiB), little-endian, C order.
// read_npy reads formats 1.0 to 3.0 with C order; the supported element types are
// '<f4' F32, '<f8' F64, '<f2' F16, '<i8' I64, '<i4' I32, '<i2' I16, '|i1' I8, '|u1' U8, '|b1' BOOL.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "framework/core/tensor.h"

namespace mg {

// Throws mg::Error naming the path for tensors numpy has no type for (BF16, F8) and I/O errors.
void write_npy(const std::filesystem::path& path, const Tensor& tensor);

// Returns a new CPU tensor. Throws mg::Error naming the path for anything but a well-formed file
// of a supported type in C order.
Tensor read_npy(const std::filesystem::path& path);
// read_npy on bytes in memory; `name` stands for the file in error messages.
Tensor parse_npy(std::span<const uint8_t> bytes, std::string_view name);

}  // namespace mg
