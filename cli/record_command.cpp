// memsnap record [options] [--] COMMAND [ARGS...]: runs a CUDA program with memsnap's recorder
// injected through CUDA_INJECTION64_PATH (record/injection.cpp) and lists the snapshots it
// wrote. The program's exit status is memsnap's; its signals (TERM, HUP, USR1, USR2) are passed
// on to it, and a terminal's Ctrl-C reaches it directly.
#include "cli/command.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "record/record_settings.h"
#include "snapshot/snapshot_file.h"

#ifndef MEMSNAP_RECORD_INSTALLED_LIBRARY
#define MEMSNAP_RECORD_INSTALLED_LIBRARY "../lib/libmemsnap_record.so"
#endif

namespace memsnap::cli {
namespace {

namespace fs = std::filesystem;

// The injected library: $MEMSNAP_RECORD_LIBRARY, else beside this binary as built (the build
// tree's record/) or as installed (the install prefix's library folder).
std::string record_library() {
  if (const char* given = std::getenv("MEMSNAP_RECORD_LIBRARY"); given != nullptr && *given != '\0') {
    if (!fs::is_regular_file(given)) throw CommandError(std::string("MEMSNAP_RECORD_LIBRARY=") + given + ": no such file");
    return fs::absolute(given).string();
  }
  std::error_code error;
  const fs::path binary = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    for (const fs::path& relative : {fs::path("../record/libmemsnap_record.so"),
                                    fs::path(MEMSNAP_RECORD_INSTALLED_LIBRARY)}) {
      const fs::path candidate = (binary.parent_path() / relative).lexically_normal();
      if (fs::is_regular_file(candidate, error)) return candidate.string();
    }
  }
  throw CommandError(
      "cannot find libmemsnap_record.so beside " + binary.string() +
      " (this memsnap was built without the CUDA toolkit's CUPTI headers, or the library was moved; "
      "set MEMSNAP_RECORD_LIBRARY to its path)");
}

// A pattern the program writes relative to its own working folder, which it may change: made
// absolute here, where the user typed it.
std::string absolute_pattern(const std::string& pattern) {
  if (pattern.empty() || pattern == "off" || pattern.front() == '/') return pattern;
  return (fs::current_path() / pattern).string();
}

// Why `path` is not a shared library to load (missing, not a regular file, not ELF); nullopt if it may be.
std::optional<std::string> shared_library_problem(const std::string& path) {
  if (path.empty()) return std::string("is empty: expected the path of the CUPTI library");
  std::error_code error;
  if (!fs::is_regular_file(path, error)) return path + ": no such file";
  char magic[4] = {};
  std::ifstream file(path, std::ios::binary);
  if (!file.read(magic, sizeof magic) || std::string_view(magic, 4) != "\x7f" "ELF")
    return path + ": not a shared library (no ELF header)";
  return std::nullopt;
}

std::atomic<pid_t> child{-1};  // read by the signal handler below

struct ProgramNotRun : CommandError {
  using CommandError::CommandError;
};

// The words after `memsnap record ... --`, taken off the command line before CLI11 sees it.
std::vector<std::string>& program_after_separator() {
  static std::vector<std::string> words;
  return words;
}

void pass_on(int signal) {
  if (const pid_t program = child.load(); program > 0) kill(program, signal);
}

int run(const std::vector<std::string>& command, const std::map<std::string, std::string>& variables) {
  std::vector<char*> argv;
  for (const std::string& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  // exec's failure comes back through a pipe that a successful exec closes.
  int exec_error[2];
  if (pipe2(exec_error, O_CLOEXEC) != 0) throw CommandError(std::string("cannot make a pipe: ") + std::strerror(errno));
  child = fork();
  if (child < 0) throw CommandError(std::string("cannot start the program: ") + std::strerror(errno));
  if (child == 0) {
    close(exec_error[0]);
    for (const auto& [name, value] : variables) setenv(name.c_str(), value.c_str(), 1);
    execvp(argv[0], argv.data());
    const int error = errno;
    (void)!write(exec_error[1], &error, sizeof error);
    _exit(127);
  }
  close(exec_error[1]);
  int error = 0;
  ssize_t got = 0;
  while ((got = read(exec_error[0], &error, sizeof error)) < 0 && errno == EINTR) {
  }
  close(exec_error[0]);
  if (got == static_cast<ssize_t>(sizeof error)) {
    waitpid(child, nullptr, 0);
    throw ProgramNotRun("cannot run " + command[0] + ": " + std::strerror(error));
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction forward {};
  forward.sa_handler = pass_on;
  sigemptyset(&forward.sa_mask);
  for (int signal : {SIGINT, SIGQUIT}) sigaction(signal, &ignore, nullptr);
  for (int signal : {SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaction(signal, &forward, nullptr);
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) throw CommandError(std::string("lost the program: ") + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

// The options below that take a value as the next word.
constexpr std::string_view kValueOptions[] = {"-o", "--output", "--oom", "--oom-limit", "--stacks",
                                              "--max-entries", "--signal", "--cupti"};

void take_record_program(int& argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "record") != 0) return;
  for (int i = 2; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "--") {
      program_after_separator().assign(argv + i + 1, argv + argc);
      argc = i;
      return;
    }
    if (!word.starts_with("-")) return;  // the program starts here, without a separator
    if (std::find(std::begin(kValueOptions), std::end(kValueOptions), word) != std::end(kValueOptions)) ++i;
  }
}

CommandRunner add_record_command(CLI::App& app) {
  struct Options {
    std::string output = "memsnap-record-{pid}.msgpack";
    std::string oom_output = "memsnap-record-{pid}-oom-{n}.msgpack";
    std::string oom_limit;
    std::string stacks = "cpp";
    std::string max_entries;
    std::string signal;
    std::string cupti;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "record",
      "Run a CUDA program and record every allocation and free it makes through the CUDA runtime "
      "or driver (cudaMalloc, cudaMallocAsync, cudaMallocManaged, cuMemAlloc, cuMemMap, ...), with "
      "C++ stacks, into memsnap snapshots: at exit, at each failed allocation, and on a signal. "
      "Nothing in the program changes: CUDA itself loads the recorder (CUPTI, through "
      "CUDA_INJECTION64_PATH), into every CUDA process the command starts. Each allocation is a "
      "block of its own, so `memsnap replay` tells what PyTorch's caching allocator would have "
      "reserved for the same requests.\nUsage: memsnap record [OPTIONS] [--] COMMAND [ARGS...]");
  command->add_option("-o,--output", options->output,
                      "snapshot written at exit: a pattern with {pid}, {n}, {host}, {rank}; .pickle for "
                      "PyTorch's format; off for none")
      ->capture_default_str();
  command->add_option("--oom", options->oom_output, "snapshot written at each failed allocation (off: none)")
      ->capture_default_str();
  command->add_option("--oom-limit", options->oom_limit,
                      "at most this many --oom snapshots per process (default 10); later errors are "
                      "still in the trace");
  command->add_option("--stacks", options->stacks, "cpp or none")->capture_default_str();
  command->add_option("--max-entries", options->max_entries, "calls kept per device (default 1000000)");
  command->add_option("--signal", options->signal,
                      "also write the -o snapshot when the program gets this signal: USR1 or USR2 (it "
                      "goes on), HUP, INT, QUIT or TERM (it then ends as it would)");
  command->add_option("--cupti", options->cupti, "the CUPTI library to use (default: searched)");
  // Everything from the first word that is not one of these options is the program's.
  command->prefix_command();
  return [command, options] {
    if (!command->parsed()) return;
    std::vector<std::string> program = command->remaining();
    if (!program.empty() && program.front().starts_with("-"))
      throw CommandError("record: unknown option " + program.front() + " (the program goes after --)");
    for (const std::string& word : program_after_separator()) program.push_back(word);
    if (program.empty()) throw CommandError("record: no program to run (memsnap record -- COMMAND ...)");

    std::map<std::string, std::string> variables = {
        {"MEMSNAP_RECORD_OUTPUT", absolute_pattern(options->output)},
        {"MEMSNAP_RECORD_OOM", absolute_pattern(options->oom_output)},
        {"MEMSNAP_RECORD_STACKS", options->stacks},
    };
    if (!options->max_entries.empty()) variables["MEMSNAP_RECORD_MAX_ENTRIES"] = options->max_entries;
    if (!options->oom_limit.empty()) variables["MEMSNAP_RECORD_OOM_LIMIT"] = options->oom_limit;
    if (command->count("--signal") > 0) variables["MEMSNAP_RECORD_SIGNAL"] = options->signal;
    if (command->count("--cupti") > 0) {
      if (auto problem = shared_library_problem(options->cupti)) throw CommandError("--cupti " + *problem);
      variables["MEMSNAP_RECORD_CUPTI"] = fs::absolute(options->cupti).string();
    }
    // The same parser the recorder runs: a bad option is one line here, before the program starts.
    const Result<RecordSettings> checked = record_settings([&](const char* name) -> const char* {
      auto it = variables.find(name);
      return it == variables.end() ? nullptr : it->second.c_str();
    });
    if (!checked) throw CommandError("record: " + checked.error());
    // Where the snapshots go is checked before the program runs, not when it ends.
    for (const auto& [option, pattern] : {std::pair{"-o", &checked->output}, std::pair{"--oom", &checked->oom_output}}) {
      if (pattern->empty()) continue;
      if (auto problem = dump_pattern_problem(*pattern)) throw CommandError(std::string("record: ") + option + " " + *problem);
    }
    variables["CUDA_INJECTION64_PATH"] = record_library();
    char report_template[] = "/tmp/memsnap-record-XXXXXX";
    const int report_fd = mkstemp(report_template);
    if (report_fd < 0) throw CommandError(std::string("cannot make a temporary file: ") + std::strerror(errno));
    close(report_fd);
    const std::string report = report_template;
    variables["MEMSNAP_RECORD_REPORT"] = report;
    if (const char* previous = std::getenv("CUDA_INJECTION64_PATH"); previous != nullptr && *previous != '\0')
      std::cerr << "memsnap record: replacing CUDA_INJECTION64_PATH=" << previous << "\n";

    int status = 0;
    try {
      status = run(program, variables);
    } catch (const ProgramNotRun& error) {
      std::remove(report.c_str());
      std::cerr << "memsnap: error: " << error.what() << "\n";
      throw CommandExit(127);  // as a shell says a program is not there
    }
    std::vector<std::string> written;
    size_t lost = 0;  // snapshots the recorder could not write (it said why on stderr)
    std::ifstream lines(report);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("!")) ++lost;
      else if (!line.empty()) written.push_back(line);
    }
    std::remove(report.c_str());
    std::vector<std::string> distinct = written;
    std::sort(distinct.begin(), distinct.end());
    for (auto it = std::adjacent_find(distinct.begin(), distinct.end()); it != distinct.end();
         it = std::adjacent_find(std::upper_bound(it, distinct.end(), *it), distinct.end()))
      std::cerr << "memsnap record: " << *it << " was written more than once, by several processes or "
                   "snapshots (the last is kept): put {pid}, {rank} or {n} in the pattern\n";
    if (written.empty() && lost == 0)
      std::cerr << "memsnap record: no snapshot written (the program never initialized CUDA, or the "
                   "recorder said why above)\n";
    else if (!written.empty())
      std::cerr << "memsnap record: " << written.size() << (written.size() == 1 ? " snapshot" : " snapshots")
                << " written; view with: memsnap serve " << written.back() << "\n";
    if (status != 0) throw CommandExit(status);
    if (lost > 0)
      throw CommandError(std::to_string(lost) + (lost == 1 ? " snapshot" : " snapshots") +
                         " not written (the recorder said why above)");
  };
}

}  // namespace memsnap::cli
