// memsnap replay FILE.trace [--config STR] [--json]
#include "viewer/cli/command.h"

#include <memory>

#include "viewer/replay_report.h"
#include "viewer/trace_replay.h"

namespace memsnap::cli {

CommandRunner add_replay_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::string config;
    std::string output;
    std::string address_hints = "auto";
    double capacity_gib = 80;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "replay",
      "Replay an allocation trace (a <id> <bytes> <stream> / f <id> <stream>) through the caching "
      "allocator on the simulated device and report the segments it reserves, peak memory, "
      "retries and out-of-memory errors.");
  command->add_option("FILE", options->file, "allocation trace in the text format")->required();
  command->add_option("--config", options->config,
                      "allocator settings, same grammar as MEMSNAP_ALLOC_CONF (default: PyTorch's "
                      "defaults)");
  command->add_option("--capacity-gib", options->capacity_gib,
                      "memory of the simulated device in GiB (default 80)");
  command->add_option("--address-hints", options->address_hints,
                      "give new segments the recorded addresses: auto (when ids look like "
                      "addresses), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  command->add_flag("--json", options->json, "print one JSON object");
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");

  return [command, options] {
    if (!command->parsed()) return;
    Result<AllocatorConfig> config = parse_allocator_config(options->config);
    if (!config) throw CommandError(config.error());
    if (config->expandable_segments)
      throw CommandError("replay: expandable_segments:True is not supported by memsnap yet");
    if (!(options->capacity_gib > 0 && options->capacity_gib <= 1 << 20))
      throw CommandError("--capacity-gib must be between 0 and 1048576");
    Result<AllocationTrace> trace = read_allocation_trace(options->file);
    if (!trace) throw CommandError(trace.error());

    ReplayOptions replay;
    replay.config = config.value();
    replay.capacity_bytes = static_cast<size_t>(options->capacity_gib * double(1 << 30));
    replay.address_hints = options->address_hints == "on"    ? AddressHints::kOn
                           : options->address_hints == "off" ? AddressHints::kOff
                                                             : AddressHints::kAuto;
    const ReplayResult result = replay_trace(trace.value(), replay);
    if (options->json)
      write_output(options->output, replay_to_json(result).dump() + "\n");
    else
      write_output(options->output, replay_to_text(result, options->file));
    if (!result.invariant_problems.empty())
      throw CommandError("the allocator's invariants were violated during the replay");
  };
}

}  // namespace memsnap::cli
