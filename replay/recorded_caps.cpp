#include "replay/recorded_caps.h"

#include <algorithm>

namespace memsnap {

RecordedCaps::RecordedCaps(const Snapshot& snapshot, int64_t device, const AllocatorConfig&) {
  if (device < 0 || static_cast<size_t>(device) >= snapshot.trace_state_changes.size()) return;
  for (const TraceStateChange& change : snapshot.trace_state_changes[static_cast<size_t>(device)]) {
    if (change.kind != TraceStateKind::kMemoryCap) continue;
    std::string error;
    std::optional<MemoryCap> cap = parse_memory_cap_text(change.value, &error);
    if (!error.empty()) {
      problem_ = error;
      changes_.clear();
      return;
    }
    changes_.emplace_back(static_cast<size_t>(change.event_index), std::move(cap));
  }
  // Written from the recording's start: the first is the state the trace began in. A trace
  // whose first cap change comes later began with none.
  known_ = !changes_.empty();
}

const std::optional<MemoryCap>& RecordedCaps::at(size_t entry) const {
  auto after = std::upper_bound(changes_.begin(), changes_.end(), entry,
                                [](size_t e, const auto& change) { return e < change.first; });
  if (after == changes_.begin()) return none_;
  return std::prev(after)->second;
}

}  // namespace memsnap
