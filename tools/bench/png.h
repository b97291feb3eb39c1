// A minimal PNG writer for plots (8-bit RGB, no compression: zlib "stored" blocks), so that the
// benchmarks can draw a figure without an image library.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace mg {

// The PNG file's bytes for an RGB image of width x height, rows top to bottom, 3 bytes a pixel.
std::vector<uint8_t> encode_png_rgb(int width, int height, std::span<const uint8_t> rgb);

// Writes encode_png_rgb(...) to `path`; throws mg::Error naming the file when it cannot.
void write_png_rgb(const std::filesystem::path& path, int width, int height,
                   std::span<const uint8_t> rgb);

}  // namespace mg
