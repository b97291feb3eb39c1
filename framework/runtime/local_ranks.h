// Multi-rank runs inside one process: every rank is a thread with its own compiled plan and
// Session, connected through a LocalCommGroup. This is how `moegraph run --tp/--dp/--ep`
// exercises tensor-, data- and expert-parallel MoE on a CPU; GPU runs will use one process per
// GPU and NCCL behind the same Communicator interface.
//
// What is parallel: MoE layers (experts split by TP or EP, tokens exchanged between DP ranks as
// ParallelConfig describes). Everything else (attention, dense layers) is replicated on every rank,
// which is correct because the TP ranks of one DP group see the same tokens.
#pragma once

#include <filesystem>
#include <functional>

#include "framework/parallel/parallel_config.h"
#include "framework/runtime/session.h"

namespace mg {

struct LocalRanksOptions {
  int tp = 1;
  int dp = 1;
  bool ep = false;
  MoEDispatch dispatch = MoEDispatch::kAllGatherReduceScatter;
};

// Compiles `graph_file` once per rank (each with its own ParallelConfig), opens one Session per
// rank and calls fn(config, session) on each rank's thread. Every rank must make the same
// sequence of forward calls (collectives run in lockstep). The first exception thrown on any
// rank aborts the others and is rethrown here.
void run_local_ranks(const std::filesystem::path& graph_file, const CompileOptions& compile,
                     const SessionOptions& session, const LocalRanksOptions& ranks,
                     const std::function<void(const ParallelConfig&, Session&)>& fn);

}  // namespace mg
