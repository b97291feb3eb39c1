#include "framework/parallel/parallel_config.h"

#include <sstream>

#include <gtest/gtest.h>

#include "tests/unit/moe/moe_test_util.h"

namespace mg {
namespace {

TEST(MoEParallelConfig, SingleRankByDefault) {
  ParallelConfig c;
  EXPECT_TRUE(c.is_single_rank());
  EXPECT_EQ(c.ep_size(), 1);
  EXPECT_EQ(c.moe_tp_size(), 1);
  ExpertMap map = c.expert_map(5);
  EXPECT_EQ(map.global_to_local, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(map.num_local(), 5);
}

TEST(MoEParallelConfig, EpSpansTpTimesDp) {
  // tp=2 dp=2 with EP: 4 EP ranks, rank = dp_rank * tp + tp_rank.
  ParallelConfig c(2, 1, 2, 1, /*use_ep=*/true);
  EXPECT_EQ(c.world_size(), 4);
  EXPECT_EQ(c.world_rank(), 3);
  EXPECT_EQ(c.ep_size(), 4);
  EXPECT_EQ(c.ep_rank(), 3);
  EXPECT_EQ(c.moe_tp_size(), 1);
  EXPECT_EQ(c.dp_group(), (std::vector<int>{1, 3}));
  EXPECT_EQ(c.tp_group(), (std::vector<int>{2, 3}));
}

TEST(MoEParallelConfig, TpIsFlattenedOverDpWithoutEp) {
  ParallelConfig c(2, 0, 3, 2, /*use_ep=*/false);
  EXPECT_EQ(c.ep_size(), 1);
  EXPECT_EQ(c.moe_tp_size(), 6);
  EXPECT_EQ(c.moe_tp_rank(), 4);
  EXPECT_EQ(c.expert_map(3).num_local(), 3);
}

TEST(MoEParallelConfig, LinearExpertPlacementGivesTheRemainderToTheFirstRanks) {
  // 10 experts on 4 EP ranks: 3, 3, 2, 2.
  const std::vector<std::vector<int32_t>> expected = {{0, 1, 2}, {3, 4, 5}, {6, 7}, {8, 9}};
  for (int r = 0; r < 4; ++r) {
    ExpertMap map = ParallelConfig(1, 0, 4, r, true).expert_map(10);
    EXPECT_EQ(map.local_to_global, expected[static_cast<size_t>(r)]) << "rank " << r;
    for (int32_t e = 0; e < 10; ++e) {
      const auto& local = map.local_to_global;
      const auto it = std::find(local.begin(), local.end(), e);
      const int32_t want = it == local.end() ? -1 : static_cast<int32_t>(it - local.begin());
      EXPECT_EQ(map.global_to_local[static_cast<size_t>(e)], want);
      if (want >= 0) {
        const ExpertLocation loc = locate_expert(10, 4, e);
        EXPECT_EQ(loc.rank, r);
        EXPECT_EQ(loc.local, want);
      }
    }
  }
}

TEST(MoEParallelConfig, RejectsBadValues) {
  EXPECT_MG_ERROR(ParallelConfig(0, 0, 1, 0, false), "tp_size (0)");
  EXPECT_MG_ERROR(ParallelConfig(2, 2, 1, 0, false), "tp_rank 2 is not in [0, 2)");
  EXPECT_MG_ERROR(ParallelConfig(1, 0, 2, -1, false), "dp_rank -1");
  EXPECT_MG_ERROR(ParallelConfig(1, 0, 2, 0, false, MoEDispatch::kAllToAll),
                  "needs expert parallelism");
  EXPECT_MG_ERROR(ParallelConfig(2, 0, 2, 0, true, MoEDispatch::kAllToAll), "needs tp_size 1");
  EXPECT_MG_ERROR(ParallelConfig(1, 0, 4, 0, true).expert_map(3),
                  "3 experts cannot be spread over 4");
}

TEST(MoEParallelConfig, PrintsAndCompares) {
  ParallelConfig a(1, 0, 2, 1, true, MoEDispatch::kAllToAll);
  EXPECT_EQ(a.str(), "tp=1/0 dp=2/1 ep=2/1 dispatch=all_to_all");
  std::ostringstream os;
  os << a;
  EXPECT_EQ(os.str(), a.str());
  EXPECT_EQ(a, ParallelConfig(1, 0, 2, 1, true, MoEDispatch::kAllToAll));
  EXPECT_NE(a, ParallelConfig(1, 0, 2, 0, true, MoEDispatch::kAllToAll));
  EXPECT_NE(a, ParallelConfig(1, 0, 2, 1, true));
}

}  // namespace
}  // namespace mg
