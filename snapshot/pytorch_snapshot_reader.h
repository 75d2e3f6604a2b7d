// Reads PyTorch's snapshot pickles (torch.cuda.memory._dump_snapshot, PyTorch 1.13 to 2.x)
// into the Snapshot model, streaming: trace entries and frames are turned into compact
// records as the pickle machine completes them (pickle_machine.h), so a 300,000-event file
// loads in a fraction of a second and in memory near the size of the result.
//
// Layouts: the 2.x dictionary (segments, device_traces, allocator_settings,
// external_annotations), older files that are a bare list of segments, and blocks that keep
// `history` (addr, real_size, frames) instead of `frames`. The same document converter also
// reads memsnap's JSON export (json_writer.h), which has PyTorch's shape plus its own keys.
#pragma once

#include <string_view>

#include "allocator/result.h"
#include "snapshot/byte_source.h"
#include "snapshot/snapshot.h"

namespace memsnap {

Result<Snapshot> snapshot_from_pickle(ByteSource& input);
Result<Snapshot> snapshot_from_json(std::string_view text);

}  // namespace memsnap
