// memsnap tune FILE [--device N] [--capacity-gib G] [--json] [--top N]
#include "cli/command.h"

#include <memory>

#include "cli/snapshot_input.h"
#include "viewer/settings_advisor.h"

namespace memsnap::cli {

CommandRunner add_tune_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::string output;
    std::optional<int64_t> device;
    size_t top = 12;
    double capacity_gib = 0;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "tune",
      "Find the allocator settings that would have served a recorded run best: replays its trace "
      "exactly under each combination of expandable_segments, max_split_size_mb, "
      "roundup_power2_divisions and garbage_collection_threshold, and recommends the one with "
      "the lowest peak reserved memory that makes every allocation succeed (and avoids a "
      "recorded out-of-memory error), with the saving and its cost in device mallocs and retries.");
  command->add_option("FILE", options->file, "snapshot with a trace (history at level 'all')")->required();
  command->add_option("--device", options->device, "the device to tune (default: the one with the longest trace)");
  command->add_option("--capacity-gib", options->capacity_gib,
                      "memory of the simulated device in GiB (default: what the recording had "
                      "where known, else 80)")
      ->check(CLI::Range(1.0 / 1024, double(1 << 20)));
  command->add_option("--top", options->top, "settings to list (default 12)")->check(CLI::Range(size_t{1}, size_t{1000}));
  command->add_flag("--json", options->json, "print one JSON object (every setting tried)");
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    const LoadedSnapshot input = load_input(options->file);
    require_device(input, options->file, options->device);
    TuneOptions tune;
    tune.device = options->device;
    if (command->count("--capacity-gib") > 0)
      tune.capacity_bytes = static_cast<size_t>(options->capacity_gib * double(1 << 30));
    Result<SettingsAdvice> advice = tune_settings(input.snapshot, tune);
    if (!advice) throw CommandError(options->file + ": " + advice.error());
    output.write_all(options->json ? settings_advice_to_json(advice.value()).dump() + "\n"
                                                : settings_advice_to_text(advice.value(), options->top));
  };
}

}  // namespace memsnap::cli
