// memsnap growth FILE [--device N] [--annotation NAME] [--json]
#include "cli/command.h"

#include <memory>

#include "cli/snapshot_input.h"
#include "viewer/growth.h"

namespace memsnap::cli {

CommandRunner add_growth_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::string output;
    std::optional<int64_t> device;
    std::string annotation;
    size_t top = 20;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "growth",
      "Find memory that grows steadily from step to step (leaks), by the call site that allocates "
      "it. Steps come from annotations that repeat (PyTorch's ProfilerStep#N, record_function, "
      "memsnap's annotate) or, without them, from the allocation site that recurs most evenly. "
      "Memory allocated before the trace began (a wrapped ring) is counted; it says it cannot "
      "judge when fewer than 5 steps can be compared, the trace has no frees, or its microsecond "
      "clock cannot place the step starts.");
  command->add_option("FILE", options->file, "snapshot with a trace (history at level 'all')")->required();
  command->add_option("--device", options->device, "the device (default: the one with the longest trace)");
  command->add_option("--annotation", options->annotation, "take steps from annotations starting with this name");
  command->add_option("--top", options->top, "call sites to list (default 20)")->check(CLI::Range(size_t{1}, size_t{1000}));
  command->add_flag("--json", options->json, "print one JSON object");
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    const LoadedSnapshot input = load_input(options->file);
    require_device(input, options->file, options->device);
    GrowthOptions growth_options;
    growth_options.device = options->device;
    growth_options.annotation = options->annotation;
    growth_options.max_sites = options->top;
    Result<Growth> growth = compute_growth(input.snapshot, growth_options);
    if (!growth) throw CommandError(options->file + ": " + growth.error());
    output.write_all(options->json ? growth_to_json(input.snapshot, growth.value()).dump() + "\n"
                                                : growth_to_text(input.snapshot, growth.value()));
  };
}

}  // namespace memsnap::cli
