#include "cli/command_line.h"

#include <iostream>
#include <new>

namespace memsnap::cli {

int run_command_line(CLI::App& app, const std::vector<CommandRunner>& commands, int argc, char** argv,
                     const char* help_hint) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --version arrive as "errors" with status 0; real usage errors get the same
    // one-line shape as every other error, with status 2 as is usual for bad usage.
    if (error.get_exit_code() == 0) return app.exit(error);
    std::cerr << "memsnap: error: " << error.what() << " (see " << help_hint << ")\n";
    return 2;
  }
  try {
    for (const CommandRunner& run : commands) run();
  } catch (const CommandExit& exit) {
    return exit.status();
  } catch (const std::bad_alloc&) {
    // Reading is held to a budget (snapshot/read_budget.h); what a command makes of a
    // snapshot can still need more than a process's limit (ulimit -v) allows.
    std::cerr << "memsnap: error: not enough memory to finish (the machine's, or this process's limit)\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "memsnap: error: " << error.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace memsnap::cli
