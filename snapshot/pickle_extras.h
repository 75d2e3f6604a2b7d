// What a memsnap snapshot knows that PyTorch's snapshot layout has no key for, carried inside
// the PyTorch-layout pickles memsnap writes (torch.cuda.memory._dump_snapshot under
// memsnap.torch, `memsnap convert` to .pickle) so that reading one back loses none of it: the
// process (host, pid, rank), the devices, the allocator's statistics, the driver's figures for
// each device (at the snapshot and before the allocator's first segment) and the memory the
// process held outside the allocator, with those allocations' stacks. Stored under the key
// "memsnap" as one string, base64 of a memsnap msgpack snapshot (FORMAT.md) holding only those:
// PyTorch's readers (pickle.load, _memory_viz.py, the memory_viz page's own unpickler) take it
// as a string they do not look at, and memsnap reads it with its bounded msgpack reader.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "snapshot/snapshot.h"

namespace memsnap {

inline constexpr std::string_view kPickleExtrasKey = "memsnap";

// The string to store under kPickleExtrasKey; "" when the snapshot holds nothing of the sort.
// Times become Unix time, as the pickle's trace holds them.
std::string pickle_extras_text(const Snapshot& snapshot);

// Adds what `text` holds to `into`, a snapshot just read from PyTorch's layout (its times Unix
// time); what `into` already has (a process, devices, statistics) is kept. A one-line error
// when `text` is not what pickle_extras_text writes.
std::optional<std::string> merge_pickle_extras(std::string_view text, Snapshot& into);

}  // namespace memsnap
