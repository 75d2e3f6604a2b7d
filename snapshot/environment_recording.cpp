#include "snapshot/environment_recording.h"

#include <cstdio>
#include <utility>

#include "snapshot/output_file.h"
#include "snapshot/snapshot_file.h"

namespace memsnap {

EnvironmentRecording::EnvironmentRecording(CachingAllocator& allocator, const RecordingEnvironment& environment)
    : allocator_(allocator),
      recorder_(std::make_unique<HistoryRecorder>(allocator)),
      at_exit_(environment.snapshot_at_exit) {
  if (environment.level != HistoryLevel::kOff) {
    HistorySettings settings;
    settings.level = environment.level;
    settings.max_entries = environment.max_entries;
    settings.cpp_stacks = environment.stacks.value_or(StackChoice::kCpp) != StackChoice::kNone;
    recorder_->configure(settings);
  }
  if (environment.oom_snapshot.empty()) return;
  if (auto problem = dump_snapshot_on_oom(allocator_, recorder_.get(), environment.oom_snapshot))
    std::fprintf(stderr, "memsnap: MEMSNAP_OOM_SNAPSHOT: %s\n", problem->c_str());
}

EnvironmentRecording::~EnvironmentRecording() {
  if (const std::optional<std::string> error = write_at_exit())
    std::fprintf(stderr, "memsnap: MEMSNAP_SNAPSHOT_AT_EXIT: %s\n", error->c_str());
}

std::optional<std::string> EnvironmentRecording::write_at_exit() {
  if (at_exit_.empty()) return std::nullopt;
  const std::string path = std::exchange(at_exit_, std::string());
  return dump_snapshot(allocator_, recorder_.get(), path);
}

std::optional<std::string> recording_output_problem(const RecordingEnvironment& environment) {
  if (!environment.oom_snapshot.empty())
    if (auto problem = dump_pattern_problem(environment.oom_snapshot)) return "MEMSNAP_OOM_SNAPSHOT: " + *problem;
  if (!environment.snapshot_at_exit.empty())
    if (auto problem = output_path_problem(environment.snapshot_at_exit))
      return "MEMSNAP_SNAPSHOT_AT_EXIT: " + *problem;
  return std::nullopt;
}

Result<std::unique_ptr<EnvironmentRecording>> record_from_environment(
    CachingAllocator& allocator, const std::function<const char*(const char*)>& lookup) {
  using Made = Result<std::unique_ptr<EnvironmentRecording>>;
  Result<RecordingEnvironment> environment = recording_environment(lookup);
  if (!environment) return Made::failure(environment.error());
  if (environment->stacks == StackChoice::kPython)
    return Made::failure("MEMSNAP_STACKS=python: this allocator records no Python frames (memsnap.torch does); "
                         "expected cpp or none");
  if (auto problem = recording_output_problem(environment.value())) return Made::failure(*problem);
  return Made(std::make_unique<EnvironmentRecording>(allocator, environment.value()));
}

}  // namespace memsnap
