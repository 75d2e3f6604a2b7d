// memsnap ranks FILE_OR_DIR... [--rank-pattern RE] [--outlier-percent P] [--json]
#include "cli/command.h"

#include <memory>

#include "cli/snapshot_input.h"
#include "snapshot/snapshot_files.h"
#include "snapshot/snapshot_loader.h"
#include "viewer/job_ranks.h"

namespace memsnap::cli {

CommandRunner add_ranks_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> paths;
    std::string output;
    std::string rank_pattern;
    double outlier_percent = 20;
    size_t threads = 0;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "ranks",
      "Compare the ranks of a distributed job: one snapshot per rank (files, or folders searched for "
      "them), a row each with peak and final reserved and allocated memory, fragmentation, segments, "
      "retries and OOMs; which rank ran out of memory; and the ranks that reserve more (or less) than "
      "the median rank, with the call sites that differ most from it.");
  command->add_option("FILE_OR_DIR", options->paths, "snapshots, or folders holding them")->required();
  command->add_option("--rank-pattern", options->rank_pattern,
                      "regular expression whose first group is the rank in a file name, for snapshots "
                      "without one (PyTorch pickles); default: 'rank3', 'rank_3' or a final '_3'");
  command->add_option("--outlier-percent", options->outlier_percent,
                      "flag ranks whose peak reserved is this far from the median rank's (default 20)")
      ->check(CLI::Range(0.0, 10000.0));
  command->add_option("--threads", options->threads, "snapshots read at once (default: the cores, at most 8)")
      ->check(CLI::Range(size_t{1}, size_t{256}));
  command->add_flag("--json", options->json, "print one JSON object");
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    Result<std::vector<std::string>> files = expand_snapshot_paths(options->paths);
    if (!files) throw CommandError(files.error());
    JobRanksOptions job_options;
    job_options.rank_pattern = options->rank_pattern;
    job_options.outlier_percent = options->outlier_percent;
    job_options.threads = options->threads;
    job_options.progress = files_progress(files.value().size());
    const PickleReadOptions read = job_read_options(files.value().size(), job_options);
    const SnapshotLoader load = [read](const std::string& file) -> Result<std::shared_ptr<const Snapshot>> {
      Result<LoadedSnapshot> loaded = load_snapshot(file, read);
      if (!loaded) return Result<std::shared_ptr<const Snapshot>>::failure(loaded.error());
      return std::make_shared<const Snapshot>(std::move(std::move(loaded).value().snapshot));
    };
    Result<JobRanks> job = summarize_job(files.value(), load, job_options);
    if (!job) throw CommandError(job.error());
    output.write_all(options->json ? job_ranks_to_json(job.value()).dump() + "\n"
                                                : job_ranks_to_text(job.value()));
  };
}

}  // namespace memsnap::cli
