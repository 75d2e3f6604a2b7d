// Parses a command line and runs the command it names, the same way in every memsnap binary
// (`memsnap` and `memsnap-serve`): a malformed command line is one line on stderr and status 2,
// bad input (CommandError, or any exception) one `memsnap: error:` line and status 1.
#pragma once

#include <vector>

#include "cli/command.h"

namespace memsnap::cli {

// `help_hint` names the help to read after a usage error ("memsnap --help").
int run_command_line(CLI::App& app, const std::vector<CommandRunner>& commands, int argc, char** argv,
                     const char* help_hint);

}  // namespace memsnap::cli
