// The changes of what a device's events are recorded under (trace_state.h), kept beside its
// event ring (trace_ring.h): each change names the sequence number of the first event recorded
// after it, so it still lands on the right event once older events have left the ring.
//
// Bounded by what the ring holds: changes older than the ring's oldest event fold into the
// state they leave behind, and changes with no event between them keep only the last.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "history/trace_state.h"

namespace memsnap {

class TraceStateLog {
 public:
  // `value` holds from the event numbered `next_sequence` on; `oldest_kept` is the sequence of
  // the ring's oldest event (older changes are folded away).
  void set(TraceStateKind kind, std::string value, uint64_t next_sequence, uint64_t oldest_kept,
           std::string request = {});
  // The value now, when one was ever set.
  const std::optional<std::string>& current(TraceStateKind kind) const {
    return current_[static_cast<size_t>(kind)];
  }
  // The changes as a trace of the events numbered [first, first + count) sees them: for each
  // kind ever set, its value at the first event (index 0), then every change within, in order.
  std::vector<TraceStateChange> changes_for(uint64_t first, uint64_t count) const;

 private:
  struct Change {
    uint64_t sequence;
    TraceStateKind kind;
    std::string value;
    std::string request;
  };
  void fold_before(uint64_t sequence);

  std::array<std::optional<std::string>, kTraceStateKindCount> base_;     // before changes_
  std::array<std::optional<std::string>, kTraceStateKindCount> current_;  // after changes_
  std::vector<Change> changes_;  // in order of sequence
};

}  // namespace memsnap
