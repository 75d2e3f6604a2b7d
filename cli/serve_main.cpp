// memsnap-serve: `memsnap serve`'s program (serve_command.h).
#include <malloc.h>

#include <vector>

#include "cli/command_line.h"
#include "cli/serve_command.h"

int main(int argc, char** argv) {
  // A view of a large snapshot works in arrays of tens of megabytes that it frees when done.
  // glibc would serve such arrays from its heap after the first is freed (its mmap threshold
  // grows to their size) and keep the freed pages: a server that drew one view would hold its
  // memory for good. Fixed at 1 MiB, each large array is its own mapping, returned when freed.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  CLI::App app{memsnap::cli::kServeDescription, "memsnap serve"};
  const std::vector<memsnap::cli::CommandRunner> commands = {memsnap::cli::add_serve_options(app)};
  return memsnap::cli::run_command_line(app, commands, argc, argv, "memsnap serve --help");
}
