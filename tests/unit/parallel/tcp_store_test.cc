#include "framework/parallel/tcp_store.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/core/error.h"

namespace mg {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

// A loopback port that was free a moment ago.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

LaunchEnv env_of(int rank, int world, int port) {
  LaunchEnv env;
  env.rank = rank;
  env.world_size = world;
  env.local_rank = rank;
  env.local_world_size = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  return env;
}

struct Outcome {
  std::string value;
  std::string error;
};

// Runs store_exchange on one thread per rank in `ranks` (a subset of 0..world-1: the others
// never arrive); rank r's fingerprint is fingerprints[r].
std::vector<Outcome> exchange(int world, const std::vector<int>& ranks,
                              const std::vector<std::string>& fingerprints,
                              std::chrono::milliseconds timeout) {
  const int port = free_port();
  std::vector<Outcome> out(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r : ranks) {
    threads.emplace_back([&, r] {
      try {
        out[r].value = store_exchange(env_of(r, world, port), fingerprints[r],
                                      r == 0 ? "the-id" : "", timeout);
      } catch (const Error& e) {
        out[r].error = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

TEST(TcpStore, EveryRankGetsRankZerosPayload) {
  for (int world : {2, 4, 8}) {
    std::vector<int> ranks;
    for (int r = 0; r < world; ++r) ranks.push_back(r);
    const std::vector<std::string> same(world, "model.pb tp=2");
    const std::vector<Outcome> out = exchange(world, ranks, same, 20s);
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(out[r].error, "") << "rank " << r;
      EXPECT_EQ(out[r].value, "the-id") << "rank " << r;
    }
  }
}

TEST(TcpStore, PayloadMayHoldAnyBytes) {
  const int port = free_port();
  std::string id(128, '\0');
  for (int i = 0; i < 128; ++i) id[i] = static_cast<char>(i * 7);
  std::string got;
  std::thread peer([&] { got = store_exchange(env_of(1, 2, port), "f", "", 20s); });
  EXPECT_EQ(store_exchange(env_of(0, 2, port), "f", id, 20s), id);
  peer.join();
  EXPECT_EQ(got, id);
}

TEST(TcpStore, ARankThatNeverArrivesIsATimeoutNamingIt) {
  const std::vector<std::string> same(4, "f");
  const auto start = std::chrono::steady_clock::now();
  const std::vector<Outcome> out = exchange(4, {0, 1, 3}, same, 1500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_THAT(out[0].error, HasSubstr("rank(s) 2 did not reach the store at 127.0.0.1:"));
  // The ranks that came are told why instead of waiting for their own timeout.
  EXPECT_THAT(out[1].error, HasSubstr("rank 0 reports: rank(s) 2 did not reach the store"));
  EXPECT_THAT(out[3].error, HasSubstr("rank 0 reports"));
}

TEST(TcpStore, MissingRankZeroIsATimeoutNamingTheAddress) {
  const std::vector<std::string> same(2, "f");
  const std::vector<Outcome> out = exchange(2, {1}, same, 800ms);
  EXPECT_THAT(out[1].error, HasSubstr("rank 1 could not connect to rank 0's store at 127.0.0.1:"));
  EXPECT_THAT(out[1].error, HasSubstr("MASTER_ADDR and MASTER_PORT"));
}

TEST(TcpStore, RankZeroStartingLateIsWaitedFor) {
  const int port = free_port();
  std::string got;
  std::thread peer([&] { got = store_exchange(env_of(1, 2, port), "f", "", 20s); });
  std::this_thread::sleep_for(500ms);
  store_exchange(env_of(0, 2, port), "f", "late", 20s);
  peer.join();
  EXPECT_EQ(got, "late");
}

TEST(TcpStore, DifferentFingerprintsFailOnEveryRankNamingTheRank) {
  const std::vector<Outcome> out =
      exchange(3, {0, 1, 2}, {"model a tp=2", "model a tp=2", "model b tp=2"}, 20s);
  for (int r = 0; r < 3; ++r) {
    EXPECT_THAT(out[r].error,
                HasSubstr("rank 2 runs 'model b tp=2' but rank 0 runs 'model a tp=2'"))
        << "rank " << r;
  }
}

TEST(TcpStore, ForeignConnectionsAreIgnored) {
  const int port = free_port();
  std::string got;
  std::thread rank0([&] { got = store_exchange(env_of(0, 2, port), "f", "id", 20s); });
  std::this_thread::sleep_for(300ms);
  {  // A connection that sends a huge length, then one that sends junk.
    for (const std::string& junk :
         {std::string("\xff\xff\xff\xff", 4), std::string("\0\0\0\x05hello", 9)}) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(static_cast<uint16_t>(port));
      ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
      ASSERT_EQ(::send(fd, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));
      ::close(fd);
    }
  }
  EXPECT_EQ(store_exchange(env_of(1, 2, port), "f", "", 20s), "id");
  rank0.join();
  EXPECT_EQ(got, "id");
}

TEST(TcpStore, OneRankNeedsNoSocket) {
  EXPECT_EQ(store_exchange(env_of(0, 1, 1), "f", "id", 1ms), "id");
}

TEST(TcpStore, OversizedMessagesAreRefused) {
  EXPECT_THROW(store_exchange(env_of(0, 1, 1), std::string(kMaxStoreMessage, 'x'), "", 1s), Error);
}

}  // namespace
}  // namespace mg
