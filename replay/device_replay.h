// One device's part of a snapshot replay (snapshot_replay.h): its trace run through memsnap's
// caching allocator on a simulated device, from the state the snapshot implies at the trace's
// start, recording what it reserved against what the recording reserved.
#pragma once

#include "allocator/allocator_config.h"
#include "replay/snapshot_replay.h"
#include "snapshot/snapshot.h"

namespace memsnap {

// Replays device `device`'s trace under `options`; `recorded` are the recording's own settings,
// which size the blocks live at the start. Throws std::invalid_argument for settings the
// allocator cannot honour.
DeviceReplay replay_device(const Snapshot& snapshot, int device, const SnapshotReplayOptions& options,
                           const AllocatorConfig& recorded);

// Trace actions that reserve memory (a segment or an expandable mapping) and that give it back.
bool is_segment_growth(TraceAction action);
bool is_segment_shrink(TraceAction action);

}  // namespace memsnap
