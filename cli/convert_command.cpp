// memsnap convert IN OUT
#include "cli/command.h"

#include <memory>

#include "snapshot/json_writer.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "cli/snapshot_input.h"

namespace memsnap::cli {
namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

CommandRunner add_convert_command(CLI::App& app) {
  struct Options {
    std::string input, output, to;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "convert",
      "Convert a snapshot between memsnap's .msgpack, .json (PyTorch's field names, frames "
      "expanded) and PyTorch's .pickle (as torch.cuda.memory._dump_snapshot writes it, for "
      "PyTorch's own viewers); .pickle files are read gzipped or not. The output format "
      "follows OUT's extension unless --to says.");
  command->add_option("IN", options->input, "snapshot file (any format memsnap reads)")->required();
  command->add_option("OUT", options->output, "file to write: .msgpack, .json or .pickle ('-' for stdout with --to)")->required();
  command->add_option("--to", options->to, "msgpack, json or pickle")->check(CLI::IsMember({"msgpack", "json", "pickle"}));
  return [command, options] {
    if (!command->parsed()) return;
    std::string to = options->to;
    if (to.empty()) {
      if (ends_with(options->output, ".msgpack")) to = "msgpack";
      else if (ends_with(options->output, ".json")) to = "json";
      else if (ends_with(options->output, ".pickle")) to = "pickle";
      else
        throw CommandError(options->output + ": unknown output format (use .msgpack, .json or .pickle, or --to)");
    }
    // Written as it is made: a large snapshot's file is never held whole.
    OutputWriter out(options->output);
    const LoadedSnapshot input = load_input(options->input);
    const ByteSink sink = [&](std::string_view piece) { out.write(piece); };
    if (to == "json") {
      write_json(input.snapshot, sink);
      out.write("\n");
    } else if (to == "pickle") {
      write_pytorch_pickle(input.snapshot, sink);
    } else {
      write_msgpack(input.snapshot, sink);
    }
    out.finish();
  };
}

}  // namespace memsnap::cli
