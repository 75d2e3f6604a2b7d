// memsnap explain-oom FILE [--device N] [--json]
#include "cli/command.h"

#include <memory>

#include "cli/snapshot_input.h"
#include "viewer/oom_explanation.h"

namespace memsnap::cli {

CommandRunner add_explain_oom_command(CLI::App& app) {
  struct Options {
    std::string file;
    std::string output;
    int64_t device = -1;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "explain-oom",
      "Explain an out-of-memory error from a snapshot taken at it (memsnap's or PyTorch's): what "
      "the request needed, whether the device was full or a cap refused, fragmentation, memory "
      "on other streams, the largest holders, and which settings the replay shows would have "
      "avoided it.");
  command->add_option("FILE", options->file, "snapshot file with an oom trace event")->required();
  command->add_option("--device", options->device, "the device whose last OOM to explain "
                                                   "(default: the latest OOM of any device)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  command->add_flag("--json", options->json, "print one JSON object");
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");
  return [command, options] {
    if (!command->parsed()) return;
    OutputWriter output(options->output);
    const LoadedSnapshot input = load_input(options->file);
    std::optional<int64_t> device;
    if (options->device >= 0) device = options->device;
    require_device(input, options->file, device);
    Result<OomExplanation> explanation = explain_oom(input.snapshot, device);
    if (!explanation) throw CommandError(explanation.error());
    output.write_all(options->json
                                      ? oom_explanation_to_json(explanation.value()).dump() + "\n"
                                      : oom_explanation_to_text(explanation.value()));
  };
}

}  // namespace memsnap::cli
