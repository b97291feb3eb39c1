#include "tools/bench/png.h"

#include <array>

#include "framework/core/error.h"
#include "framework/io/regular_file.h"

namespace mg {

namespace {

uint32_t crc32(std::span<const uint8_t> data, uint32_t crc = 0) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (uint8_t b : data) crc = table[(crc ^ b) & 0xff] ^ (crc >> 8);
  return ~crc;
}

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void put_chunk(std::vector<uint8_t>& out, const char (&type)[5], std::span<const uint8_t> data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32(out, crc32(std::span(out).subspan(start)));
}

}  // namespace

std::vector<uint8_t> encode_png_rgb(int width, int height, std::span<const uint8_t> rgb) {
  MG_CHECK(width > 0 && height > 0, "PNG: bad size {}x{}", width, height);
  MG_CHECK(rgb.size() == static_cast<size_t>(width) * height * 3,
           "PNG: {}x{} RGB needs {} bytes, got {}", width, height,
           static_cast<size_t>(width) * height * 3, rgb.size());
  // Scanlines, each with filter byte 0 (none).
  std::vector<uint8_t> raw;
  raw.reserve((static_cast<size_t>(width) * 3 + 1) * height);
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    const auto row =
        rgb.subspan(static_cast<size_t>(y) * width * 3, static_cast<size_t>(width) * 3);
    raw.insert(raw.end(), row.begin(), row.end());
  }
  // zlib stream of stored deflate blocks (at most 65535 bytes each) + Adler-32.
  std::vector<uint8_t> z = {0x78, 0x01};
  for (size_t pos = 0; pos < raw.size() || raw.empty();) {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    z.push_back(last ? 1 : 0);
    z.push_back(static_cast<uint8_t>(n & 0xff));
    z.push_back(static_cast<uint8_t>(n >> 8));
    z.push_back(static_cast<uint8_t>(~n & 0xff));
    z.push_back(static_cast<uint8_t>((~n >> 8) & 0xff));
    z.insert(z.end(), raw.begin() + pos, raw.begin() + pos + n);
    pos += n;
    if (last) break;
  }
  uint32_t a = 1, b = 0;
  for (uint8_t v : raw) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  put_u32(z, (b << 16) | a);

  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, static_cast<uint32_t>(width));
  put_u32(ihdr, static_cast<uint32_t>(height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, no filter, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", {});
  return out;
}

void write_png_rgb(const std::filesystem::path& path, int width, int height,
                   std::span<const uint8_t> rgb) {
  const std::vector<uint8_t> bytes = encode_png_rgb(width, height, rgb);
  const std::span<const uint8_t> piece(bytes);
  write_file_atomically(path, std::span<const std::span<const uint8_t>>(&piece, 1));
}

}  // namespace mg
