#include "snapshot/environment_recording.h"

#include <cstdio>
#include <utility>

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
  if (!environment.oom_snapshot.empty()) dump_snapshot_on_oom(allocator_, recorder_.get(), environment.oom_snapshot);
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

Result<std::unique_ptr<EnvironmentRecording>> record_from_environment(
    CachingAllocator& allocator, const std::function<const char*(const char*)>& lookup) {
  using Made = Result<std::unique_ptr<EnvironmentRecording>>;
  Result<RecordingEnvironment> environment = recording_environment(lookup);
  if (!environment) return Made::failure(environment.error());
  if (environment->stacks == StackChoice::kPython)
    return Made::failure("MEMSNAP_STACKS=python: this allocator records no Python frames (memsnap.torch does); "
                         "expected cpp or none");
  return Made(std::make_unique<EnvironmentRecording>(allocator, environment.value()));
}

}  // namespace memsnap
