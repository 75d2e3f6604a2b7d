// Per-block history for snapshots that carry none (PyTorch's 2.x pickles): the allocations the
// trace shows living in a block's bytes, so a free block says what last held it (a cuDNN
// workspace, an activation) instead of "no stack recorded".
#pragma once

#include "snapshot/snapshot.h"

namespace memsnap {

inline constexpr size_t kTraceHistoryPerBlock = 4;

// For every block with no history: the last kTraceHistoryPerBlock allocations of its device's
// trace that started inside it, oldest first. Blocks with a history keep theirs.
void add_history_from_trace(Snapshot& snapshot);

}  // namespace memsnap
