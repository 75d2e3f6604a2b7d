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
#include "snapshot/pickle_layout.h"
#include "snapshot/snapshot.h"

namespace memsnap {

// How a pickle was read, for tests and benchmarks.
struct PickleReadStats {
  size_t parts_decoded_alone = 0;  // decoded by a thread of their own and taken as they were
  size_t parts_read_in_order = 0;  // found, but read by the machine after all
  unsigned scans_ahead_kept = 0;   // scans that started further on and were taken
};

struct PickleReadOptions {
  unsigned threads = 0;                    // decoding threads; 0: by the cores and the size
  unsigned spare_cores = 0;                // with threads 0: cores left to other work
  uint64_t min_bytes = uint64_t{4} << 20;  // smaller pickles are read by one thread
  pickle::LayoutOptions layout{0, 0};      // part sizes; 0: chosen from the input and threads
  PickleReadStats* stats = nullptr;        // filled in when given
};

// A plain pickle file (or bytes in memory) of at least `min_bytes` is read on several
// threads (pytorch_parallel_read.h), with the same result.
Result<Snapshot> snapshot_from_pickle(ByteSource& input, const PickleReadOptions& options = {});
// JSON is parsed as it is read: memory goes to what it describes, never to the text or a tree
// of it.
Result<Snapshot> snapshot_from_json(ByteSource& input);
Result<Snapshot> snapshot_from_json(std::string_view text);

}  // namespace memsnap
