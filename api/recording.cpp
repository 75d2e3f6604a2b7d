#include "memsnap/recording.h"

#include <memory>
#include <utility>

#include "api/allocator_shared.h"
#include "history/history_recorder.h"
#include "snapshot/environment_recording.h"
#include "snapshot/snapshot_file.h"

namespace memsnap {

// The allocator's state is held first, so the recorder (which detaches from the allocator
// when destroyed) goes before it.
struct Recording::State {
  std::shared_ptr<Allocator::Shared> shared;
  std::unique_ptr<HistoryRecorder> own_recorder;           // Recording(allocator, options)
  std::unique_ptr<EnvironmentRecording> from_environment;  // Recording::from_environment
  HistoryRecorder* recorder = nullptr;

  explicit State(std::shared_ptr<Allocator::Shared> watched) : shared(std::move(watched)) {
    if (shared->recorded.exchange(true))
      throw Error("memsnap::Recording: this allocator already has a Recording");
  }
  ~State() {
    from_environment.reset();  // writes MEMSNAP_SNAPSHOT_AT_EXIT while the recorder is there
    own_recorder.reset();
    shared->recorded.store(false);
  }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

namespace {

HistorySettings history_settings(const RecordingOptions& options) {
  if (options.max_entries == 0 || options.max_entries > kMaxEnvironmentEntries)
    throw Error("memsnap::RecordingOptions::max_entries: expected 1 to " + std::to_string(kMaxEnvironmentEntries) +
                ", not " + std::to_string(options.max_entries));
  HistorySettings settings;
  settings.level = options.trace ? HistoryLevel::kAll : HistoryLevel::kState;
  settings.max_entries = options.max_entries;
  switch (options.stacks) {
    case RecordingOptions::Stacks::kNone:
      settings.cpp_stacks = false;
      break;
    case RecordingOptions::Stacks::kDwarf:
      settings.unwinder = StackUnwinder::kDwarf;
      break;
    case RecordingOptions::Stacks::kFramePointers:
      settings.unwinder = StackUnwinder::kFramePointers;
      break;
    default:
      throw Error("memsnap::RecordingOptions::stacks: not a RecordingOptions::Stacks");
  }
  return settings;
}

}  // namespace

Recording::Recording(std::unique_ptr<State> state) : state_(std::move(state)) {}

Recording::Recording(Allocator& allocator, RecordingOptions options) {
  const HistorySettings settings = history_settings(options);
  allocator.shared();  // throws for a moved-from allocator
  auto state = std::make_unique<State>(allocator.shared_);
  state->own_recorder = std::make_unique<HistoryRecorder>(state->shared->allocator);
  state->recorder = state->own_recorder.get();
  state->recorder->configure(settings);
  state_ = std::move(state);
}

Recording Recording::from_environment(Allocator& allocator) {
  allocator.shared();
  auto state = std::make_unique<State>(allocator.shared_);
  auto made = record_from_environment(state->shared->allocator);
  if (!made) throw Error(made.error());
  state->from_environment = std::move(made).value();
  state->recorder = &state->from_environment->recorder();
  return Recording(std::move(state));
}

Recording::~Recording() = default;
Recording::Recording(Recording&&) noexcept = default;
Recording& Recording::operator=(Recording&&) noexcept = default;

void Recording::write_snapshot(const std::string& path) const {
  if (!state_) throw Error("memsnap::Recording: used after it was moved from");
  if (auto error = dump_snapshot(state_->shared->allocator, state_->recorder, path)) throw Error(*error);
}

void Recording::write_snapshot_on_out_of_memory(const std::string& pattern) {
  if (!state_) throw Error("memsnap::Recording: used after it was moved from");
  if (auto error = dump_snapshot_on_oom(state_->shared->allocator, state_->recorder, pattern)) throw Error(*error);
}

void Recording::annotate(const std::string& name, bool start) {
  if (!state_) throw Error("memsnap::Recording: used after it was moved from");
  state_->recorder->annotate(name, start);
}

Recording::Phase::Phase(Recording& recording, std::string name) : recording_(recording), name_(std::move(name)) {
  recording_.annotate(name_, true);
}

Recording::Phase::~Phase() {
  if (recording_.state_) recording_.state_->recorder->annotate(name_, false);
}

}  // namespace memsnap
