// The PNG writer: signature, chunk layout and CRCs, and the pixels read back from the zlib
// stream of stored blocks (more than one block for a large image).
#include <gtest/gtest.h>

#include <cstring>

#include "framework/core/error.h"
#include "tools/bench/png.h"

namespace mg {
namespace {

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// An independent bitwise CRC-32 (the writer uses a table).
uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  return ~c;
}

struct Chunk {
  std::string type;
  std::vector<uint8_t> data;
};

std::vector<Chunk> chunks_of(const std::vector<uint8_t>& png) {
  const uint8_t signature[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_EQ(std::memcmp(png.data(), signature, 8), 0);
  std::vector<Chunk> out;
  for (size_t pos = 8; pos < png.size();) {
    const uint32_t len = be32(&png[pos]);
    Chunk c{std::string(reinterpret_cast<const char*>(&png[pos + 4]), 4),
            std::vector<uint8_t>(png.begin() + pos + 8, png.begin() + pos + 8 + len)};
    EXPECT_EQ(be32(&png[pos + 8 + len]), crc32_bitwise(&png[pos + 4], len + 4)) << c.type;
    out.push_back(std::move(c));
    pos += 12 + len;
  }
  return out;
}

// The filtered scanlines from a zlib stream of stored deflate blocks.
std::vector<uint8_t> inflate_stored(const std::vector<uint8_t>& z) {
  std::vector<uint8_t> out;
  size_t pos = 2;
  while (true) {
    const bool last = z[pos] & 1;
    EXPECT_EQ(z[pos] >> 1, 0) << "not a stored block";
    const uint16_t len = static_cast<uint16_t>(z[pos + 1] | (z[pos + 2] << 8));
    const uint16_t nlen = static_cast<uint16_t>(z[pos + 3] | (z[pos + 4] << 8));
    EXPECT_EQ(static_cast<uint16_t>(~len), nlen);
    out.insert(out.end(), z.begin() + pos + 5, z.begin() + pos + 5 + len);
    pos += 5 + len;
    if (last) break;
  }
  uint32_t a = 1, b = 0;
  for (uint8_t v : out) {
    a = (a + v) % 65521;
    b = (b + a) % 65521;
  }
  EXPECT_EQ(be32(&z[pos]), (b << 16) | a) << "Adler-32";
  return out;
}

TEST(Png, PixelsRoundTripThroughTheStoredZlibStream) {
  for (auto [w, h] : {std::pair{1, 1}, std::pair{7, 3}, std::pair{300, 200}}) {
    std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 37 + 11);
    const std::vector<Chunk> c = chunks_of(encode_png_rgb(w, h, rgb));
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c[0].type, "IHDR");
    EXPECT_EQ(be32(&c[0].data[0]), static_cast<uint32_t>(w));
    EXPECT_EQ(be32(&c[0].data[4]), static_cast<uint32_t>(h));
    EXPECT_EQ(c[0].data[8], 8);  // bit depth
    EXPECT_EQ(c[0].data[9], 2);  // RGB
    EXPECT_EQ(c[1].type, "IDAT");
    EXPECT_EQ(c[2].type, "IEND");
    const std::vector<uint8_t> raw = inflate_stored(c[1].data);
    ASSERT_EQ(raw.size(), static_cast<size_t>(w * 3 + 1) * h);
    for (int y = 0; y < h; ++y) {
      EXPECT_EQ(raw[static_cast<size_t>(y) * (w * 3 + 1)], 0) << "filter byte of row " << y;
      EXPECT_EQ(std::memcmp(&raw[static_cast<size_t>(y) * (w * 3 + 1) + 1],
                            &rgb[static_cast<size_t>(y) * w * 3], static_cast<size_t>(w) * 3),
                0)
          << "row " << y;
    }
  }
}

TEST(Png, BadSizesAndUnwritablePathsAreErrors) {
  EXPECT_THROW(encode_png_rgb(2, 2, std::vector<uint8_t>(5)), Error);
  EXPECT_THROW(encode_png_rgb(0, 2, {}), Error);
  try {
    write_png_rgb("/nonexistent-dir/x.png", 1, 1, std::vector<uint8_t>(3));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.png"), std::string::npos);
  }
}

}  // namespace
}  // namespace mg
