// memsnap trace FILE [--device N] [--action A]... [--min-size B] [--address ADDR] [--limit N]
#include "cli/command.h"

#include <cinttypes>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "allocator/counted.h"
#include "cli/snapshot_input.h"
#include "viewer/frame_labels.h"
#include "viewer/svg/svg_text.h"

namespace memsnap::cli {
namespace {

uint64_t parse_address(const std::string& text) {
  uint64_t value = 0;
  const bool hex = text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0;
  const char* begin = text.c_str() + (hex ? 2 : 0);
  char* end = nullptr;
  errno = 0;
  value = std::strtoull(begin, &end, hex ? 16 : 10);
  if (text.empty() || *begin == '\0' || *end != '\0' || errno != 0 || *begin == '-')
    throw CommandError("--address: not an address: '" + text + "'");
  return value;
}

}  // namespace

CommandRunner add_trace_command(CLI::App& app) {
  struct Options {
    std::string file, output, address;
    std::optional<int64_t> device;
    std::vector<std::string> actions;
    uint64_t min_size = 0;
    uint64_t limit = 0;
    bool all_frames = false;
    bool stacks = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "trace",
      "Print the snapshot's event trace, one event per line: time, device, action, address, "
      "size, stream and the innermost visible frame (--stacks for whole stacks).");
  command->add_option("FILE", options->file, "snapshot file")->required();
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");
  command->add_option("--device", options->device, "only this device");
  command->add_option("--action", options->actions,
                      "only these actions (alloc, free_requested, free_completed, segment_alloc, "
                      "segment_free, segment_map, segment_unmap, oom, snapshot); repeatable");
  command->add_option("--min-size", options->min_size, "only events of at least this many bytes");
  command->add_option("--address", options->address,
                      "only events whose [address, address + size) contains this address (hex or decimal)");
  command->add_option("--limit", options->limit, "print at most this many events");
  command->add_flag("--stacks", options->stacks, "print each event's whole stack");
  command->add_flag("--all-frames", options->all_frames, "keep every frame in stacks");
  return [command, options] {
    if (!command->parsed()) return;
    std::vector<bool> wanted(kTraceActionCount, options->actions.empty());
    for (const std::string& name : options->actions) {
      const auto action = trace_action_from_name(name);
      if (!action) throw CommandError("--action: unknown action '" + name + "'");
      wanted[static_cast<size_t>(*action)] = true;
    }
    const bool by_address = !options->address.empty();
    const uint64_t address = by_address ? parse_address(options->address) : 0;
    OutputWriter writer(options->output);
    const LoadedSnapshot input = load_input(options->file);
    require_device(input, options->file, options->device);
    const Snapshot& snapshot = input.snapshot;
    FrameFilter filter;
    filter.keep_all = options->all_frames;
    // Each stack's text once, however many events share it: its headline, and with --stacks
    // its frames, a line each.
    std::vector<std::optional<std::string>> stack_text(snapshot.stacks.size() + 1);
    const auto text_of = [&](StackIndex stack) -> const std::string& {
      std::optional<std::string>& text = stack_text[stack < 0 ? snapshot.stacks.size() : static_cast<size_t>(stack)];
      if (text) return *text;
      const std::string headline = headline_label(snapshot, stack, filter);
      text = (headline.empty() ? std::string("<no stack>") : headline) + "\n";
      if (options->stacks) {
        const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, filter);
        for (auto it = frames.rbegin(); it != frames.rend(); ++it)
          *text += "        " + frame_label(snapshot.frames[*it], filter) + "\n";
      }
      return *text;
    };
    std::string out;
    uint64_t printed = 0, matched = 0;
    char line[256];
    for (size_t d = 0; d < snapshot.device_traces.size(); ++d) {
      if (options->device && static_cast<int64_t>(d) != *options->device) continue;
      const auto& trace = snapshot.device_traces[d];
      const int64_t first_time = trace.empty() ? 0 : trace.front().time_us;
      for (size_t index = 0; index < trace.size(); ++index) {
        const TraceEntry e = trace[index];
        if (!wanted[static_cast<size_t>(e.action)] || e.size < options->min_size) continue;
        if (by_address && !e.covers(address)) continue;
        ++matched;
        if (options->limit && printed >= options->limit) continue;
        ++printed;
        // The entry's index: the numbering of --at-event, the viewer's "at event" and the state API.
        std::snprintf(line, sizeof line, "#%-8zu %12.6f  dev %zu  %-15s 0x%-14" PRIx64 " %12s  stream 0x%" PRIx64 "  ",
                      index, static_cast<double>(e.time_us - first_time) / 1e6, d,
                      std::string(trace_action_name(e.action)).c_str(), e.address,
                      svg::human_bytes(e.size).c_str(), e.stream);
        out += line;
        out += text_of(e.stack);
        if (out.size() >= (size_t{1} << 20)) {
          writer.write(out);
          out.clear();
        }
      }
    }
    out += counted(matched, "event") + " matched" +
           (printed < matched ? " (" + std::to_string(printed) + " printed)" : std::string()) + "\n";
    writer.write(out);
    writer.finish();
  };
}

}  // namespace memsnap::cli
