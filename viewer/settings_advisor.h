// Which allocator settings would have served a recorded run best: `memsnap tune`.
//
// Replays the snapshot's trace exactly under each candidate setting (expandable segments,
// max_split_size_mb, roundup_power2_divisions, garbage_collection_threshold, and their
// combinations) on the simulated device with the memory the recording had, and ranks them:
// a setting must make every recorded allocation succeed (and not run out of memory where the
// recording did, when it did); among those, the lowest peak reserved wins, then the fewest
// device allocations and retries, then the simplest setting. What users try by hand on GPUs,
// one run per setting, takes seconds here.
//
// A replay starts from the segments the trace began with, laid out as recorded; when no
// replay needed a segment beyond them, the settings changed nothing the replays can show,
// and the verdict is that it cannot judge. Nothing is recommended unless the replay under the
// recorded settings reproduced the recording (replay_fidelity.h), and a recorded
// out-of-memory error whose cause no setting can change (oom_cause.h: the request alone too
// large, too much live memory, other libraries' memory) is answered from that cause, the same
// sentence explain-oom gives.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator/allocator_config.h"
#include "allocator/result.h"
#include "snapshot/snapshot.h"
#include "viewer/oom_cause.h"
#include "viewer/verdict.h"

namespace memsnap {

struct TunedSetting {
  std::string config;     // as PYTORCH_CUDA_ALLOC_CONF takes it; "" = PyTorch's defaults
  bool recorded = false;  // the settings the run used
  bool ok = false;        // every allocation succeeded and no OOM recurred
  int64_t peak_reserved_bytes = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t device_mallocs = 0;
  int64_t alloc_retries = 0;
  size_t failed_allocs = 0;
};

enum class TuneVerdict {
  kChange,          // a setting tried reserves less (or avoids the recorded OOM)
  kKeep,            // none tried reserves less than the recorded settings
  kNoSettingWorks,  // none tried avoids the out-of-memory error (or none can: the cause says why)
  kCannotJudge,     // the replays cannot show what the settings change (SettingsAdvice::reason)
};
std::string_view tune_verdict_name(TuneVerdict verdict);  // "change", "keep", "no_setting_works", "cannot_judge"

struct SettingsAdvice {
  int64_t device = 0;
  size_t events = 0;
  bool recorded_oom = false;          // the recording ran out of memory
  std::optional<TunedSetting> recorded;  // the baseline: the recorded settings (or TuneOptions::baseline), replayed
  bool baseline_given = false;           // TuneOptions::baseline was set
  std::vector<TunedSetting> ranked;   // best first; settings that fail come last
  // Reserved in segments that existed before the trace's first event (it wrapped, or recording
  // started late). Every replay starts from them as recorded, whatever its settings: the
  // settings are compared on what the trace allocated beyond them.
  uint64_t reserved_before_trace_bytes = 0;
  TuneVerdict answer = TuneVerdict::kCannotJudge;
  // The conclusion every front end shows (kind kSettings; answer tune_verdict_name(answer)).
  Verdict verdict;
  // With a recorded out-of-memory error (and no capacity given): its cause (oom_cause.h). A
  // cause no setting can change is the answer without replaying other settings.
  std::optional<OomDiagnosis> oom;
  // With a capacity given and no setting working: why the baseline's first failure failed.
  std::optional<ReplayFailure> baseline_failure;
  uint64_t capacity_bytes = 0;  // the simulated device's memory in the replays
  std::string capacity_source;  // where it came from (DeviceReplay::capacity_source)
  std::optional<MemoryCap> memory_cap;  // the recorded cap the replays ran under, if any
  // Whether the replay under the recorded settings reproduced the recording (replay_fidelity.h):
  // without it, nothing is recommended.
  bool reproduced = false;
  std::string fidelity;               // what reproduced, or what did not
  std::string reason;                 // with kCannotJudge: why, as a clause
  std::string note;                   // caveats
  double seconds = 0;
};

struct TuneOptions {
  std::optional<int64_t> device;  // default: the device with the longest trace
  unsigned threads = 0;           // 0: the machine's cores
  // Memory of the simulated device; unset: what the recording had (replay's default).
  std::optional<size_t> capacity_bytes;
  // The settings the others are compared with; unset: the recorded ones.
  std::optional<AllocatorConfig> baseline;
};

// The candidate settings tried, as config strings.
std::vector<std::string> tune_candidates();

Result<SettingsAdvice> tune_settings(const Snapshot& snapshot, const TuneOptions& options = {});

// The verdict as the sentence the CLI, JSON ("conclusion") and web view all show.
std::string settings_advice_conclusion(const SettingsAdvice& advice);
nlohmann::json settings_advice_to_json(const SettingsAdvice& advice);
std::string settings_advice_to_text(const SettingsAdvice& advice, size_t shown = 12);

}  // namespace memsnap
