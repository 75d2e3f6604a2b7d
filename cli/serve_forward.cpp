// `memsnap serve ...`: replaced by memsnap-serve ... (serve_command.h says why), the program
// built beside this one, with every word after `serve` (its own --help included).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/serve_command.h"

namespace memsnap::cli {
namespace {

std::filesystem::path serve_program() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw CommandError(std::string("memsnap serve: cannot find where memsnap is: ") + error.message());
  return self.parent_path() / "memsnap-serve";
}

}  // namespace

CommandRunner add_serve_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand("serve", kServeDescription);
  // Everything after `serve` is memsnap-serve's to parse, --help too.
  command->prefix_command();
  command->set_help_flag();
  command->allow_extras();
  return [command] {
    if (!command->parsed()) return;
    const std::filesystem::path program = serve_program();
    std::vector<std::string> words = {program.string()};
    for (const std::string& word : command->remaining()) words.push_back(word);
    std::vector<char*> argv;
    for (std::string& word : words) argv.push_back(word.data());
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    throw CommandError(program.string() + ": " + std::strerror(errno) +
                       " (memsnap serve runs it: build the memsnap-serve target beside memsnap)");
  };
}

}  // namespace memsnap::cli
