// NcclCommunicator: every collective on the GPU, with exact expected values (small integers,
// whose sums every dtype holds exactly). Run as it is, the test is world size 1 (one process,
// no store). Started as several processes with torchrun's variables (tools/multi_gpu_check.sh
// does that with 2 and 4 ranks) every process is one rank of that world: the tests are written
// for any world size W and rank r. MG_TEST_DEAD_RANK=k makes rank k leave before the
// DeadPeer test's collective, which must then fail on the others within MG_DIST_TIMEOUT_S.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <numeric>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/device/stream.h"
#include "framework/parallel/nccl_communicator.h"
#include "framework/parallel/parallel_config.h"
#include "tests/cuda/cuda_test_util.h"

namespace mg {
namespace {

#ifdef MG_WITH_CUDA

#define MG_REQUIRE_NCCL()                                                                          \
  do {                                                                                             \
    MG_REQUIRE_GPU();                                                                              \
    if (!::mg::built_with_nccl()) GTEST_SKIP() << "built without NCCL (MG_NCCL=OFF or not found)"; \
  } while (false)

LaunchEnv launch_env() {
  std::optional<LaunchEnv> env = LaunchEnv::from_environment(kMaxRanks);
  return env ? *env : LaunchEnv{};
}

// The world of this process, made once (the store exchange happens once per process).
Communicator& world() {
  static std::unique_ptr<Communicator> comm = [] {
    const LaunchEnv env = launch_env();
    return make_nccl_communicator(env, env.local_rank, "nccl_communicator_cuda_test",
                                  dist_timeout_from_environment(std::chrono::seconds(120)));
  }();
  return *comm;
}

Stream& stream() {
  static std::unique_ptr<Stream> s = make_stream(Device::cuda(launch_env().local_rank));
  return *s;
}

// A device copy of `host` (as `dtype`), and back as F32.
template <typename T>
Tensor to_device(const std::vector<T>& host, DType dtype) {
  Tensor t = Tensor::empty_cpu(dtype_of<T>(), {static_cast<int64_t>(host.size())});
  std::copy(host.begin(), host.end(), t.data<T>());
  const Tensor src = t.dtype() == DType::kF32 ? cast_cpu(t, dtype) : t;
  Tensor dev =
      empty_tensor(Device::cuda(launch_env().local_rank), src.dtype(), src.shape(), &stream());
  copy_tensor(dev, src, &stream());
  return dev;
}

std::vector<float> to_host(const Tensor& t) {
  stream().synchronize();
  const Tensor h = testing::download_f32(t, &stream());
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

// Rank r's element i: small integers, exact in BF16 too.
float value(int r, int64_t i) {
  return static_cast<float>((r + 1) * 3 + (i % 7));
}

std::vector<float> values(int r, int64_t n, int64_t first = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = value(r, first + i);
  return v;
}

TEST(NcclComm, RankAndSizeComeFromTheEnvironment) {
  MG_REQUIRE_NCCL();
  const LaunchEnv env = launch_env();
  EXPECT_EQ(world().rank(), env.rank);
  EXPECT_EQ(world().size(), env.world_size);
}

TEST(NcclComm, AllReduceSumAndMaxInEveryReductionDtype) {
  MG_REQUIRE_NCCL();
  Communicator& c = world();
  const int W = c.size();
  const int64_t n = 1000;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      Tensor t = to_device(values(c.rank(), n), dtype);
      c.all_reduce(t.raw(), n, dtype, op, &stream());
      const std::vector<float> got = to_host(t);
      for (int64_t i = 0; i < n; ++i) {
        float want = op == ReduceOp::kSum ? 0.0f : value(0, i);
        for (int r = 0; r < W; ++r) {
          want = op == ReduceOp::kSum ? want + value(r, i) : std::max(want, value(r, i));
        }
        ASSERT_EQ(got[i], want) << dtype_name(dtype) << " " << reduce_op_name(op) << " i=" << i;
      }
    }
  }
}

TEST(NcclComm, AllReduceOfAHostScalarIsStaged) {
  MG_REQUIRE_NCCL();
  Communicator& c = world();
  int64_t tokens = 10 + c.rank();  // as the MoE runner's step count
  c.all_reduce(&tokens, 1, DType::kI64, ReduceOp::kMax, &stream());
  EXPECT_EQ(tokens, 10 + c.size() - 1);
  int32_t sum = c.rank() + 1;
  c.all_reduce(&sum, 1, DType::kI32, ReduceOp::kSum, nullptr);
  EXPECT_EQ(sum, c.size() * (c.size() + 1) / 2);
}

TEST(NcclComm, AllGatherAndAllGathervInRankOrder) {
  MG_REQUIRE_NCCL();
  Communicator& c = world();
  const int W = c.size(), me = c.rank();
  const int64_t n = 33;
  Tensor send = to_device(values(me, n), DType::kF32);
  Tensor recv = to_device(std::vector<float>(n * W, -1.0f), DType::kF32);
  c.all_gather(send.raw(), recv.raw(), n, DType::kF32, &stream());
  std::vector<float> got = to_host(recv);
  for (int r = 0; r < W; ++r) {
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[r * n + i], value(r, i)) << r << " " << i;
  }
  // Uneven counts, one rank (the odd ones) sending nothing.
  std::vector<int64_t> counts(W);
  for (int r = 0; r < W; ++r) counts[r] = r % 2 == 1 ? 0 : 5 + r;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  Tensor vsend = to_device(values(me, std::max<int64_t>(counts[me], 1)), DType::kBF16);
  Tensor vrecv = to_device(std::vector<float>(total, -1.0f), DType::kBF16);
  c.all_gatherv(vsend.raw(), vrecv.raw(), counts, DType::kBF16, &stream());
  got = to_host(vrecv);
  int64_t at = 0;
  for (int r = 0; r < W; ++r) {
    for (int64_t i = 0; i < counts[r]; ++i) ASSERT_EQ(got[at++], value(r, i)) << r << " " << i;
  }
}

TEST(NcclComm, ReduceScatterAndReduceScatterv) {
  MG_REQUIRE_NCCL();
  Communicator& c = world();
  const int W = c.size(), me = c.rank();
  const int64_t n = 17;
  Tensor send = to_device(values(me, n * W), DType::kF32);
  Tensor recv = to_device(std::vector<float>(n, -1.0f), DType::kF32);
  c.reduce_scatter(send.raw(), recv.raw(), n, DType::kF32, ReduceOp::kSum, &stream());
  std::vector<float> got = to_host(recv);
  for (int64_t i = 0; i < n; ++i) {
    float want = 0.0f;
    for (int r = 0; r < W; ++r) want += value(r, me * n + i);
    ASSERT_EQ(got[i], want) << i;
  }
  std::vector<int64_t> counts(W);
  for (int r = 0; r < W; ++r) counts[r] = r == 1 ? 0 : 3 + 2 * r;
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const int64_t first = std::accumulate(counts.begin(), counts.begin() + me, int64_t{0});
  Tensor vsend = to_device(values(me, total), DType::kF32);
  Tensor vrecv =
      to_device(std::vector<float>(std::max<int64_t>(counts[me], 1), -1.0f), DType::kF32);
  c.reduce_scatterv(vsend.raw(), vrecv.raw(), counts, DType::kF32, ReduceOp::kSum, &stream());
  got = to_host(vrecv);
  for (int64_t i = 0; i < counts[me]; ++i) {
    float want = 0.0f;
    for (int r = 0; r < W; ++r) want += value(r, first + i);
    ASSERT_EQ(got[i], want) << i;
  }
}

TEST(NcclComm, AllToAllAndAllToAllv) {
  MG_REQUIRE_NCCL();
  Communicator& c = world();
  const int W = c.size(), me = c.rank();
  const int64_t n = 9;
  // Block p of rank r: value(r, p * n + i); rank p receives it as its block r.
  Tensor send = to_device(values(me, n * W), DType::kF32);
  Tensor recv = to_device(std::vector<float>(n * W, -1.0f), DType::kF32);
  c.all_to_all(send.raw(), recv.raw(), n, DType::kF32, &stream());
  std::vector<float> got = to_host(recv);
  for (int r = 0; r < W; ++r) {
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[r * n + i], value(r, me * n + i)) << r << " " << i;
  }
  // Rank r sends (r + 2p) % 3 + (p == r) elements to rank p (some zero).
  auto count = [](int from, int to) -> int64_t { return (from + 2 * to) % 3 + (from == to); };
  std::vector<int64_t> send_counts(W), recv_counts(W), send_first(W + 1, 0);
  for (int p = 0; p < W; ++p) {
    send_counts[p] = count(me, p);
    recv_counts[p] = count(p, me);
    send_first[p + 1] = send_first[p] + send_counts[p];
  }
  const int64_t recv_total = std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t{0});
  Tensor vsend = to_device(values(me, send_first[W]), DType::kF32);
  Tensor vrecv =
      to_device(std::vector<float>(std::max<int64_t>(recv_total, 1), -1.0f), DType::kF32);
  c.all_to_allv(vsend.raw(), send_counts, vrecv.raw(), recv_counts, DType::kF32, &stream());
  got = to_host(vrecv);
  int64_t at = 0;
  for (int p = 0; p < W; ++p) {
    // What rank p sent me starts at its send offset of block `me`.
    int64_t p_first = 0;
    for (int q = 0; q < me; ++q) p_first += count(p, q);
    for (int64_t i = 0; i < recv_counts[p]; ++i) {
      ASSERT_EQ(got[at++], value(p, p_first + i)) << "from " << p << " i=" << i;
    }
  }
}

TEST(NcclComm, NullStreamReturnsWithTheResult) {
  MG_REQUIRE_NCCL();
  Communicator& c = world();
  Tensor t = to_device(values(c.rank(), 4), DType::kF32);
  stream().synchronize();
  c.all_reduce(t.raw(), 4, DType::kF32, ReduceOp::kSum, nullptr);
  const std::vector<float> got = to_host(t);
  float want = 0.0f;
  for (int r = 0; r < c.size(); ++r) want += value(r, 0);
  EXPECT_EQ(got[0], want);
}

TEST(NcclComm, BarrierAndSubgroupsLikeTheMoERunner) {
  MG_REQUIRE_NCCL();
  Communicator& c = world();
  c.barrier();
  const int W = c.size(), me = c.rank();
  // tp 2 x dp W/2 where W is even, else one TP group of everyone.
  const int tp = W % 2 == 0 ? 2 : W, dp = W / tp;
  const ParallelConfig pc(tp, me % tp, dp, me / tp, false);
  Communicator& dp_comm = c.subgroup(pc.dp_group());
  Communicator& tp_comm = c.subgroup(pc.tp_group());
  EXPECT_EQ(&c.subgroup(pc.dp_group()), &dp_comm);  // cached
  EXPECT_EQ(dp_comm.size(), dp);
  EXPECT_EQ(tp_comm.size(), tp);
  EXPECT_EQ(tp_comm.rank(), pc.tp_rank());
  Tensor t = to_device(std::vector<float>{static_cast<float>(me)}, DType::kF32);
  tp_comm.all_reduce(t.raw(), 1, DType::kF32, ReduceOp::kSum, &stream());
  float want = 0.0f;
  for (int r : pc.tp_group()) want += static_cast<float>(r);
  EXPECT_EQ(to_host(t)[0], want);
  dp_comm.barrier();
}

TEST(NcclComm, ReductionsOfUnsupportedDtypesAreErrors) {
  MG_REQUIRE_NCCL();
  Communicator& c = world();
  Tensor t = to_device(std::vector<float>(4, 1.0f), DType::kF32);
  EXPECT_THROW(c.all_reduce(t.raw(), 4, DType::kF8E4M3, ReduceOp::kSum, &stream()), Error);
  EXPECT_THROW(c.all_gatherv(t.raw(), t.raw(), std::vector<int64_t>(c.size() + 1, 1), DType::kF32,
                             &stream()),
               Error);
}

// Last in the file: with MG_TEST_DEAD_RANK=k rank k leaves, and the others' collective must
// end in an error naming the collective within the timeout instead of hanging.
TEST(NcclComm, ZDeadPeerFailsWithinTheTimeout) {
  MG_REQUIRE_NCCL();
  const char* dead = std::getenv("MG_TEST_DEAD_RANK");
  if (dead == nullptr || world().size() < 2) GTEST_SKIP() << "needs MG_TEST_DEAD_RANK and 2+ ranks";
  Communicator& c = world();
  c.barrier();
  if (c.rank() == std::atoi(dead)) {
    std::fflush(nullptr);
    ::_exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  const auto timeout = dist_timeout_from_environment(std::chrono::seconds(120));
  Tensor t = to_device(std::vector<float>(1 << 20, 1.0f), DType::kF32);
  try {
    c.all_reduce(t.raw(), 1 << 20, DType::kF32, ReduceOp::kSum, &stream());
    c.barrier();
    ADD_FAILURE() << "no error although rank " << dead << " left";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::AnyOf(::testing::HasSubstr("did not finish within"),
                                           ::testing::HasSubstr("NCCL error")));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, timeout * 2 + std::chrono::seconds(30));
}

#endif  // MG_WITH_CUDA

}  // namespace
}  // namespace mg
