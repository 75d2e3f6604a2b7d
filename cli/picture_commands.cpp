// memsnap segments FILE -o OUT.svg
// memsnap timeline FILE -o OUT.svg
#include "cli/command.h"

#include <memory>

#include "cli/snapshot_input.h"
#include "replay/snapshot_replay.h"
#include "viewer/svg/segments_svg.h"
#include "viewer/svg/timeline_svg.h"
#include "viewer/timeline.h"

namespace memsnap::cli {
CommandRunner add_segments_command(CLI::App& app) {
  struct Options {
    std::string file, output;
    std::optional<int64_t> device;
    std::optional<uint64_t> at_event;
    int width = 1200;
    bool all_frames = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "segments",
      "Draw every segment as a tower of its blocks (lowest address at the bottom, coloured by "
      "state) as an interactive SVG: see how allocations pack into segments and where free "
      "space is stranded. Hover a block for its stack.");
  command->add_option("FILE", options->file, "snapshot file")->required();
  command->add_option("-o,--output", options->output, "SVG file to write (default: stdout)");
  command->add_option("--device", options->device, "only this device");
  command->add_option("--at-event", options->at_event,
                      "the segments as they were right after this entry of the device's trace "
                      "(PyTorch's device_traces[device][N]), rebuilt by replaying the trace");
  command->add_option("--width", options->width, "image width in pixels (400-10000)")->check(CLI::Range(400, 10000));
  command->add_flag("--all-frames", options->all_frames, "keep every frame in stacks");
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    LoadedSnapshot input = load_input(options->file);
    require_device(input, options->file, options->device);
    svg::SegmentsOptions render;
    render.title = "Segments: " + file_base_name(options->file);
    if (options->at_event) {
      const int64_t device = options->device.value_or(0);
      Result<StateAfterEntry> state = state_after_entry(input.snapshot, device, *options->at_event);
      if (!state) throw CommandError(options->file + ": " + state.error());
      const TraceEntry& entry = input.snapshot.device_traces[static_cast<size_t>(device)][*options->at_event];
      render.title += " after event " + std::to_string(*options->at_event) + " (" +
                      std::string(trace_action_name(entry.action)) + ")" +
                      (state->exact ? "" : ", replayed inexactly");
      input.snapshot.segments = std::move(state.value().segments);
      render.device = device;
    }
    render.width = options->width;
    if (!options->at_event) render.device = options->device;
    render.frames.keep_all = options->all_frames;
    output.write_all(svg::render_segments(input.snapshot, render));
  };
}

CommandRunner add_timeline_command(CLI::App& app) {
  struct Options {
    std::string file, output;
    std::optional<int64_t> device;
    int width = 1200;
    size_t bands = 500;
    std::string kind = "active";
    bool all_frames = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "timeline",
      "Draw memory over time from the snapshot's trace as an interactive SVG: active memory "
      "stacked by allocation (PyTorch's trace_plot), or with --kind segments reserved memory "
      "stacked by segment and expandable mapping (its segment_plot). The allocations that "
      "make most of the picture get their own band, which keeps its place while it lives, in "
      "its call site's colour; the rest merge (by call site for the largest); out-of-memory "
      "errors and annotations are marked on the event axis.");
  command->add_option("FILE", options->file, "snapshot file")->required();
  command->add_option("-o,--output", options->output, "SVG file to write (default: stdout)");
  command->add_option("--device", options->device, "device to draw (default: the one with the longest trace)");
  command->add_option("--bands", options->bands, "allocations drawn on their own (1-2000, default 500)")
      ->check(CLI::Range(1, 2000));
  command->add_option("--kind", options->kind, "active (allocations) or segments (reserved memory)")
      ->check(CLI::IsMember({"active", "segments"}));
  command->add_option("--width", options->width, "image width in pixels (400-10000)")->check(CLI::Range(400, 10000));
  command->add_flag("--all-frames", options->all_frames, "keep every frame in stacks");
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    const LoadedSnapshot input = load_input(options->file);
    require_device(input, options->file, options->device);
    if (options->device && static_cast<size_t>(*options->device) >= input.snapshot.device_traces.size())
      throw CommandError(options->file + ": no trace for device " + std::to_string(*options->device));
    TimelineOptions timeline_options;
    timeline_options.device = options->device;
    timeline_options.max_bands = options->bands;
    const bool segments = options->kind == "segments";
    timeline_options.kind = segments ? TimelineKind::kSegments : TimelineKind::kActive;
    const Timeline timeline = compute_timeline(input.snapshot, timeline_options);
    svg::TimelineSvgOptions render;
    render.title = std::string(segments ? "Reserved memory by segment: " : "Active memory timeline: ") +
                   file_base_name(options->file);
    render.width = options->width;
    render.frames.keep_all = options->all_frames;
    output.write_all(svg::render_timeline(input.snapshot, timeline, render));
  };
}

}  // namespace memsnap::cli
