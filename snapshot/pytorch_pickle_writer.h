// A snapshot as PyTorch's snapshot pickle: the dictionary torch.cuda.memory._snapshot()
// returns (the same keys, value types and frame dictionaries {"filename", "line", "name"}),
// pickled as torch.cuda.memory._dump_snapshot() writes it, so PyTorch's _memory_viz.py, its
// memory_viz page, scripts written against PyTorch's snapshots and memsnap all read it.
//
// Written directly (protocol 4), not through Python objects: each frame dictionary, stack
// list and repeated string is written once and named by pickle's memo after that, as Python's
// pickler does for objects shared in the dictionary. A stack joined to its forward call
// (snapshot.h's kBackwardOfForwardFunction) is written as PyTorch writes it: "frames" up to
// the joining frame, "forward_frames" the forward call's traceback lines, outermost first.
#pragma once

#include <string>

#include "snapshot/byte_sink.h"
#include "snapshot/snapshot.h"

namespace memsnap {

// Writes the pickle a piece at a time to `sink`.
void write_pytorch_pickle(const Snapshot& snapshot, const ByteSink& sink);
std::string to_pytorch_pickle(const Snapshot& snapshot);

}  // namespace memsnap
