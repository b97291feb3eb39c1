#include "framework/runtime/local_ranks.h"

#include <exception>
#include <mutex>
#include <thread>

#include "framework/compile/compiler.h"
#include "framework/core/thread_pool.h"
#include "framework/parallel/local_communicator.h"

namespace mg {

void run_local_ranks(const std::filesystem::path& graph_file, const CompileOptions& compile,
                     const SessionOptions& session, const LocalRanksOptions& ranks,
                     const std::function<void(const ParallelConfig&, Session&)>& fn) {
  MG_CHECK(ranks.tp >= 1 && ranks.dp >= 1, "--tp and --dp must be >= 1, got {} and {}", ranks.tp,
           ranks.dp);
  // Checked before anything starts: one thread per rank. Division keeps the product from
  // overflowing (--tp 65536 --dp 65536 once wrapped to 0 ranks).
  MG_CHECK(ranks.tp <= kMaxRanks / ranks.dp,
           "--tp {} x --dp {} is more than the {} ranks one run may have", ranks.tp, ranks.dp,
           kMaxRanks);
  const int world = ranks.tp * ranks.dp;
  LocalCommGroup group(world);
  std::mutex mutex;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  auto fail = [&](int rank) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!first_error) {
      first_error = std::current_exception();
      group.abort(fmt::format("rank {} failed", rank));
    }
  };
  for (int rank = 0; rank < world; ++rank) {
    try {
      threads.push_back(start_thread(
          [&, rank] {
            try {
              const ParallelConfig config(ranks.tp, rank % ranks.tp, ranks.dp, rank / ranks.tp,
                                          ranks.ep, ranks.dispatch);
              CompileOptions options = compile;
              options.parallel = config;
              std::shared_ptr<const ExecutionPlan> plan = compile_graph_file(graph_file, options);
              Session s(std::move(plan), session, &group.communicator(rank));
              fn(config, s);
            } catch (...) {
              fail(rank);
            }
          },
          fmt::format("rank {} of {}", rank, world)));
    } catch (const Error&) {
      // The ranks already started wait for this one in their collectives: abort them.
      fail(rank);
      break;
    }
  }
  for (std::thread& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace mg
