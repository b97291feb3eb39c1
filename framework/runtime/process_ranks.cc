#include "framework/runtime/process_ranks.h"

#include "framework/compile/compiler.h"
#include "framework/parallel/nccl_communicator.h"

namespace mg {

void run_process_rank(const std::filesystem::path& graph_file, CompileOptions compile,
                      const SessionOptions& session, const LocalRanksOptions& ranks,
                      const LaunchEnv& env, const std::string& run_fingerprint,
                      const std::function<void(const ParallelConfig&, Session&)>& fn) {
  MG_CHECK(compile.device.is_cuda(),
           "{}: a run of several processes needs --device cuda (one process per GPU); CPU ranks "
           "run as threads of one process (--tp/--dp/--ep without a launcher)",
           env.str());
  MG_CHECK(ranks.tp >= 1 && ranks.dp >= 1 && ranks.tp <= kMaxRanks / ranks.dp &&
               ranks.tp * ranks.dp == env.world_size,
           "--tp {} x --dp {} must equal WORLD_SIZE={} (one process per rank)", ranks.tp, ranks.dp,
           env.world_size);
  const ParallelConfig config(ranks.tp, env.rank % ranks.tp, ranks.dp, env.rank / ranks.tp,
                              ranks.ep, ranks.dispatch);
  compile.device = Device::cuda(env.local_rank);
  compile.parallel = config;
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(graph_file, ec);
  const std::string fingerprint =
      fmt::format("{} ({} bytes) tp={} dp={} ep={} dispatch={} {}", graph_file.filename().string(),
                  ec ? 0 : file_size, ranks.tp, ranks.dp, ranks.ep,
                  moe_dispatch_name(ranks.dispatch), run_fingerprint);
  const std::unique_ptr<Communicator> comm = make_nccl_communicator(
      env, env.local_rank, fingerprint, dist_timeout_from_environment(kDefaultDistTimeout));
  {
    Session s(compile_graph_file(graph_file, compile), session, comm.get());
    fn(config, s);
  }
  comm->barrier();
}

}  // namespace mg
