// The peaks a user looks for first, and which peak each one is. Two sources, never mixed:
// - the allocator's statistics (memsnap's snapshots; PyTorch's pickles have none): the
//   process's peaks since it started or since reset_peak_memory_stats(), in block bytes
//   (allocated, reserved; as torch.cuda.max_memory_allocated/reserved) and requested bytes;
// - a device's trace: the most memory in use and reserved at any entry of the trace's window,
//   counting what was live before the trace's first entry (the snapshot's memory less the
//   trace's net change). Trace sizes are requested bytes (as memory_viz draws them), so the
//   trace's in-use peak is the Timeline's, and it names the entry after which it held.
// A trace that began after the process did (a wrapped ring, history turned on late) cannot see
// an earlier, higher peak: the trace's peaks are of its window only.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

// From one device's allocator statistics.
struct StatisticsPeaks {
  int64_t device = 0;
  uint64_t reserved_bytes = 0;
  uint64_t allocated_bytes = 0;                 // block bytes
  std::optional<uint64_t> active_bytes;         // allocated plus freed-but-pending (stream use)
  std::optional<uint64_t> requested_bytes;      // what the program asked for
};

// From one device's trace.
struct TracePeaks {
  int64_t device = 0;
  uint64_t entries = 0;
  // At the trace's first entry, reconstructed from the snapshot (0 when the trace began with
  // the process, or when nothing stayed live across its start).
  uint64_t in_use_at_start = 0;   // requested bytes of allocations not yet free_completed
  uint64_t reserved_at_start = 0;
  uint64_t in_use_bytes = 0;      // the peak, requested bytes
  uint64_t reserved_bytes = 0;    // the peak
  // The entry after which in use memory reached its peak; none when it was at the trace's start.
  std::optional<uint64_t> in_use_entry;
  std::optional<uint64_t> reserved_entry;
};

struct MemoryPeaks {
  std::vector<StatisticsPeaks> statistics;  // by device, those whose statistics hold peaks
  std::vector<TracePeaks> traces;           // by device, those with trace entries
};

MemoryPeaks compute_peaks(const Snapshot& snapshot);

// One of a device's allocator statistics by its memory_stats() key, when the snapshot holds it.
std::optional<int64_t> statistic(const Statistics& statistics, std::string_view key);

// A trace entry's effect on memory in use (requested bytes of allocations not yet
// free_completed) and on reserved bytes.
int64_t in_use_change(const TraceEntry& e);
int64_t reserved_change(const TraceEntry& e);

}  // namespace memsnap
