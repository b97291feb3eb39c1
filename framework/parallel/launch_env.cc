#include "framework/parallel/launch_env.h"

#include <charconv>
#include <cstdlib>

#include "framework/core/error.h"

namespace mg {

namespace {

// The whole of `text` as a decimal integer in [lo, hi]; mg::Error naming `name` otherwise.
int parse_int_var(const char* name, const char* text, long long lo, long long hi) {
  const std::string_view s(text);
  long long value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  MG_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size(),
           "environment variable {}='{}' is not a whole number", name, s);
  MG_CHECK(value >= lo && value <= hi, "environment variable {}={} is out of range [{}, {}]", name,
           value, lo, hi);
  return static_cast<int>(value);
}

}  // namespace

std::optional<LaunchEnv> LaunchEnv::parse(const std::function<const char*(const char*)>& getenv,
                                          int max_world) {
  const char* rank = getenv("RANK");
  const char* world = getenv("WORLD_SIZE");
  if (rank == nullptr && world == nullptr) return std::nullopt;
  MG_CHECK(rank != nullptr && world != nullptr,
           "environment variable {} is set but {} is not (a launcher sets both: RANK, "
           "WORLD_SIZE, MASTER_ADDR, MASTER_PORT)",
           rank ? "RANK" : "WORLD_SIZE", rank ? "WORLD_SIZE" : "RANK");
  LaunchEnv env;
  env.world_size = parse_int_var("WORLD_SIZE", world, 1, max_world);
  env.rank = parse_int_var("RANK", rank, 0, env.world_size - 1);
  const char* local_world = getenv("LOCAL_WORLD_SIZE");
  env.local_world_size = local_world
                             ? parse_int_var("LOCAL_WORLD_SIZE", local_world, 1, env.world_size)
                             : env.world_size;
  const char* local_rank = getenv("LOCAL_RANK");
  env.local_rank = local_rank ? parse_int_var("LOCAL_RANK", local_rank, 0, env.local_world_size - 1)
                              : env.rank % env.local_world_size;
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  if (env.world_size > 1) {
    MG_CHECK(addr != nullptr && port != nullptr,
             "WORLD_SIZE={} needs MASTER_ADDR and MASTER_PORT (where rank 0's store listens); "
             "{} is not set",
             env.world_size, addr == nullptr ? "MASTER_ADDR" : "MASTER_PORT");
  }
  if (addr != nullptr) {
    const std::string_view a(addr);
    MG_CHECK(!a.empty() && a.size() <= kMaxMasterAddrLength,
             "environment variable MASTER_ADDR must be a host name or address of 1 to {} "
             "characters, got {} characters",
             kMaxMasterAddrLength, a.size());
    env.master_addr = std::string(a);
  }
  if (port != nullptr) env.master_port = parse_int_var("MASTER_PORT", port, 1, 65535);
  return env;
}

std::optional<LaunchEnv> LaunchEnv::from_environment(int max_world) {
  return parse([](const char* name) { return std::getenv(name); }, max_world);
}

std::string LaunchEnv::str() const {
  return fmt::format("rank {} of {} (local {} of {}), store {}:{}", rank, world_size, local_rank,
                     local_world_size, master_addr, master_port);
}

std::chrono::milliseconds dist_timeout_from_environment(std::chrono::milliseconds fallback) {
  const char* text = std::getenv("MG_DIST_TIMEOUT_S");
  if (text == nullptr) return fallback;
  return std::chrono::seconds(parse_int_var("MG_DIST_TIMEOUT_S", text, 1, 86400));
}

}  // namespace mg
