// How the memsnap CLI is put together: each command registers its subcommand and options
// with CLI11 and returns the function that runs it. A command reports bad input by
// throwing CommandError; main() turns it into one line on stderr and exit status 1.
#pragma once

#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

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

// Writes `text` to `path`, or to stdout when path is empty or "-". The file is written to a
// temporary name and renamed, so a failure never leaves a partial file behind.
void write_output(const std::string& path, const std::string& text);

// The same, for output written as it is made (a 3M-event trace is hundreds of megabytes of
// text): write() in pieces, then finish(), which renames the file into place. A writer that
// is not finished (an error on the way) removes its temporary file.
class OutputWriter {
 public:
  explicit OutputWriter(const std::string& path);
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;
  void write(std::string_view text);
  void finish();

 private:
  std::string path_;
  std::string temporary_;  // empty when writing to stdout, or once finished
  std::ofstream file_;
};

}  // namespace memsnap::cli
