// Why an allocation failed, in plain words: the analysis behind `memsnap explain-oom` and the
// web viewer's OOM view.
//
// From a snapshot taken at (or after) an out-of-memory error — memsnap's or PyTorch's; the
// `oom` trace entry holds the request and the device's free bytes — it shows the state at the
// error and its cause (oom_state.h, decided in oom_cause.h), and which settings would have
// avoided it: the advice of `memsnap tune` on the same snapshot (settings_advisor.h), so the two
// commands say the same thing. With CUDA graph pools holding the memory, it also replays the
// graphs sharing one pool.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allocator/result.h"
#include "snapshot/snapshot.h"
#include "viewer/oom_state.h"
#include "viewer/settings_advisor.h"
#include "viewer/shared_graph_pool.h"

namespace memsnap {

struct OomExplanation : OomState {
  // The settings advice on this snapshot's device (tune_settings): replays under the candidate
  // settings, ranked, and its verdict; advice_error when the trace cannot be replayed.
  std::optional<SettingsAdvice> advice;
  std::string advice_error;
  // With two CUDA graph pools or more: the replay with one pool shared by the graphs.
  std::optional<SharedGraphPool> shared_graph_pool;
};

// Explains the last `oom` entry (of `device` when given). Fails when there is none.
Result<OomExplanation> explain_oom(const Snapshot& snapshot, std::optional<int64_t> device = {});

nlohmann::json oom_explanation_to_json(const OomExplanation& explanation);
std::string oom_explanation_to_text(const OomExplanation& explanation);

}  // namespace memsnap
