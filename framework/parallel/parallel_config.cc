#include "framework/parallel/parallel_config.h"

#include <algorithm>
#include <ostream>

#include "framework/core/error.h"

namespace mg {

std::string_view moe_dispatch_name(MoEDispatch dispatch) {
  switch (dispatch) {
    case MoEDispatch::kAllGatherReduceScatter:
      return "all_gather_reduce_scatter";
    case MoEDispatch::kAllToAll:
      return "all_to_all";
  }
  return "?";
}

ParallelConfig::ParallelConfig(int tp_size, int tp_rank, int dp_size, int dp_rank, bool use_ep,
                               MoEDispatch dispatch)
    : tp_size_(tp_size),
      tp_rank_(tp_rank),
      dp_size_(dp_size),
      dp_rank_(dp_rank),
      use_ep_(use_ep),
      dispatch_(dispatch) {
  MG_CHECK(tp_size >= 1 && dp_size >= 1,
           "parallel config: tp_size ({}) and dp_size ({}) must be >= 1", tp_size, dp_size);
  MG_CHECK(tp_size <= kMaxRanks / dp_size,
           "parallel config: tp_size {} x dp_size {} is more than the {} ranks one run may have",
           tp_size, dp_size, kMaxRanks);
  MG_CHECK(0 <= tp_rank && tp_rank < tp_size, "parallel config: tp_rank {} is not in [0, {})",
           tp_rank, tp_size);
  MG_CHECK(0 <= dp_rank && dp_rank < dp_size, "parallel config: dp_rank {} is not in [0, {})",
           dp_rank, dp_size);
  if (dispatch == MoEDispatch::kAllToAll) {
    MG_CHECK(use_ep, "parallel config: all_to_all dispatch needs expert parallelism (use_ep)");
    MG_CHECK(tp_size == 1,
             "parallel config: all_to_all dispatch needs tp_size 1, got {} (sequence "
             "parallelism over the TP ranks is not implemented)",
             tp_size);
  }
}

std::vector<int> ParallelConfig::dp_group() const {
  std::vector<int> ranks;
  for (int d = 0; d < dp_size_; ++d) ranks.push_back(d * tp_size_ + tp_rank_);
  return ranks;
}

std::vector<int> ParallelConfig::tp_group() const {
  std::vector<int> ranks;
  for (int t = 0; t < tp_size_; ++t) ranks.push_back(dp_rank_ * tp_size_ + t);
  return ranks;
}

ExpertLocation locate_expert(int64_t num_experts, int ep_size, int64_t id) {
  MG_ASSERT(ep_size >= 1 && num_experts >= ep_size && id >= 0 && id < num_experts,
            "locate_expert({}, {}, {})", num_experts, ep_size, id);
  // The first `rem` ranks hold base + 1 experts, the others base.
  const int64_t base = num_experts / ep_size, rem = num_experts % ep_size;
  const int64_t big = (base + 1) * rem;
  if (id < big) return {static_cast<int>(id / (base + 1)), static_cast<int32_t>(id % (base + 1))};
  return {static_cast<int>(rem + (id - big) / base), static_cast<int32_t>((id - big) % base)};
}

ExpertMap ParallelConfig::expert_map(int64_t num_experts) const {
  const int64_t ep = ep_size();
  MG_CHECK(num_experts >= ep,
           "parallel config {}: {} experts cannot be spread over {} EP ranks (every rank needs "
           "at least one)",
           str(), num_experts, ep);
  const int64_t rank = ep_rank();
  const int64_t base = num_experts / ep;
  const int64_t rem = num_experts % ep;
  const int64_t count = base + (rank < rem ? 1 : 0);
  const int64_t first = rank * base + std::min(rank, rem);
  ExpertMap map;
  map.global_to_local.assign(static_cast<size_t>(num_experts), -1);
  for (int64_t i = 0; i < count; ++i) {
    map.global_to_local[static_cast<size_t>(first + i)] = static_cast<int32_t>(i);
    map.local_to_global.push_back(static_cast<int32_t>(first + i));
  }
  return map;
}

std::string ParallelConfig::str() const {
  return fmt::format("tp={}/{} dp={}/{} ep={}/{} dispatch={}", tp_size_, tp_rank_, dp_size_,
                     dp_rank_, ep_size(), ep_rank(), moe_dispatch_name(dispatch_));
}

std::ostream& operator<<(std::ostream& os, const ParallelConfig& config) {
  return os << config.str();
}

}  // namespace mg
