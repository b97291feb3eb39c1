#include "tools/moegraph/bench_plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "tools/bench/png.h"

namespace mg::cli {

namespace {

struct Rgb {
  uint8_t r, g, b;
};

// 5x7 glyphs, one 5-bit row each (bit 4 = leftmost pixel). Upper case draws as lower case.
const std::map<char, std::array<uint8_t, 7>>& font() {
  static const std::map<char, std::array<uint8_t, 7>> glyphs = {
      {'a', {0x00, 0x00, 0x0e, 0x01, 0x0f, 0x11, 0x0f}},
      {'b', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1e}},
      {'c', {0x00, 0x00, 0x0e, 0x10, 0x10, 0x11, 0x0e}},
      {'d', {0x01, 0x01, 0x0d, 0x13, 0x11, 0x11, 0x0f}},
      {'e', {0x00, 0x00, 0x0e, 0x11, 0x1f, 0x10, 0x0e}},
      {'f', {0x06, 0x09, 0x08, 0x1c, 0x08, 0x08, 0x08}},
      {'g', {0x00, 0x0f, 0x11, 0x11, 0x0f, 0x01, 0x0e}},
      {'h', {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11}},
      {'i', {0x04, 0x00, 0x0c, 0x04, 0x04, 0x04, 0x0e}},
      {'j', {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0c}},
      {'k', {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12}},
      {'l', {0x0c, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e}},
      {'m', {0x00, 0x00, 0x1a, 0x15, 0x15, 0x11, 0x11}},
      {'n', {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11}},
      {'o', {0x00, 0x00, 0x0e, 0x11, 0x11, 0x11, 0x0e}},
      {'p', {0x00, 0x00, 0x1e, 0x11, 0x1e, 0x10, 0x10}},
      {'q', {0x00, 0x00, 0x0d, 0x13, 0x0f, 0x01, 0x01}},
      {'r', {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10}},
      {'s', {0x00, 0x00, 0x0e, 0x10, 0x0e, 0x01, 0x1e}},
      {'t', {0x08, 0x08, 0x1c, 0x08, 0x08, 0x09, 0x06}},
      {'u', {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0d}},
      {'v', {0x00, 0x00, 0x11, 0x11, 0x11, 0x0a, 0x04}},
      {'w', {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0a}},
      {'x', {0x00, 0x00, 0x11, 0x0a, 0x04, 0x0a, 0x11}},
      {'y', {0x00, 0x00, 0x11, 0x11, 0x0f, 0x01, 0x0e}},
      {'z', {0x00, 0x00, 0x1f, 0x02, 0x04, 0x08, 0x1f}},
      {'0', {0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e}},
      {'1', {0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e}},
      {'2', {0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f}},
      {'3', {0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e}},
      {'4', {0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02}},
      {'5', {0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e}},
      {'6', {0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e}},
      {'7', {0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
      {'8', {0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e}},
      {'9', {0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c}},
      {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
      {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c}},
      {'-', {0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00}},
      {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1f}},
      {':', {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x0c, 0x00}},
      {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}},
      {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
      {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
  };
  return glyphs;
}

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * h * 3, 255) {}

  void dot(int x, int y, Rgb c) {
    if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
    uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
    p[0] = c.r;
    p[1] = c.g;
    p[2] = c.b;
  }
  void rect(int x0, int y0, int x1, int y1, Rgb c) {
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) dot(x, y, c);
    }
  }
  // Bresenham, `width` pixels thick.
  void line(int x0, int y0, int x1, int y1, Rgb c, int width = 1) {
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    while (true) {
      rect(x0 - width / 2, y0 - width / 2, x0 + (width - 1) / 2, y0 + (width - 1) / 2, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) {
        err += dy;
        x0 += sx;
      }
      if (e2 <= dx) {
        err += dx;
        y0 += sy;
      }
    }
  }
  // Text with its top-left corner at (x, y); `scale` pixels per font pixel; returns the width.
  int text(int x, int y, const std::string& s, Rgb c, int scale = 2) {
    int cx = x;
    for (char ch : s) {
      const char lower = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      auto it = font().find(lower);
      if (it != font().end()) {
        for (int row = 0; row < 7; ++row) {
          for (int col = 0; col < 5; ++col) {
            if (it->second[row] & (0x10 >> col)) {
              rect(cx + col * scale, y + row * scale, cx + (col + 1) * scale - 1,
                   y + (row + 1) * scale - 1, c);
            }
          }
        }
      }
      cx += 6 * scale;
    }
    return cx - x;
  }
  void save(const std::filesystem::path& path) const { write_png_rgb(path, w_, h_, px_); }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

const Rgb kColors[] = {{31, 119, 180}, {255, 127, 14},  {44, 160, 44},
                       {214, 39, 40},  {148, 103, 189}, {140, 86, 75}};
const Rgb kInk{30, 30, 30}, kGrid{215, 215, 215};

}  // namespace

void plot_moe_bench(const nlohmann::json& results, const std::filesystem::path& png) {
  MG_CHECK(results.contains("points") && results["points"].is_array(),
           "bench plot: the results have no 'points' array");
  std::vector<std::string> shapes, backends;
  // shape -> backend -> [(tokens, % of floor)]
  std::map<std::string, std::map<std::string, std::vector<std::pair<double, double>>>> series;
  double max_tokens = 1;
  for (const auto& p : results["points"]) {
    MG_CHECK(p.contains("shape") && p.contains("backend") && p.contains("tokens") &&
                 p.contains("pct_of_floor"),
             "bench plot: a point lacks shape, backend, tokens or pct_of_floor: {}", p.dump());
    const std::string shape = p["shape"], backend = p["backend"];
    if (std::find(shapes.begin(), shapes.end(), shape) == shapes.end()) shapes.push_back(shape);
    if (std::find(backends.begin(), backends.end(), backend) == backends.end()) {
      backends.push_back(backend);
    }
    const double tokens = p["tokens"].get<double>();
    max_tokens = std::max(max_tokens, tokens);
    series[shape][backend].emplace_back(tokens, p["pct_of_floor"].get<double>());
  }
  MG_CHECK(!shapes.empty(), "bench plot: no points to plot");

  const int cols = shapes.size() > 1 ? 2 : 1;
  const int rows = static_cast<int>((shapes.size() + cols - 1) / cols);
  const int pw = 600, ph = 380, top = 60;
  Canvas c(cols * pw, top + rows * ph);
  int lx = 20;
  c.text(lx, 12, "moegraph bench moe: % of the floor vs tokens", kInk);
  for (size_t b = 0; b < backends.size(); ++b) {
    const Rgb color = kColors[b % std::size(kColors)];
    const int x = 20 + static_cast<int>(b) * 200;
    c.rect(x, 38, x + 16, 48, color);
    c.text(x + 22, 36, backends[b], kInk);
  }
  const double log_max = std::max(1.0, std::log2(max_tokens));
  for (size_t s = 0; s < shapes.size(); ++s) {
    const int ox = static_cast<int>(s % cols) * pw, oy = top + static_cast<int>(s / cols) * ph;
    const int x0 = ox + 70, x1 = ox + pw - 40, y0 = oy + ph - 50, y1 = oy + 40;
    c.text(ox + 70, oy + 12, shapes[s], kInk);
    auto px = [&](double tokens) {
      return x0 + static_cast<int>((x1 - x0) * std::log2(std::max(1.0, tokens)) / log_max);
    };
    auto py = [&](double pct) {
      return y0 - static_cast<int>((y0 - y1) * std::clamp(pct, 0.0, 100.0) / 100.0);
    };
    for (int pct = 0; pct <= 100; pct += 25) {
      c.line(x0, py(pct), x1, py(pct), kGrid);
      const std::string label = std::to_string(pct) + "%";
      c.text(x0 - 10 - 12 * static_cast<int>(label.size()), py(pct) - 7, label, kInk);
    }
    std::vector<double> ticks;
    for (const auto& [backend, pts] : series[shapes[s]]) {
      for (const auto& pt : pts) ticks.push_back(pt.first);
    }
    std::sort(ticks.begin(), ticks.end());
    ticks.erase(std::unique(ticks.begin(), ticks.end()), ticks.end());
    for (double t : ticks) {
      c.line(px(t), y0, px(t), y1, kGrid);
      const std::string label = std::to_string(static_cast<long long>(t));
      c.text(px(t) - 6 * static_cast<int>(label.size()), y0 + 8, label, kInk);
    }
    c.line(x0, y0, x1, y0, kInk);
    c.line(x0, y0, x0, y1, kInk);
    c.text(x1 - 72, y0 + 28, "tokens", kInk);
    for (size_t b = 0; b < backends.size(); ++b) {
      auto it = series[shapes[s]].find(backends[b]);
      if (it == series[shapes[s]].end()) continue;
      std::vector<std::pair<double, double>> pts = it->second;
      std::sort(pts.begin(), pts.end());
      const Rgb color = kColors[b % std::size(kColors)];
      for (size_t i = 0; i < pts.size(); ++i) {
        const int x = px(pts[i].first), y = py(pts[i].second);
        c.rect(x - 3, y - 3, x + 3, y + 3, color);
        if (i > 0) c.line(px(pts[i - 1].first), py(pts[i - 1].second), x, y, color, 2);
      }
    }
  }
  c.save(png);
}

}  // namespace mg::cli
