// Helpers for the I/O tests: raw files and error-message checks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "framework/core/error.h"

namespace mg::testing {

// Writes `bytes` to `path` verbatim.
inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A safetensors file from its parts: u64 LE header length, `header` verbatim, then `data`.
inline std::string safetensors_bytes(std::string_view header, std::string_view data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += data;
  return out;
}

// Success when `fn` throws mg::Error whose message holds every one of `parts`; failure (with the
// message) when it throws something else, throws nothing, or the message lacks a part.
template <typename Fn>
::testing::AssertionResult throws_error_with(Fn&& fn,
                                             std::initializer_list<std::string_view> parts) {
  try {
    fn();
  } catch (const mg::Error& e) {
    const std::string what = e.what();
    for (std::string_view part : parts) {
      if (what.find(part) == std::string::npos) {
        return ::testing::AssertionFailure()
               << "mg::Error message \"" << what << "\" does not contain \"" << part << "\"";
      }
    }
    return ::testing::AssertionSuccess() << what;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw something other than mg::Error: " << e.what();
  }
  return ::testing::AssertionFailure() << "threw nothing";
}

}  // namespace mg::testing
