#include "tools/moegraph/flag_checks.h"

#include <fmt/format.h>

namespace mg::cli {

CLI::Validator int_range(int64_t min, int64_t max) {
  const std::string range = fmt::format("[{}, {}]", min, max);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        int64_t value = 0;
        if (!CLI::detail::lexical_cast(text, value)) {
          return fmt::format("'{}' is not an integer in {}", text, range);
        }
        if (value < min || value > max) return fmt::format("{} is out of range {}", text, range);
        return "";
      },
      "in " + range);
}

CLI::Validator non_negative_u64() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        if (text.find('-') != std::string::npos || !CLI::detail::lexical_cast(text, value)) {
          return fmt::format("'{}' is not an integer in [0, {}]", text, UINT64_MAX);
        }
        return "";
      },
      fmt::format("in [0, {}]", UINT64_MAX));
}

namespace {

constexpr std::pair<const char*, QuantElement> kIntElements[] = {{"int4", QuantElement::kInt4},
                                                                 {"uint4", QuantElement::kUInt4},
                                                                 {"int8", QuantElement::kInt8},
                                                                 {"uint8", QuantElement::kUInt8}};
constexpr std::pair<const char*, int64_t> kIntGroups[] = {
    {"g32", 32}, {"g64", 64}, {"g128", 128}, {"channel", -1}};

}  // namespace

std::optional<std::pair<QuantElement, int64_t>> parse_int_quant(const std::string& text) {
  const size_t dash = text.find('-');
  if (dash == std::string::npos) return std::nullopt;
  const std::string element = text.substr(0, dash), group = text.substr(dash + 1);
  for (const auto& [el_name, el] : kIntElements) {
    if (element != el_name) continue;
    for (const auto& [group_name, g] : kIntGroups) {
      if (group == group_name) return std::pair{el, g};
    }
  }
  return std::nullopt;
}

std::vector<std::string> int_quant_names() {
  std::vector<std::string> names;
  for (const auto& [el_name, el] : kIntElements) {
    for (const auto& [group_name, g] : kIntGroups) {
      names.push_back(std::string(el_name) + "-" + group_name);
    }
  }
  return names;
}

}  // namespace mg::cli
