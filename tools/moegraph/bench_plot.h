// The figure of `moegraph bench moe --png` / `bench plot`: one panel per shape, % of the floor
// (0-100) against the token count on a log axis, one line per backend. Drawn into an RGB raster
// with a built-in 5x7 font and written as PNG (framework/io/png.h): no plotting library needed.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

namespace mg::cli {

// `results`: the JSON `bench moe --json` writes. Throws mg::Error naming `png` on a write failure
// or what is missing in `results`.
void plot_moe_bench(const nlohmann::json& results, const std::filesystem::path& png);

}  // namespace mg::cli
