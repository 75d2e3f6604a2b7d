// Reads a large PyTorch snapshot pickle on several threads: one scans it for the long lists'
// batches (pickle_layout.h), others decode those parts on their own, each into a store and
// document of its own, and the reading thread runs the pickle machine over the rest, taking
// each decoded part in turn (PyTorchDocument::adopt_part) where it would have read it. The
// result is the one reading alone gives; a part that could not be decoded alone (or that
// is damaged) is read in order by the machine, which then names any error as it would.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "snapshot/pickle_layout.h"
#include "snapshot/pickle_machine.h"
#include "snapshot/pytorch_document.h"
#include "snapshot/pytorch_snapshot_reader.h"

namespace memsnap {

// Whether `options` would read a pickle of `bytes` bytes on more than one thread.
bool reads_in_parallel(uint64_t bytes, const PickleReadOptions& options);

// Runs `machine` (reading `pickle` from its start) to the pickled value with the parts
// decoded by other threads. `release(begin, end)`: those bytes are no longer needed (though
// they may be read again); called from any thread. Throws what the machine throws.
using ReleaseBytes = std::function<void(uint64_t begin, uint64_t end)>;
pickle::Value run_with_parts(std::string_view pickle, pickle::Machine& machine, PyTorchDocument& document,
                             const PickleReadOptions& options, const ReleaseBytes& release);

}  // namespace memsnap
