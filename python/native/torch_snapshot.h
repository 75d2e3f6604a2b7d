// A memsnap snapshot as the dictionary torch.cuda.memory._snapshot() returns: the same keys,
// value types and frame dictionaries ({"filename", "line", "name"}), so _dump_snapshot's
// pickle opens in PyTorch's _memory_viz.py and its web viewer, and scripts written against
// PyTorch's snapshots keep working.
#pragma once

#include <pybind11/pybind11.h>

#include "allocator/allocator_config.h"
#include "snapshot/snapshot.h"

namespace memsnap::pytorch {

pybind11::dict to_torch_snapshot(const Snapshot& snapshot, const AllocatorConfig& config);

}  // namespace memsnap::pytorch
