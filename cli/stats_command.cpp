// memsnap stats FILE [--json]
#include "cli/command.h"

#include <memory>

#include "cli/snapshot_input.h"
#include "viewer/snapshot_stats.h"

namespace memsnap::cli {

CommandRunner add_stats_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::string output;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "stats",
      "Summarize a snapshot (memsnap .msgpack/.json or PyTorch .pickle, gzip or not): reserved, "
      "allocated, active and requested bytes per device and stream, bytes by block state, "
      "segments and blocks by pool, fragmentation, and trace event counts.");
  command->add_option("FILE", options->file, "snapshot file")->required();
  command->add_flag("--json", options->json, "print one JSON object");
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    const LoadedSnapshot input = load_input(options->file);
    const SnapshotStats stats = compute_stats(input.snapshot);
    if (options->json)
      output.write_all(stats_to_json(stats, input.snapshot).dump() + "\n");
    else
      output.write_all(stats_to_text(stats, input.snapshot));
  };
}

}  // namespace memsnap::cli
