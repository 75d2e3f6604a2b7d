// A memsnap snapshot as the dictionary torch.cuda.memory._snapshot() returns: PyTorch's
// snapshot pickle (snapshot/pytorch_pickle_writer.h) loaded by Python's pickle module, so it
// holds the same keys, value types and frame dictionaries as PyTorch's own, and
// _dump_snapshot's file opens in PyTorch's _memory_viz.py and its web viewer.
#pragma once

#include <pybind11/pybind11.h>

#include "snapshot/snapshot.h"

namespace memsnap::pytorch {

pybind11::dict to_torch_snapshot(const Snapshot& snapshot);

}  // namespace memsnap::pytorch
