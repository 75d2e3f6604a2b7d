// memsnap replay FILE [--config STR | --compare-configs A B ...] [--json]
// FILE is a snapshot (memsnap or PyTorch: its trace is replayed from the reconstructed start
// state) or an allocation trace in the text format of ../shared/bench/TRACE_FORMAT.md.
#include "cli/command.h"

#include <fstream>
#include <memory>

#include "cli/snapshot_input.h"
#include "replay/recorded_config.h"
#include "replay/replay_report.h"
#include "replay/snapshot_replay.h"
#include "replay/snapshot_replay_report.h"
#include "replay/trace_replay.h"

namespace memsnap::cli {
namespace {

struct Options {
  std::string file;
  std::string config;
  std::vector<std::string> compare_configs;
  std::string output;
  std::string address_hints = "auto";
  double capacity_gib = 80;
  bool json = false;
  bool config_given = false;  // --config '' asks for the defaults, not the recorded settings
  bool capacity_given = false;
};

// The text trace format starts with a record or a comment; every snapshot format starts with
// a binary tag, gzip's magic or '{'.
bool looks_like_text_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c = 0;
  while (in.get(c))
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c == 'a' || c == 'f' || c == '#';
  return false;  // empty or unreadable: the snapshot reader says which, as for every command
}

AllocatorConfig parse_config(const std::string& text) {
  Result<AllocatorConfig> config = parse_allocator_config(text);
  if (!config) throw CommandError(config.error());
  return config.value();
}

void replay_text_trace(const Options& options, OutputWriter& output) {
  const AllocatorConfig config = parse_config(options.config);
  if (!options.compare_configs.empty())
    throw CommandError("--compare-configs needs a snapshot (a text trace has no recorded settings)");
  Result<AllocationTrace> trace = read_allocation_trace(options.file);
  if (!trace) throw CommandError(trace.error());
  ReplayOptions replay;
  replay.config = config;
  if (options.capacity_given)
    replay.capacity_bytes = static_cast<size_t>(options.capacity_gib * double(1 << 30));
  replay.address_hints = options.address_hints == "on"    ? AddressHints::kOn
                         : options.address_hints == "off" ? AddressHints::kOff
                                                          : AddressHints::kAuto;
  const ReplayResult result = replay_trace(trace.value(), replay);
  if (options.json)
    output.write_all(replay_to_json(result).dump() + "\n");
  else
    output.write_all(replay_to_text(result, options.file));
  if (!result.invariant_problems.empty())
    throw CommandError("the allocator's invariants were violated during the replay");
}

SnapshotReplay run_replay(const Snapshot& snapshot, const AllocatorConfig& config,
                          const SnapshotReplayOptions& base) {
  SnapshotReplayOptions options = base;
  options.config = config;
  Result<SnapshotReplay> replay = replay_snapshot(snapshot, options);
  if (!replay) throw CommandError(replay.error());
  for (const DeviceReplay& d : replay->devices)
    if (!d.invariant_problems.empty())
      throw CommandError("the allocator's invariants were violated during the replay");
  return std::move(replay).value();
}

void replay_snapshot_file(const Options& options, OutputWriter& output) {
  const Snapshot snapshot = load_input(options.file).snapshot;
  Result<AllocatorConfig> recorded = recorded_allocator_config(snapshot);
  SnapshotReplayOptions base;
  if (options.capacity_given)
    base.capacity_bytes = static_cast<size_t>(options.capacity_gib * double(1 << 30));
  const std::string name = file_base_name(options.file);

  if (!options.compare_configs.empty()) {
    std::vector<SnapshotReplay> replays;
    std::vector<std::string> labels;
    if (recorded) {
      replays.push_back(run_replay(snapshot, recorded.value(), base));
      const std::string text = to_config_string(recorded.value());
      labels.push_back("recorded (" + (text.empty() ? std::string("defaults") : text) + ")");
    }
    for (const std::string& text : options.compare_configs) {
      replays.push_back(run_replay(snapshot, parse_config(text), base));
      labels.push_back(text.empty() ? "defaults" : text);
    }
    output.write_all(options.json
                                     ? replay_comparison_to_json(replays, labels).dump() + "\n"
                                     : replay_comparison_to_text(replays, labels, name));
    return;
  }
  AllocatorConfig config;
  if (options.config_given) {
    config = parse_config(options.config);
  } else if (recorded) {
    config = recorded.value();
    // A recording without caching (memsnap record's, or MEMSNAP_NO_CACHING) replayed as
    // recorded would only repeat it: the question is what a caching allocator would reserve.
    config.caching = true;
  } else {
    throw CommandError(recorded.error() + " (give the settings with --config)");
  }
  const SnapshotReplay replay = run_replay(snapshot, config, base);
  output.write_all(options.json ? snapshot_replay_to_json(replay).dump() + "\n"
                                            : snapshot_replay_to_text(replay, name));
  if (!replay.consistent())
    std::fprintf(stderr,
                 "memsnap: warning: the trace is inconsistent with the snapshot's final state; "
                 "the replay is an approximation\n");
}

}  // namespace

CommandRunner add_replay_command(CLI::App& app) {
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "replay",
      "Replay a recorded run on the simulated device and report the segments it reserves, peak "
      "memory, retries and out-of-memory errors: a snapshot's trace (from the allocator state "
      "it began in, under the recorded settings unless --config says otherwise), or an "
      "allocation trace in the text format (a <id> <bytes> <stream> / f <id> <stream>).");
  command->add_option("FILE", options->file, "snapshot (.msgpack, .pickle, .json) or text trace")
      ->required();
  command->add_option("--config", options->config,
                      "allocator settings, same grammar as MEMSNAP_ALLOC_CONF (default: the "
                      "snapshot's recorded settings; PyTorch's defaults for a text trace)");
  command->add_option("--compare-configs", options->compare_configs,
                      "replay a snapshot under the recorded settings and each of these, and "
                      "print one table (use '' for PyTorch's defaults)")
      ->excludes("--config");
  command->add_option("--capacity-gib", options->capacity_gib,
                      "memory of the simulated device in GiB (default: what the recording had "
                      "where known, else 80)");
  command->add_option("--address-hints", options->address_hints,
                      "text traces: give new segments the recorded addresses: auto (when ids "
                      "look like addresses), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  command->add_flag("--json", options->json, "print one JSON object");
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");

  return [command, options] {
    if (!command->parsed()) return;
    options->config_given = command->count("--config") > 0;
    options->capacity_given = command->count("--capacity-gib") > 0;
    if (options->capacity_given && !(options->capacity_gib > 0 && options->capacity_gib <= 1 << 20))
      throw CommandError("--capacity-gib must be between 0 and 1048576");
    OutputWriter output(options->output);
    if (looks_like_text_trace(options->file))
      replay_text_trace(*options, output);
    else
      replay_snapshot_file(*options, output);
  };
}

}  // namespace memsnap::cli
