#include "framework/io/json.h"

#include <gtest/gtest.h>

#include "tests/testing/test_util.h"
#include "tests/unit/io/io_test_util.h"

namespace mg {
namespace {

using testing::temp_dir;
using testing::throws_error_with;
using testing::write_bytes;

constexpr std::string_view kConfig = R"({
  "model_type": "mixtral",
  "hidden_size": 4096,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "num_local_experts": 8,
  "tie_word_embeddings": false,
  "sliding_window": null,
  "layer_types": [0, 1, 1],
  "big": 18446744073709551615,
  "text": "4096"
})";

class JsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = temp_dir("json") / "config.json";
    write_bytes(path_, kConfig);
    config_ = load_json_file(path_);
  }
  std::filesystem::path path_;
  nlohmann::json config_;
};

TEST_F(JsonTest, TypedGettersReadValues) {
  EXPECT_EQ(json_string(config_, "model_type", path_), "mixtral");
  EXPECT_EQ(json_int(config_, "hidden_size", path_), 4096);
  EXPECT_DOUBLE_EQ(json_double(config_, "rms_norm_eps", path_), 1e-5);
  EXPECT_DOUBLE_EQ(json_double(config_, "hidden_size", path_), 4096.0) << "integers are numbers";
  EXPECT_FALSE(json_bool(config_, "tie_word_embeddings", path_));
  EXPECT_EQ(json_int_array(config_, "layer_types", path_), (std::vector<int64_t>{0, 1, 1}));
}

TEST_F(JsonTest, OptionalGettersTreatMissingAndNullAsUnset) {
  EXPECT_EQ(json_int_opt(config_, "sliding_window", path_), std::nullopt);
  EXPECT_EQ(json_int_opt(config_, "absent", path_), std::nullopt);
  EXPECT_EQ(json_int_opt(config_, "num_local_experts", path_), 8);
  EXPECT_EQ(json_double_opt(config_, "rope_theta", path_), 1e6);
  EXPECT_EQ(json_bool_opt(config_, "absent", path_), std::nullopt);
  EXPECT_EQ(json_string_opt(config_, "model_type", path_), "mixtral");
  EXPECT_TRUE(throws_error_with([&] { json_int_opt(config_, "text", path_); },
                                {"config.json: key 'text': expected an integer, found a string "
                                 "\"4096\""}));
}

TEST_F(JsonTest, RequiredGettersNameFileAndKey) {
  EXPECT_TRUE(throws_error_with([&] { json_int(config_, "num_experts", path_); },
                                {"config.json: missing key 'num_experts' (expected an integer)"}));
  EXPECT_TRUE(throws_error_with([&] { json_int(config_, "sliding_window", path_); },
                                {"config.json: key 'sliding_window': expected an integer, found "
                                 "null"}));
  EXPECT_TRUE(throws_error_with([&] { json_int(config_, "rope_theta", path_); },
                                {"config.json: key 'rope_theta': expected an integer, found a "
                                 "number 1000000.0"}));
  EXPECT_TRUE(throws_error_with([&] { json_int(config_, "big", path_); },
                                {"config.json: key 'big': integer 18446744073709551615 is out of "
                                 "range"}));
  EXPECT_TRUE(throws_error_with([&] { json_bool(config_, "hidden_size", path_); },
                                {"config.json: key 'hidden_size': expected true or false"}));
  EXPECT_TRUE(throws_error_with([&] { json_string(config_, "hidden_size", path_); },
                                {"config.json: key 'hidden_size': expected a string, found an "
                                 "integer 4096"}));
  EXPECT_TRUE(throws_error_with([&] { json_double(config_, "text", path_); },
                                {"config.json: key 'text': expected a number"}));
  EXPECT_TRUE(throws_error_with([&] { json_int_array(config_, "hidden_size", path_); },
                                {"config.json: key 'hidden_size': expected an array of integers"}));
  EXPECT_TRUE(throws_error_with([&] { json_int(config_["layer_types"], "x", path_); },
                                {"config.json: expected a JSON object holding key 'x', found an "
                                 "array"}));
}

TEST_F(JsonTest, IntArrayNamesTheBadElement) {
  const nlohmann::json obj = nlohmann::json::parse(R"({"dims": [1, 2.5, 3]})");
  EXPECT_TRUE(throws_error_with([&] { json_int_array(obj, "dims", path_); },
                                {"config.json: key 'dims': element 1: expected an integer, found a "
                                 "number 2.5"}));
}

TEST_F(JsonTest, ParseErrorsNameFileLineAndColumn) {
  write_bytes(path_, "{\n  \"a\": 1,\n  \"b\": tru\n}");
  EXPECT_TRUE(throws_error_with([&] { load_json_file(path_); },
                                {"config.json:3:11: syntax error", "invalid literal"}));
  write_bytes(path_, "{\"a\": \"\xff\"}");
  EXPECT_TRUE(throws_error_with([&] { load_json_file(path_); },
                                {"config.json:1:8:", "ill-formed UTF-8", "\\xff"}));
  write_bytes(path_, "{\"a\": 1");
  EXPECT_TRUE(throws_error_with([&] { load_json_file(path_); }, {"config.json:1:8:"}));
  write_bytes(path_, std::string(1000, '[') + std::string(1000, ']'));
  EXPECT_TRUE(throws_error_with([&] { load_json_file(path_); },
                                {"config.json: JSON nested deeper than 256 levels"}));
  EXPECT_TRUE(throws_error_with([&] { load_json_file(path_.parent_path() / "absent.json"); },
                                {"absent.json: file not found"}));
}

}  // namespace
}  // namespace mg
