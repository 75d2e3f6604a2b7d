// Takes a Snapshot of a live allocator: its segments and blocks on every device, statistics,
// settings, and — when a HistoryRecorder watches it — each block's history, the traces and
// annotations, with every stack symbolized (once per distinct address per process).
//
// Frames inside memsnap itself (the allocator and recorder, innermost on every captured
// stack) are left out: stacks start at the user's call.
#pragma once

#include <functional>
#include <optional>

#include "allocator/caching_allocator.h"
#include "allocator/out_of_memory.h"
#include "history/history_recorder.h"
#include "snapshot/process_identity.h"
#include "snapshot/snapshot.h"

namespace memsnap {

struct SnapshotOptions {
  JobPlace job;  // what is unset comes from $RANK, $LOCAL_RANK, $WORLD_SIZE (process_identity.h)
  bool include_traces = true;
  // Marks the moment in each device's trace (a `snapshot` entry, at history level "all"), so a
  // trace read later shows when each snapshot was taken. PyTorch's own snapshots
  // (torch.cuda.memory._snapshot, _dump_snapshot) add none; memsnap.torch answers them without.
  bool mark_in_trace = true;
  // The out-of-memory error this snapshot is taken for: its device's trace ends with the `oom`
  // entry even when history was off or kept no such entry, so explain-oom can read the request.
  std::optional<OomInfo> oom;
  // Completes the snapshot before take_snapshot returns it, after the allocator's locks are
  // let go (memsnap.torch adds the memory other libraries of the process hold).
  std::function<void(Snapshot&)> complete;
};

// Locks each device briefly, one at a time; safe to call from an OOM observer (which runs
// without the allocator lock) and allocates no device memory.
Snapshot take_snapshot(CachingAllocator& allocator, HistoryRecorder* recorder,
                       const SnapshotOptions& options = {});

}  // namespace memsnap
