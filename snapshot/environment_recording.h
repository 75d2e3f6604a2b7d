// The MEMSNAP_* recording variables (history/recording_environment.h) applied to a C++
// program's own allocator: one call after making it, and recording is then chosen by whoever
// runs the program.
//
//   memsnap::CachingAllocator allocator(backend, config);
//   auto recording = memsnap::record_from_environment(allocator);
//   if (!recording) { /* recording.error(): one line naming the variable */ }
//   ...  // the program; MEMSNAP_SNAPSHOT_AT_EXIT is written when `recording` goes away
//
// MEMSNAP_STACKS here takes cpp (the default; all means the same) or none: a C++ program has
// no Python frames.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/result.h"
#include "history/history_recorder.h"
#include "history/recording_environment.h"

namespace memsnap {

class EnvironmentRecording {
 public:
  EnvironmentRecording(CachingAllocator& allocator, const RecordingEnvironment& environment);
  // Writes the MEMSNAP_SNAPSHOT_AT_EXIT snapshot, if asked for and not written yet (a failure
  // is one line on stderr). Destroy it before the allocator (its recorder detaches from the
  // allocator); out-of-memory snapshots taken after that have no history.
  ~EnvironmentRecording();
  EnvironmentRecording(const EnvironmentRecording&) = delete;
  EnvironmentRecording& operator=(const EnvironmentRecording&) = delete;

  // The recorder (always there; recording only when MEMSNAP_HISTORY asked for it), for
  // dump_snapshot and annotations.
  HistoryRecorder& recorder() { return *recorder_; }
  // Writes the at-exit snapshot now; later calls and the destructor write nothing. A
  // one-line error on failure; nullopt also when none was asked for.
  std::optional<std::string> write_at_exit();

 private:
  CachingAllocator& allocator_;
  std::unique_ptr<HistoryRecorder> recorder_;
  std::string at_exit_;
};

// Why the files the variables name could not be written (MEMSNAP_OOM_SNAPSHOT's folder or
// MEMSNAP_SNAPSHOT_AT_EXIT's is missing or not writable), checked when they are read rather
// than at the first error; nullopt if they could.
std::optional<std::string> recording_output_problem(const RecordingEnvironment& environment);

// A bad value or an output that could not be written is a one-line error naming the variable.
Result<std::unique_ptr<EnvironmentRecording>> record_from_environment(
    CachingAllocator& allocator, const std::function<const char*(const char*)>& lookup = nullptr);

}  // namespace memsnap
