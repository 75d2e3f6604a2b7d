// memsnap-serve: `memsnap serve`'s program (serve_command.h).
#include <vector>

#include "cli/command_line.h"
#include "cli/serve_command.h"

int main(int argc, char** argv) {
  CLI::App app{memsnap::cli::kServeDescription, "memsnap serve"};
  const std::vector<memsnap::cli::CommandRunner> commands = {memsnap::cli::add_serve_options(app)};
  return memsnap::cli::run_command_line(app, commands, argc, argv, "memsnap serve --help");
}
