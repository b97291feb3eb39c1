// How one rank's MoE layer is placed among tp x dp ranks: a validated value type.
//
// Ranks are numbered rank = dp_rank * tp_size + tp_rank. Tokens differ between DP ranks and are
// the same on the TP ranks of one DP group. The experts are split over all tp x dp ranks (as in
// vLLM's FusedMoEParallelConfig):
//   - use_ep: expert parallelism, ep_size = tp x dp; every rank holds whole experts (a
//     contiguous range of ids, see ExpertMap) and moe_tp_size = 1;
//   - otherwise: every expert is split along its intermediate size over moe_tp_size = tp x dp
//     ranks ("TP flattened over DP") and ep_size = 1.
// With dp_size > 1 the MoE moves tokens between the DP ranks (MoEDispatch); the partial outputs
// of the TP ranks are summed by an all-reduce over the TP group.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace mg {

// How a data-parallel MoE brings tokens to the experts (vLLM's all2all_backend).
enum class MoEDispatch : uint8_t {
  // Naive DP/EP: all-gather every DP rank's tokens, run the local experts on all of them,
  // reduce-scatter the outputs back.
  kAllGatherReduceScatter,
  // Send each (token, expert) pair only to the rank owning the expert and combine the expert
  // outputs back (DeepEP style). Needs use_ep and tp_size 1 (sequence parallelism, which would
  // split the tokens of a TP group, is not implemented).
  kAllToAll,
};
std::string_view moe_dispatch_name(MoEDispatch dispatch);

// Which experts live on this rank: linear placement, rank r holds a contiguous range of
// E / ep (+1 for the first E % ep ranks) global ids.
struct ExpertMap {
  // [E_global] local id of each global expert, -1 when it lives on another rank.
  std::vector<int32_t> global_to_local;
  // [E_local] global id of each local expert (ascending).
  std::vector<int32_t> local_to_global;

  int64_t num_global() const { return static_cast<int64_t>(global_to_local.size()); }
  int64_t num_local() const { return static_cast<int64_t>(local_to_global.size()); }
  bool operator==(const ExpertMap&) const = default;
};

// Where global expert `id` lives under the linear placement of `num_experts` experts over
// `ep_size` ranks: the rank and the local id there.
struct ExpertLocation {
  int rank;
  int32_t local;
};
ExpertLocation locate_expert(int64_t num_experts, int ep_size, int64_t id);

// The most ranks (tp_size * dp_size) one run may have. Local ranks are threads of one process,
// each with its own compiled plan; a GPU host has at most 8 to 16 GPUs. The bound keeps
// --tp 40000 from starting 40,000 threads.
inline constexpr int kMaxRanks = 64;

class ParallelConfig {
 public:
  // A single rank.
  ParallelConfig() = default;
  // Throws mg::Error when a size is < 1, tp_size * dp_size is above kMaxRanks, a rank is out of
  // range, or kAllToAll is asked for without use_ep or with tp_size > 1.
  ParallelConfig(int tp_size, int tp_rank, int dp_size, int dp_rank, bool use_ep,
                 MoEDispatch dispatch = MoEDispatch::kAllGatherReduceScatter);

  int tp_size() const { return tp_size_; }
  int tp_rank() const { return tp_rank_; }
  int dp_size() const { return dp_size_; }
  int dp_rank() const { return dp_rank_; }
  bool use_ep() const { return use_ep_; }
  MoEDispatch dispatch() const { return dispatch_; }

  int world_size() const { return tp_size_ * dp_size_; }
  int world_rank() const { return dp_rank_ * tp_size_ + tp_rank_; }
  bool is_single_rank() const { return world_size() == 1; }
  // Expert parallelism: world size and rank with use_ep, else 1 and 0.
  int ep_size() const { return use_ep_ ? world_size() : 1; }
  int ep_rank() const { return use_ep_ ? world_rank() : 0; }
  // Intermediate-size split of every expert: world size and rank without use_ep, else 1 and 0.
  int moe_tp_size() const { return use_ep_ ? 1 : world_size(); }
  int moe_tp_rank() const { return use_ep_ ? 0 : world_rank(); }

  // World ranks of this rank's DP group (same tp_rank; the ranks tokens are exchanged with) and
  // of its TP group (same dp_rank; the ranks whose partial outputs are summed), ascending.
  std::vector<int> dp_group() const;
  std::vector<int> tp_group() const;

  // Placement of `num_experts` global experts on this rank. Throws mg::Error when there are
  // fewer experts than EP ranks.
  ExpertMap expert_map(int64_t num_experts) const;

  // "tp=2/1 dp=2/0 ep=4/2 dispatch=all_gather_reduce_scatter" (size/rank).
  std::string str() const;
  bool operator==(const ParallelConfig&) const = default;

 private:
  int tp_size_ = 1;
  int tp_rank_ = 0;
  int dp_size_ = 1;
  int dp_rank_ = 0;
  bool use_ep_ = false;
  MoEDispatch dispatch_ = MoEDispatch::kAllGatherReduceScatter;
};

std::ostream& operator<<(std::ostream& os, const ParallelConfig& config);

}  // namespace mg
