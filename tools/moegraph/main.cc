// moegraph: one binary, subcommands. Exit codes: 0 success, 2 bad input (flags, files, models),
// 1 internal failure.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/logging.h"
#include "framework/op/op_registry.h"
#include "framework/parallel/parallel_config.h"
#include "framework/parallel/process_launcher.h"
#include "ops/builtin_ops.h"
#include "tools/moegraph/commands.h"

namespace mg::cli {
Command add_import_hf_command(CLI::App& app);  // cmd_import_hf.cc
}  // namespace mg::cli

int main(int argc, char** argv) {
  mg::register_builtin_ops(mg::OpRegistry::global());
  CLI::App app{"moegraph: a graph-based Mixture-of-Experts inference engine", "moegraph"};
  app.require_subcommand(1);
  app.footer(
      "Several GPUs: --nproc-per-node N (anywhere on the line) starts N processes of the same "
      "command, one per GPU, with torchrun's environment; see docs/parallel.md");
  app.set_version_flag("--version", "moegraph 0.1.0");
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();

  std::vector<std::pair<CLI::App*, mg::cli::Command>> commands;
  for (auto add :
       {mg::cli::add_run_command, mg::cli::add_inspect_command, mg::cli::add_make_model_command,
        mg::cli::add_import_hf_command, mg::cli::add_tokenize_command, mg::cli::add_serve_command,
        mg::cli::add_bench_command}) {
    const size_t before = app.get_subcommands([](CLI::App*) { return true; }).size();
    mg::cli::Command run = add(app);
    auto subs = app.get_subcommands([](CLI::App*) { return true; });
    if (subs.size() > before) commands.emplace_back(subs.back(), std::move(run));
  }

  // --nproc-per-node N: this process only starts N copies of itself, one per GPU, with the
  // torchrun environment (framework/parallel/process_launcher.h), and waits for them.
  std::vector<std::string> args(argv, argv + argc);
  try {
    if (const std::optional<int> nproc = mg::take_nproc_per_node_flag(args, mg::kMaxRanks)) {
      MG_CHECK(std::getenv("RANK") == nullptr,
               "--nproc-per-node in a process a launcher started already (RANK is set)");
      args[0] = "/proc/self/exe";
      mg::LocalLaunchOptions launch;
      launch.nproc = *nproc;
      return mg::launch_local_processes(args, launch, mg::kMaxRanks);
    }
  } catch (const mg::Error& e) {
    std::cerr << "moegraph: error: " << e.what() << "\n";
    return 2;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error: "moegraph: error: --tp: 0 is out of range [1, 64] ...".
    std::cerr << "moegraph: error: " << e.what() << " (run 'moegraph --help' for usage)\n";
    return 2;
  }

  try {
    mg::log::set_level(mg::log::parse_level(log_level));
    for (auto& [sub, run] : commands) {
      if (sub->parsed()) return run();
    }
    return 2;
  } catch (const mg::Error& e) {
    std::cerr << "moegraph: error: " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    // An allocation the size checks let through (framework/core/checked_math.h) but the system
    // refused: the machine's state, not a bug.
    std::cerr << "moegraph: error: out of memory (free some memory, or use a smaller model, "
                 "--max-seq-len or --max-tokens)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "moegraph: internal error: " << e.what() << "\n";
    return 1;
  }
}
