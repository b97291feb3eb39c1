#include "framework/parallel/launch_env.h"

#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/core/error.h"

namespace mg {
namespace {

using ::testing::HasSubstr;

std::optional<LaunchEnv> parse(const std::map<std::string, std::string>& vars, int max = 64) {
  return LaunchEnv::parse(
      [&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      max);
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    parse(vars);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

const std::map<std::string, std::string> kGood = {{"RANK", "3"},
                                                  {"WORLD_SIZE", "8"},
                                                  {"LOCAL_RANK", "1"},
                                                  {"LOCAL_WORLD_SIZE", "2"},
                                                  {"MASTER_ADDR", "node0.example"},
                                                  {"MASTER_PORT", "29501"}};

std::map<std::string, std::string> with(std::string name, std::string value) {
  auto vars = kGood;
  vars[name] = value;
  return vars;
}

std::map<std::string, std::string> without(const std::string& name) {
  auto vars = kGood;
  vars.erase(name);
  return vars;
}

TEST(LaunchEnv, NotLaunchedWhenNeitherRankNorWorldSizeIsSet) {
  EXPECT_FALSE(parse({}).has_value());
  EXPECT_FALSE(parse({{"MASTER_ADDR", "x"}}).has_value());
}

TEST(LaunchEnv, ParsesEveryTorchrunVariable) {
  const std::optional<LaunchEnv> env = parse(kGood);
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "node0.example");
  EXPECT_EQ(env->master_port, 29501);
  EXPECT_EQ(env->str(), "rank 3 of 8 (local 1 of 2), store node0.example:29501");
}

TEST(LaunchEnv, LocalValuesDefaultFromTheGlobalOnes) {
  auto vars = without("LOCAL_RANK");
  vars.erase("LOCAL_WORLD_SIZE");
  const std::optional<LaunchEnv> env = parse(vars);
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->local_world_size, 8);
}

TEST(LaunchEnv, OneProcessNeedsNoStoreAddress) {
  const std::optional<LaunchEnv> env = parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->master_port, kDefaultMasterPort);
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  EXPECT_THAT(error_of(without("WORLD_SIZE")), HasSubstr("RANK is set but WORLD_SIZE is not"));
  EXPECT_THAT(error_of(without("RANK")), HasSubstr("WORLD_SIZE is set but RANK is not"));
  EXPECT_THAT(error_of(with("RANK", "8")), HasSubstr("RANK=8 is out of range [0, 7]"));
  EXPECT_THAT(error_of(with("RANK", "-1")), HasSubstr("RANK=-1 is out of range"));
  EXPECT_THAT(error_of(with("RANK", "1x")), HasSubstr("RANK='1x' is not a whole number"));
  EXPECT_THAT(error_of(with("RANK", "")), HasSubstr("RANK='' is not a whole number"));
  EXPECT_THAT(error_of(with("WORLD_SIZE", "0")), HasSubstr("WORLD_SIZE=0 is out of range [1, 64]"));
  EXPECT_THAT(error_of(with("WORLD_SIZE", "65")), HasSubstr("WORLD_SIZE=65 is out of range"));
  EXPECT_THAT(error_of(with("WORLD_SIZE", "99999999999999999999")),
              HasSubstr("is not a whole number"));
  EXPECT_THAT(error_of(with("LOCAL_RANK", "2")), HasSubstr("LOCAL_RANK=2 is out of range [0, 1]"));
  EXPECT_THAT(error_of(with("LOCAL_WORLD_SIZE", "9")),
              HasSubstr("LOCAL_WORLD_SIZE=9 is out of range [1, 8]"));
  EXPECT_THAT(error_of(with("MASTER_PORT", "0")), HasSubstr("MASTER_PORT=0 is out of range"));
  EXPECT_THAT(error_of(with("MASTER_PORT", "65536")), HasSubstr("MASTER_PORT=65536"));
  EXPECT_THAT(error_of(with("MASTER_ADDR", "")), HasSubstr("MASTER_ADDR must be"));
  EXPECT_THAT(error_of(with("MASTER_ADDR", std::string(300, 'a'))), HasSubstr("300 characters"));
  EXPECT_THAT(error_of(without("MASTER_ADDR")), HasSubstr("WORLD_SIZE=8 needs MASTER_ADDR"));
  EXPECT_THAT(error_of(without("MASTER_PORT")), HasSubstr("MASTER_PORT is not set"));
}

}  // namespace
}  // namespace mg
