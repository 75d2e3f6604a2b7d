// Whether a program's allocations fit a device: `memsnap estimate`.
//
// The trace (a capture of a training step made without allocating it, memsnap.estimate, or any
// recording) is replayed through the caching allocator's simulation on a device of the given
// size, under the given settings, as PyTorch would serve it there: per step, the peak allocated
// and reserved bytes; the first request the device could not serve, with the stack that made
// it, where the program would have raised torch.OutOfMemoryError (the replay ends there, as the
// program would); the share of reserved memory that was free at the reserved peak; and tune's
// advice for that device (settings_advisor.h).
//
// Steps are the capture's "estimate step N" annotations (START to END); a recording without them
// is one step. What comes before the first step (building the model and the optimizer) is the
// setup.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator/result.h"
#include "snapshot/snapshot.h"
#include "viewer/oom_cause.h"
#include "viewer/settings_advisor.h"
#include "viewer/verdict.h"

namespace memsnap {

// Memory a named GPU gives the caching allocator, for `--device NAME`.
struct DevicePreset {
  std::string name;             // "H200"
  uint64_t total_bytes = 0;     // torch.cuda.get_device_properties(0).total_memory
  uint64_t context_bytes = 0;   // held outside the allocator once a training step has run
  std::string measured;         // where the figures come from
  uint64_t capacity_bytes() const { return total_bytes - context_bytes; }
};
const std::vector<DevicePreset>& device_presets();
// The preset a name stands for (case and spaces ignored: "h200", "H100 80GB", "h100-80gb"), or
// a one-line error naming the known ones.
Result<DevicePreset> find_device_preset(const std::string& name);

struct FitOptions {
  // What the allocator may reserve on the device; 0: the recording's own device and cap (then
  // a recorded out-of-memory error recurs where it happened, with explain-oom's cause, and the
  // advice is memsnap tune's).
  uint64_t capacity_bytes = 0;
  std::string capacity_source;         // how the capacity was chosen, for the report
  std::optional<std::string> settings;  // PYTORCH_CUDA_ALLOC_CONF; unset: the snapshot's own
  std::optional<int64_t> device;       // default: the device with the longest trace
  bool tune = true;                    // also rank other settings on this device
  // Check that a replay of a recording under its own settings reproduces it (replay_fidelity.h)
  // before answering; the estimate's own inner replays skip it.
  bool check_replay = true;
};

struct StepFit {
  std::string name;  // "setup", "estimate step 1", ...
  uint64_t first_entry = 0, end_entry = 0;  // [first, end) of the trace
  uint64_t allocated_at_start_bytes = 0;  // live when the step began
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  bool completed = true;  // false: the device ran out of memory in it
};

// The first allocation the device could not serve.
struct FitFailure {
  uint64_t entry = 0;
  std::string step;
  uint64_t requested_bytes = 0;
  uint64_t stream = 0;
  uint64_t allocated_bytes = 0;  // then, after the allocator freed its cache to retry
  uint64_t reserved_bytes = 0;
  std::string site;                 // the user's line (frame_labels.h's headline)
  std::vector<std::string> frames;  // innermost first
  OomDiagnosis cause;               // why it failed there (oom_cause.h)
  // The whole trace replayed under the same settings on a device with no limit: what the
  // program needs. The allocated peak above the capacity means no setting can make it fit.
  uint64_t unlimited_peak_requested_bytes = 0;  // the requests' own bytes: the same under any settings
  uint64_t unlimited_peak_allocated_bytes = 0;
  uint64_t unlimited_peak_reserved_bytes = 0;
};

struct FitEstimate {
  int64_t device = 0;
  uint64_t capacity_bytes = 0;
  std::string capacity_source;
  std::optional<MemoryCap> memory_cap;  // on the recording's own device: the cap it ran under
  std::string settings;  // as a config string; "" = PyTorch's defaults
  uint64_t entries = 0;  // trace entries replayed
  uint64_t peak_requested_bytes = 0;  // bytes the live allocations asked for, before rounding
  uint64_t peak_allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;
  // While reserved memory stood at its peak: the least share of it no allocation held (at every
  // moment of the peak at least this much was cached free).
  double free_at_reserved_peak = 0;
  int64_t device_mallocs = 0;
  int64_t alloc_retries = 0;
  std::vector<StepFit> steps;  // the setup first, when there is one
  std::optional<FitFailure> failure;
  std::optional<SettingsAdvice> advice;
  std::string advice_error;  // why there is no advice, when tune could not run
  // Whether a replay of a recorded run under its own settings reproduced it (replay_fidelity.h);
  // a trace of requests (memsnap.estimate's capture) has nothing to reproduce.
  bool reproduced = true;
  std::string fidelity;
  // "fits", "does_not_fit", or cannot_judge (a recording the replays do not reproduce).
  Verdict verdict;
  bool fits() const { return !failure.has_value(); }
};

Result<FitEstimate> estimate_fit(const Snapshot& snapshot, const FitOptions& options);

// The verdict (estimate_fit ends with it): fits with how much to spare, where it runs out and
// why, or that it cannot judge.
void decide_fit(FitEstimate& estimate);
// Its sentence.
std::string fit_estimate_verdict(const FitEstimate& estimate);
nlohmann::json fit_estimate_to_json(const FitEstimate& estimate);
std::string fit_estimate_to_text(const FitEstimate& estimate);

}  // namespace memsnap
