// memsnap flamegraph FILE -o OUT.svg [--kind memory|segments]
// memsnap folded FILE [--kind memory|segments]
// memsnap compare BEFORE AFTER -o OUT.svg [--segments]
#include "cli/command.h"

#include <memory>

#include "allocator/counted.h"
#include "cli/snapshot_input.h"
#include "viewer/memory_views.h"
#include "viewer/svg/flamegraph_svg.h"
#include "viewer/svg/svg_text.h"

namespace memsnap::cli {
namespace {

struct ViewFlags {
  std::optional<int64_t> device;
  bool all_frames = false;
  void add_to(CLI::App* command) {
    command->add_option("--device", device, "only this device");
    command->add_flag("--all-frames", all_frames,
                      "keep every frame (by default the capture machinery and interpreter "
                      "internals are left out, as PyTorch's viewer does)");
  }
  ViewOptions options() const {
    ViewOptions o;
    o.device = device;
    o.frames.keep_all = all_frames;
    return o;
  }
};

FlameTree view_tree(const Snapshot& snapshot, const std::string& kind, const ViewOptions& options) {
  return kind == "segments" ? segments_flamegraph(snapshot, options) : memory_flamegraph(snapshot, options);
}

}  // namespace

CommandRunner add_flamegraph_command(CLI::App& app) {
  struct Options {
    std::string file, output, kind = "memory";
    int width = 1200;
    ViewFlags flags;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "flamegraph",
      "Draw an interactive flamegraph SVG of a snapshot's memory: by block state, then by the "
      "stack that allocated it (--kind memory, PyTorch's `memory`), or under each stream and "
      "segment (--kind segments). Hover for the full stack, click to zoom, Search to highlight.");
  command->add_option("FILE", options->file, "snapshot file")->required();
  command->add_option("-o,--output", options->output, "SVG file to write (default: stdout)");
  command->add_option("--kind", options->kind, "memory (default) or segments")
      ->check(CLI::IsMember({"memory", "segments"}));
  command->add_option("--width", options->width, "image width in pixels (400-10000)")
      ->check(CLI::Range(400, 10000));
  options->flags.add_to(command);
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    const LoadedSnapshot input = load_input(options->file);
    require_device(input, options->file, options->flags.device);
    const FlameTree tree = view_tree(input.snapshot, options->kind, options->flags.options());
    svg::FlamegraphOptions render;
    render.title = (options->kind == "segments" ? "Memory by segment: " : "Memory by state and stack: ") +
                   file_base_name(options->file);
    render.subtitle = svg::human_bytes(tree.total_bytes()) + " reserved in " +
                      std::to_string(input.snapshot.segments.size()) + " segments";
    render.width = options->width;
    output.write_all(svg::render_flamegraph(tree, render));
  };
}

CommandRunner add_folded_command(CLI::App& app) {
  struct Options {
    std::string file, output, kind = "memory";
    ViewFlags flags;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "folded",
      "Print folded stacks (`frame;frame;frame bytes`, outermost frame first) for flamegraph.pl, "
      "speedscope, inferno and other flamegraph tools.");
  command->add_option("FILE", options->file, "snapshot file")->required();
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");
  command->add_option("--kind", options->kind, "memory (default) or segments")
      ->check(CLI::IsMember({"memory", "segments"}));
  options->flags.add_to(command);
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    const LoadedSnapshot input = load_input(options->file);
    require_device(input, options->file, options->flags.device);
    output.write_all(view_tree(input.snapshot, options->kind, options->flags.options()).folded());
  };
}

CommandRunner add_compare_command(CLI::App& app) {
  struct Options {
    std::string before, after, output;
    int width = 1200;
    bool segments = false;
    ViewFlags flags;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "compare",
      "Compare two snapshots: print reserved and allocated before and after and how many segments "
      "are found only before or only after (--segments lists them), and draw a differential "
      "flamegraph of allocated bytes by stack (red grew, blue shrank; width is before + after).");
  command->add_option("BEFORE", options->before, "the earlier snapshot")->required();
  command->add_option("AFTER", options->after, "the later snapshot")->required();
  command->add_option("-o,--output", options->output, "SVG file to write (the summary goes to stdout)")->required();
  command->add_option("--width", options->width, "image width in pixels (400-10000)")
      ->check(CLI::Range(400, 10000));
  command->add_flag("--segments", options->segments, "list the segments found only before or only after");
  options->flags.add_to(command);
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    const LoadedSnapshot before = load_input(options->before);
    const LoadedSnapshot after = load_input(options->after);
    require_device(before, options->before, options->flags.device);
    require_device(after, options->after, options->flags.device);
    const Comparison comparison = compare_snapshots(before.snapshot, after.snapshot, options->flags.options());
    // The summary first; the segments, which can run to hundreds of lines, on request.
    std::string summary = "reserved: " + svg::human_bytes(comparison.before_reserved) + " -> " +
                          svg::human_bytes(comparison.after_reserved) + "\nallocated: " +
                          svg::human_bytes(comparison.before_allocated) + " -> " +
                          svg::human_bytes(comparison.after_allocated) + " (" +
                          svg::human_bytes_signed(static_cast<int64_t>(comparison.after_allocated) -
                                                  static_cast<int64_t>(comparison.before_allocated)) + ")\n";
    std::string listed;
    auto list = [&](const char* title, const std::vector<const SnapshotSegment*>& segments) {
      uint64_t bytes = 0;
      for (const SnapshotSegment* s : segments) bytes += s->total_size;
      summary += std::string(title) + ": " + counted(segments.size(), "segment") + ", " + svg::human_bytes(bytes) + "\n";
      if (!options->segments || segments.empty()) return;
      listed += std::string("\n") + title + ":\n";
      for (const SnapshotSegment* s : segments) {
        char line[160];
        std::snprintf(line, sizeof line, "  device %lld  0x%llx  %s  %s pool, %s allocated\n",
                      static_cast<long long>(s->device), static_cast<unsigned long long>(s->address),
                      svg::human_bytes(s->total_size).c_str(), s->segment_type.c_str(),
                      svg::human_bytes(s->allocated_size).c_str());
        listed += line;
      }
    };
    list("only before", comparison.only_before);
    list("only after", comparison.only_after);
    if (!options->segments && !(comparison.only_before.empty() && comparison.only_after.empty()))
      summary += "(--segments lists them)\n";
    summary += listed;
    svg::FlamegraphOptions render;
    render.differential = true;
    render.width = options->width;
    render.title = "Allocated memory by stack: " + file_base_name(options->before) + " \u2192 " + file_base_name(options->after);
    render.subtitle = svg::human_bytes(comparison.before_allocated) + " \u2192 " +
                      svg::human_bytes(comparison.after_allocated) + "; " +
                      std::to_string(comparison.only_before.size()) + " segments only before, " +
                      std::to_string(comparison.only_after.size()) + " only after";
    output.write_all(svg::render_flamegraph(comparison.allocated_by_stack, render));
    OutputWriter("").write_all(summary);
  };
}

}  // namespace memsnap::cli
