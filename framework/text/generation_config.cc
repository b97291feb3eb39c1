#include "framework/text/generation_config.h"

#include <limits>

#include "framework/core/error.h"
#include "framework/io/json.h"

namespace mg::text {

std::vector<int32_t> read_generation_eos_ids(const std::filesystem::path& path) {
  const nlohmann::json root = load_json_file(path);
  MG_CHECK(root.is_object(), "{}: expected a JSON object, found {}", path.string(),
           json_type_phrase(root));
  const auto it = root.find("eos_token_id");
  if (it == root.end() || it->is_null()) return {};
  const auto is_id = [](const nlohmann::json& v) {
    return v.is_number_integer() && v.get<int64_t>() >= 0 &&
           v.get<int64_t>() <= std::numeric_limits<int32_t>::max();
  };
  std::vector<int32_t> ids;
  if (is_id(*it)) {
    ids.push_back(static_cast<int32_t>(it->get<int64_t>()));
    return ids;
  }
  MG_CHECK(it->is_array() && it->size() <= kMaxEosIds,
           "{}: key 'eos_token_id': expected a token id or a list of at most {} ids, found {}",
           path.string(), kMaxEosIds, json_brief(*it));
  for (const nlohmann::json& v : *it) {
    MG_CHECK(is_id(v),
             "{}: key 'eos_token_id': {} is not a token id (expected an integer in [0, "
             "2147483647])",
             path.string(), json_brief(v));
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace mg::text
