// memsnap convert IN OUT
#include "cli/command.h"

#include <memory>

#include "snapshot/json_writer.h"
#include "snapshot/msgpack_writer.h"
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
      "Convert a snapshot between memsnap's .msgpack and .json (PyTorch's field names, frames "
      "expanded); PyTorch .pickle files (gzip or not) are read. The output format follows "
      "OUT's extension unless --to says.");
  command->add_option("IN", options->input, "snapshot file (any format memsnap reads)")->required();
  command->add_option("OUT", options->output, "file to write: .msgpack or .json ('-' for stdout with --to)")->required();
  command->add_option("--to", options->to, "msgpack or json")->check(CLI::IsMember({"msgpack", "json"}));
  return [command, options] {
    if (!command->parsed()) return;
    std::string to = options->to;
    if (to.empty()) {
      if (ends_with(options->output, ".msgpack")) to = "msgpack";
      else if (ends_with(options->output, ".json")) to = "json";
      else if (ends_with(options->output, ".pickle"))
        throw CommandError(options->output + ": memsnap reads PyTorch pickles but does not write them; use .msgpack or .json");
      else
        throw CommandError(options->output + ": unknown output format (use .msgpack or .json, or --to)");
    }
    const LoadedSnapshot input = load_input(options->input);
    write_output(options->output, to == "json" ? to_json(input.snapshot).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"
                                               : to_msgpack(input.snapshot));
  };
}

}  // namespace memsnap::cli
