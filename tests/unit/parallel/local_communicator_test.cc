#include "framework/parallel/local_communicator.h"

#include <chrono>
#include <numeric>
#include <thread>

#include <gtest/gtest.h>

#include "tests/unit/moe/moe_test_util.h"
#include "tests/unit/parallel/parallel_test_util.h"

namespace mg {
namespace {

using parallel_test::run_ranks;

TEST(LocalComm, AllReduceIsBitIdenticalOnEveryRankAndAddsInRankOrder) {
  for (int n : {1, 2, 3, 4}) {
    LocalCommGroup group(n);
    // Values whose float sum depends on the order of addition.
    auto value = [](int rank, int i) {
      return (rank % 2 == 0 ? 1e8f : 1.0f) * (i + 1) * (rank == 1 ? -1.0f : 1.0f) + 0.1f * rank;
    };
    std::vector<std::vector<float>> results(static_cast<size_t>(n));
    run_ranks(group, [&](int rank, Communicator& comm) {
      std::vector<float> data(37);
      for (int i = 0; i < 37; ++i) data[i] = value(rank, i);
      comm.all_reduce(data.data(), 37, DType::kF32, ReduceOp::kSum);
      results[rank] = data;
    });
    for (int i = 0; i < 37; ++i) {
      float want = value(0, i);
      for (int r = 1; r < n; ++r) want += value(r, i);
      for (int r = 0; r < n; ++r) ASSERT_EQ(results[r][i], want) << "n=" << n << " rank " << r;
    }
  }
}

TEST(LocalComm, AllReduceMaxOverInt64) {
  LocalCommGroup group(3);
  run_ranks(group, [&](int rank, Communicator& comm) {
    int64_t v[2] = {rank * 10, -rank};
    comm.all_reduce(v, 2, DType::kI64, ReduceOp::kMax);
    EXPECT_EQ(v[0], 20);
    EXPECT_EQ(v[1], 0);
  });
}

TEST(LocalComm, AllGatherAndAllGatherVWithEmptyRanks) {
  LocalCommGroup group(3);
  const std::vector<int64_t> counts = {2, 0, 3};
  run_ranks(group, [&](int rank, Communicator& comm) {
    int32_t one = rank + 5;
    int32_t all[3];
    comm.all_gather(&one, all, 1, DType::kI32);
    EXPECT_EQ(std::vector<int32_t>(all, all + 3), (std::vector<int32_t>{5, 6, 7}));

    std::vector<float> send(static_cast<size_t>(counts[rank]), static_cast<float>(rank));
    std::vector<float> recv(5, -1.0f);
    comm.all_gatherv(send.data(), recv.data(), counts, DType::kF32);
    EXPECT_EQ(recv, (std::vector<float>{0, 0, 2, 2, 2}));
  });
}

TEST(LocalComm, ReduceScatterAndReduceScatterV) {
  LocalCommGroup group(2);
  run_ranks(group, [&](int rank, Communicator& comm) {
    // send [4] = block 0 (2) | block 1 (2).
    const float send[4] = {1.0f + rank, 2.0f + rank, 10.0f * (rank + 1), 20.0f * (rank + 1)};
    float recv[2];
    comm.reduce_scatter(send, recv, 2, DType::kF32, ReduceOp::kSum);
    if (rank == 0) {
      EXPECT_EQ(recv[0], 3.0f);
      EXPECT_EQ(recv[1], 5.0f);
    } else {
      EXPECT_EQ(recv[0], 30.0f);
      EXPECT_EQ(recv[1], 60.0f);
    }
    const std::vector<int64_t> counts = {3, 1};
    float out[3] = {-1, -1, -1};
    comm.reduce_scatterv(send, out, counts, DType::kF32, ReduceOp::kMax);
    if (rank == 0) {
      EXPECT_EQ(std::vector<float>(out, out + 3), (std::vector<float>{2, 3, 20}));
    } else {
      EXPECT_EQ(out[0], 40.0f);
    }
  });
}

TEST(LocalComm, AllToAllAndAllToAllV) {
  LocalCommGroup group(3);
  run_ranks(group, [&](int rank, Communicator& comm) {
    int64_t send[3], recv[3];
    for (int r = 0; r < 3; ++r) send[r] = rank * 10 + r;
    comm.all_to_all(send, recv, 1, DType::kI64);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(recv[r], r * 10 + rank);

    // Rank r sends r + q elements to rank q, each equal to 100 r + q.
    std::vector<int64_t> send_counts, recv_counts;
    std::vector<float> out;
    for (int q = 0; q < 3; ++q) {
      send_counts.push_back(rank + q);
      recv_counts.push_back(q + rank);
      for (int i = 0; i < rank + q; ++i) out.push_back(100.0f * rank + q);
    }
    std::vector<float> in(
        static_cast<size_t>(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0})));
    comm.all_to_allv(out.data(), send_counts, in.data(), recv_counts, DType::kF32);
    size_t i = 0;
    for (int q = 0; q < 3; ++q) {
      for (int j = 0; j < q + rank; ++j) EXPECT_EQ(in[i++], 100.0f * q + rank);
    }
  });
}

TEST(LocalComm, SubgroupsRenumberAndAreCached) {
  LocalCommGroup group(4);
  run_ranks(group, [&](int rank, Communicator& comm) {
    const std::vector<int> mine = rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    Communicator& sub = comm.subgroup(mine);
    EXPECT_EQ(&sub, &comm.subgroup(mine));
    EXPECT_EQ(sub.size(), 2);
    EXPECT_EQ(sub.rank(), rank / 2);
    int64_t v = rank;
    sub.all_reduce(&v, 1, DType::kI64, ReduceOp::kSum);
    EXPECT_EQ(v, rank % 2 == 0 ? 2 : 4);
    comm.barrier();
  });
}

TEST(LocalComm, ManyCollectivesInARow) {
  LocalCommGroup group(4);
  run_ranks(group, [&](int rank, Communicator& comm) {
    for (int it = 0; it < 300; ++it) {
      int64_t v = it + rank;
      comm.all_reduce(&v, 1, DType::kI64, ReduceOp::kSum);
      ASSERT_EQ(v, 4 * it + 6);
    }
  });
}

TEST(LocalComm, MismatchedCallsFailOnEveryRank) {
  LocalCommGroup group(2);
  std::vector<std::string> errors(2);
  run_ranks(group, [&](int rank, Communicator& comm) {
    float v[5] = {};
    try {
      comm.all_reduce(v, rank == 0 ? 4 : 5, DType::kF32, ReduceOp::kSum);
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("ranks disagree on the collective: rank 0 called all_reduce(4 x F32), rank 1 "
                     "called all_reduce(5 x F32)"),
              std::string::npos)
        << e;
  }
}

TEST(LocalComm, AMissingRankTimesOutInsteadOfHanging) {
  LocalCommGroup group(2, std::chrono::milliseconds(50));
  EXPECT_MG_ERROR(run_ranks(group,
                            [&](int rank, Communicator& comm) {
                              if (rank == 0) comm.barrier();
                            }),
                  "rank 0 waited 50 ms in barrier for ranks that never came");
  // The group stays failed.
  EXPECT_MG_ERROR(group.communicator(1).barrier(), "never came");
}

// `run --dp 2 --prompt-ids 1,300` used to wait out the timeout about half of the time: rank 0
// failed (and aborted the world) before rank 1 asked for a sub-group, which was then made fresh
// and waited for rank 0 forever. A group made after the abort must be born aborted, at every
// depth.
TEST(LocalComm, SubgroupsMadeAfterAnAbortAreBornAborted) {
  LocalCommGroup group(3, std::chrono::seconds(10));
  group.abort("rank 0 failed");
  const auto start = std::chrono::steady_clock::now();
  Communicator& comm = group.communicator(1);
  const std::vector<int> pair = {0, 1};
  Communicator& sub = comm.subgroup(pair);
  EXPECT_MG_ERROR(sub.barrier(), "rank 0 failed");
  const std::vector<int> one_and_two = {1, 2};
  Communicator& other = comm.subgroup(one_and_two);
  const std::vector<int> both = {0, 1};
  EXPECT_MG_ERROR(other.subgroup(both).barrier(), "rank 0 failed");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// The same race through threads: the failing rank aborts while the others are about to make a
// sub-group, in either order; every run ends at once with the failing rank's error.
TEST(LocalComm, AnAbortReachesSubgroupsWhateverTheTiming) {
  for (int it = 0; it < 50; ++it) {
    LocalCommGroup group(2, std::chrono::seconds(10));
    const auto start = std::chrono::steady_clock::now();
    EXPECT_MG_ERROR(run_ranks(group,
                              [&](int rank, Communicator& comm) {
                                if (rank == 0) throw Error("token id 300 is out of range");
                                if (it % 2 == 0)
                                  std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                const std::vector<int> both = {0, 1};
                                comm.subgroup(both).barrier();
                              }),
                    "token id 300");
    ASSERT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2)) << "run " << it;
  }
}

TEST(LocalComm, RejectsBadArguments) {
  LocalCommGroup group(2);
  EXPECT_MG_ERROR(group.communicator(2), "rank 2 is not in [0, 2)");
  run_ranks(group, [&](int rank, Communicator& comm) {
    const std::vector<int> bad = {1, 0};
    EXPECT_MG_ERROR(comm.subgroup(bad), "must be ascending");
    const std::vector<int> other = {1 - rank};
    EXPECT_MG_ERROR(comm.subgroup(other), "without itself");
    const std::vector<int64_t> counts = {1};
    float x = 0;
    EXPECT_MG_ERROR(comm.all_gatherv(&x, &x, counts, DType::kF32),
                    "expected 2 non-negative counts");
  });
}

}  // namespace
}  // namespace mg
