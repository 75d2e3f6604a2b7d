// How the memsnap CLI is put together: each command registers its subcommand and options
// with CLI11 and returns the function that runs it. A command reports bad input by
// throwing CommandError; main() turns it into one line on stderr and exit status 1.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "snapshot/output_file.h"

namespace memsnap::cli {

class CommandError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Ends memsnap with `status` and no message: a command that runs a program (record) exits as
// the program did.
class CommandExit {
 public:
  explicit CommandExit(int status) : status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

using CommandRunner = std::function<void()>;

CommandRunner add_replay_command(CLI::App& app);
CommandRunner add_explain_oom_command(CLI::App& app);
CommandRunner add_tune_command(CLI::App& app);
CommandRunner add_estimate_command(CLI::App& app);
CommandRunner add_growth_command(CLI::App& app);
CommandRunner add_ranks_command(CLI::App& app);
CommandRunner add_stats_command(CLI::App& app);
CommandRunner add_flamegraph_command(CLI::App& app);
CommandRunner add_folded_command(CLI::App& app);
CommandRunner add_compare_command(CLI::App& app);
CommandRunner add_segments_command(CLI::App& app);
CommandRunner add_timeline_command(CLI::App& app);
CommandRunner add_trace_command(CLI::App& app);
CommandRunner add_convert_command(CLI::App& app);
CommandRunner add_serve_command(CLI::App& app);
CommandRunner add_record_command(CLI::App& app);
// `memsnap record [OPTIONS] -- COMMAND...`: takes the words after "--" (the program's, which may
// look like memsnap's options) off the command line before it is parsed. Other commands: nothing.
void take_record_program(int& argc, char** argv);

// Where a command's output goes: the file `path` (snapshot/output_file.h: written whole or not
// at all, never through a planted link, a FIFO or device written through, a directory
// refused), or standard output when path is empty or "-". Made before the command's work, so
// a path that cannot be written fails at once. write() in pieces (a 3M-event trace is
// hundreds of megabytes of text), then finish(); a writer that is not finished (an error on
// the way) removes its temporary file and leaves the destination as it was.
class OutputWriter {
 public:
  explicit OutputWriter(const std::string& path);
  void write(std::string_view text);
  void finish();
  // write(text), then finish().
  void write_all(std::string_view text) {
    write(text);
    finish();
  }

 private:
  std::optional<OutputFile> file_;  // none: standard output
};

}  // namespace memsnap::cli
