// Whether a replay under the recorded settings reproduced what the recording did: the condition
// for any advice drawn from replays (a setting is better only against a baseline that is the
// recording). It reproduced when the trace agreed with the snapshot, every allocation that
// succeeded in the recording succeeded again and every recorded out-of-memory error recurred,
// the same segment allocations were made in the same order and sizes, the segments at the end
// are the snapshot's, and the allocator's invariants held.
#pragma once

#include <string>

#include "replay/snapshot_replay.h"

namespace memsnap {

struct ReplayFidelity {
  bool reproduced = false;
  std::string shortfall;  // when not: what differed, as a clause ("it made 10 of the 12 ...")
  std::string words;      // when it did: "the replay under the recorded settings made the 12 segment allocations ..."
};

// `capacity_given`: the replay ran on a device of another size than the recording's, where a
// recorded out-of-memory error need not recur and the segments may differ; then only the
// trace's own consistency is asked.
ReplayFidelity replay_fidelity(const DeviceReplay& replay, bool capacity_given = false);

// A trace that records no segment of its own (memsnap.estimate's capture, a trace of requests):
// nothing to reproduce, the replay is the prediction.
bool records_segments(const DeviceReplay& replay);

}  // namespace memsnap
