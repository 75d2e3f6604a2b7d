#include "viewer/oom_explanation.h"

#include "replay/recorded_config.h"

namespace memsnap {

Result<OomExplanation> explain_oom(const Snapshot& snapshot, std::optional<int64_t> device) {
  Result<OomState> state = oom_state(snapshot, device);
  if (!state) return Result<OomExplanation>::failure(state.error());
  OomExplanation x;
  static_cast<OomState&>(x) = std::move(state).value();
  // The same advice `memsnap tune` gives on this snapshot: one verdict for both commands.
  TuneOptions tune;
  tune.device = x.device;
  Result<SettingsAdvice> advice = tune_settings(snapshot, tune);
  if (advice)
    x.advice = std::move(advice).value();
  else
    x.advice_error = advice.error();
  if (x.private_pool_free_bytes > 0 && x.advice && !settings_cannot_help(x.diagnosis.cause)) {
    const Result<AllocatorConfig> recorded = recorded_allocator_config(snapshot);
    x.shared_graph_pool =
        replay_with_one_graph_pool(snapshot, x.device, x.entry, recorded ? recorded.value() : AllocatorConfig{});
  }
  return x;
}

}  // namespace memsnap
