// How long nlohmann's ordered_json takes to parse a 32 MiB request body made of objects of M
// members each: ordered_json finds each new key by scanning the object's keys, so the time grows
// with M. It set kMaxObjectMembers (serve/openai_protocol.cc); docs/server.md has the numbers.
// Not part of the CMake build (it needs only the nlohmann header):
//
//   g++ -std=c++20 -O2 tools/json_body_parse_bench.cc -o /tmp/json_body_parse_bench
//   /tmp/json_body_parse_bench 16 256 1024
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

int main(int argc, char** argv) {
  constexpr size_t kBodyBytes = 32u << 20;  // the server's payload limit
  for (int a = 1; a < argc; ++a) {
    const int members = std::atoi(argv[a]);
    std::string object = "{";
    for (int i = 0; i < members; ++i) object += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
    object += "}";
    std::string body = "{\"tools\":[";
    size_t objects = 0;
    while (body.size() + object.size() + 3 < kBodyBytes) {
      body += (objects++ ? "," : "") + object;
    }
    body += "]}";
    const auto start = std::chrono::steady_clock::now();
    const nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(body);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%zu objects of %d members (%zu bytes): parse %.2f s\n", objects, members,
                body.size(), seconds);
  }
  return 0;
}
