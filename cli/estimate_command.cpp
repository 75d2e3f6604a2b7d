// memsnap estimate FILE [--device NAME | --capacity-gib G] [--settings S] [--no-tune] [--json]
//   (without a device: a recording on its own device and cap)
// memsnap estimate SCRIPT.py ...   (runs python3 -m memsnap.estimate: the capture needs torch)
#include "cli/command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "cli/snapshot_input.h"
#include "viewer/byte_text.h"
#include "viewer/fit_estimate.h"

namespace memsnap::cli {
namespace {

struct EstimateOptions {
  std::string file;
  std::string device_name;
  double capacity_gib = 0;
  std::string settings;
  std::string output;
  int steps = 3;
  std::string batch_sizes;
  std::string save;
  bool no_tune = false;
  bool json = false;
};

bool is_estimate_script(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".py") == 0;
}

// A script is captured by the memsnap Python package, in the Python that has torch.
[[noreturn]] void run_python_estimate(const EstimateOptions& options, const CLI::App& command) {
  const char* python = std::getenv("MEMSNAP_PYTHON");
  const std::string interpreter = python != nullptr && *python != '\0' ? python : "python3";
  std::vector<std::string> words = {interpreter, "-m", "memsnap.estimate", options.file};
  if (command.count("--device") > 0) words.insert(words.end(), {"--device", options.device_name});
  if (command.count("--capacity-gib") > 0) words.insert(words.end(), {"--capacity-gib", std::to_string(options.capacity_gib)});
  if (command.count("--settings") > 0) words.insert(words.end(), {"--settings", options.settings});
  if (command.count("--steps") > 0) words.insert(words.end(), {"--steps", std::to_string(options.steps)});
  if (command.count("--batch-sizes") > 0) words.insert(words.end(), {"--batch-sizes", options.batch_sizes});
  if (command.count("--save") > 0) words.insert(words.end(), {"--save", options.save});
  if (options.no_tune) words.push_back("--no-tune");
  if (options.json) words.push_back("--json");
  if (!options.output.empty()) words.insert(words.end(), {"-o", options.output});
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp(argv[0], argv.data());
  throw CommandError("cannot run " + interpreter + " (" + std::strerror(errno) +
                     "): a script is captured by the memsnap Python package, in a Python that has torch "
                     "(set MEMSNAP_PYTHON to choose it)");
}

}  // namespace

CommandRunner add_estimate_command(CLI::App& app) {
  auto options = std::make_shared<EstimateOptions>();
  CLI::App* command = app.add_subcommand(
      "estimate",
      "Will it fit? Replays a program's allocations on a device of the given size, as PyTorch's "
      "caching allocator would serve them there: each step's peak allocated and reserved bytes, "
      "the first allocation that fails with its stack, and the settings that reserve least on "
      "that device (without one, a recording's own device and cap). FILE is a capture of training steps made without allocating them "
      "(memsnap.estimate, or a SCRIPT.py that defines step(), captured here by the memsnap Python "
      "package) or any snapshot with a trace.");
  command->add_option("FILE", options->file, "capture or snapshot (.pickle, .msgpack, .json), or SCRIPT.py")
      ->required();
  auto* device = command->add_option("--device", options->device_name,
                                     "the GPU by name (H200), with the memory its CUDA context keeps");
  auto* capacity = command->add_option("--capacity-gib", options->capacity_gib,
                                       "the memory the allocator may reserve, in GiB (a memory cap, or the "
                                       "device's free memory once its context is up)")
                       ->check(CLI::Range(1.0 / 1024, double(1 << 20)));
  device->excludes(capacity);
  command->add_option("--settings", options->settings,
                      "allocator settings as PYTORCH_CUDA_ALLOC_CONF takes them (default: the capture's)");
  command->add_option("--steps", options->steps, "SCRIPT.py: training steps to capture (default 3)")
      ->check(CLI::Range(1, 1000));
  command->add_option("--batch-sizes", options->batch_sizes,
                      "SCRIPT.py: capture at each of these batch sizes (8,16,32) and name the largest that fits");
  command->add_option("--save", options->save, "SCRIPT.py: also write the capture to this new file (for every view)");
  command->add_flag("--no-tune", options->no_tune, "do not rank other settings");
  command->add_flag("--json", options->json, "print one JSON object");
  command->add_option("-o,--output", options->output, "write to this file instead of stdout");
  return [command, options] {
    if (!command->parsed()) return;
    if (is_estimate_script(options->file)) run_python_estimate(*options, *command);
    if (command->count("--steps") > 0 || command->count("--batch-sizes") > 0 || command->count("--save") > 0)
      throw CommandError("--steps, --batch-sizes and --save are for a SCRIPT.py; " + options->file +
                         " is captured already");
    FitOptions fit;
    if (command->count("--device") > 0) {
      Result<DevicePreset> preset = find_device_preset(options->device_name);
      if (!preset) throw CommandError(preset.error());
      fit.capacity_bytes = preset->capacity_bytes();
      fit.capacity_source = preset->name + ": " + text::bytes(preset->total_bytes) + " less " +
                            text::bytes(preset->context_bytes) + " for the CUDA context, " +
                            preset->measured;
    } else if (command->count("--capacity-gib") > 0) {
      fit.capacity_bytes = static_cast<uint64_t>(options->capacity_gib * double(1 << 30));
      fit.capacity_source = "given";
    } else if (!is_estimate_script(options->file)) {
      // A recording on its own device: where it ran out of memory, why, and tune's advice, as
      // explain-oom and tune say them.
      fit.capacity_bytes = 0;
    }
    if (command->count("--settings") > 0) fit.settings = options->settings;
    fit.tune = !options->no_tune;
    OutputWriter output(options->output);
    const LoadedSnapshot input = load_input(options->file);
    Result<FitEstimate> estimate = estimate_fit(input.snapshot, fit);
    if (!estimate) throw CommandError(options->file + ": " + estimate.error());
    output.write_all(options->json ? fit_estimate_to_json(estimate.value()).dump() + "\n"
                                   : fit_estimate_to_text(estimate.value()));
  };
}

}  // namespace memsnap::cli
