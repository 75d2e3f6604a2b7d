// memsnap: the command-line viewer. Every command reads its input, writes to -o or stdout,
// and on bad input prints one line (`memsnap: error: ...`) and exits with status 1 (2 for
// a malformed command line).
#include <vector>

#include "cli/command.h"
#include "cli/command_line.h"

int main(int argc, char** argv) {
  CLI::App app{"memsnap: understand GPU memory (allocator replay, snapshots, views)", "memsnap"};
  app.require_subcommand(1);
  app.footer(
      "Every command reads memsnap snapshots (.msgpack, .json) and PyTorch's (_dump_snapshot "
      "pickles, gzip or not).\n"
      "Coming from PyTorch's _memory_viz.py:\n"
      "  memory        ->  memsnap flamegraph FILE -o OUT.svg\n"
      "  segments      ->  memsnap flamegraph FILE --kind segments -o OUT.svg\n"
      "  trace_plot    ->  memsnap timeline FILE -o OUT.svg\n"
      "  segment_plot  ->  memsnap timeline FILE --kind segments -o OUT.svg\n"
      "  stats         ->  memsnap stats FILE\n"
      "  compare       ->  memsnap compare BEFORE AFTER -o OUT.svg\n"
      "  trace         ->  memsnap trace FILE\n"
      "or open them all in the browser with memsnap serve FILE...");
  app.set_version_flag("--version", "memsnap 0.1.0");
  std::vector<memsnap::cli::CommandRunner> commands = {
      memsnap::cli::add_replay_command(app),
      memsnap::cli::add_explain_oom_command(app),
      memsnap::cli::add_tune_command(app),
      memsnap::cli::add_estimate_command(app),
      memsnap::cli::add_growth_command(app),
      memsnap::cli::add_ranks_command(app),
      memsnap::cli::add_stats_command(app),
      memsnap::cli::add_flamegraph_command(app),
      memsnap::cli::add_folded_command(app),
      memsnap::cli::add_compare_command(app),
      memsnap::cli::add_segments_command(app),
      memsnap::cli::add_timeline_command(app),
      memsnap::cli::add_trace_command(app),
      memsnap::cli::add_convert_command(app),
      memsnap::cli::add_serve_command(app),
      memsnap::cli::add_record_command(app),
  };
  memsnap::cli::take_record_program(argc, argv);
  return memsnap::cli::run_command_line(app, commands, argc, argv, "memsnap --help");
}
