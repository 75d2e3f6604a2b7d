// Active memory over time from a device's trace, as PyTorch's "Active Memory Timeline":
// every allocation is a band from its alloc to its free_completed, stacked in allocation
// order, so the outline is the memory in use. Downsampled for big traces: the allocations
// that make most of the picture keep their own bands (those alive at the peak first, then by
// bytes times the events they live in the window), the rest merge into one band, and the
// time axis is sampled at a bounded number of points, so 300,000 events still give a small,
// responsive picture. The peak is exact whatever the sampling. Allocations alive before the
// trace began (freed without a recorded alloc, or still live in the snapshot) are drawn from
// the start. Out-of-memory errors and annotations are markers on the event axis.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "snapshot/snapshot.h"
#include "viewer/memory_roles.h"

namespace memsnap {

enum class TimelineKind {
  kActive,    // allocations: active memory (PyTorch's Active Memory Timeline)
  kSegments,  // segments and expandable mappings: reserved memory (its Active Cached Segment Timeline)
};

struct TimelineOptions {
  TimelineKind kind = TimelineKind::kActive;
  std::optional<int64_t> device;  // default: the device with the most trace entries
  size_t max_bands = 150;
  size_t max_samples = 800;
  bool roles = false;  // also the bytes of each memory role at each sample (memory_roles.h)
  // Also the bytes of each memory pool at each sample: the global pools and each CUDA graph's or
  // MemPool's private pool (memory_viz's "incl. Private Pools"), by the snapshot's segments.
  bool pools = false;
  // Zoom: only events [window_begin, window_end] are sampled, and bands go to the largest
  // allocations alive in that window (the web UI's brush). Clamped to the trace.
  uint64_t window_begin = 0;
  std::optional<uint64_t> window_end;
};

struct TimelineBand {
  uint64_t address = 0;
  uint64_t size = 0;
  StackIndex stack = kNoStackIndex;
  uint64_t start = 0, end = 0;  // event indices; end == events when never freed
  bool before_trace = false;
  // Stacked outline: (event index, bottom offset in bytes) at each sample the band spans.
  std::vector<std::pair<uint64_t, uint64_t>> bottom;
};

struct TimelineMarker {
  uint64_t event = 0;  // the alloc/free event index it precedes
  std::string kind;    // "oom", or an annotation's "START" / "END"
  std::string label;   // the annotation's name, or the failed request's size
};

struct Timeline {
  int64_t device = 0;
  uint64_t events = 0;  // alloc and free events on the x axis
  uint64_t window_begin = 0, window_end = 0;  // the sampled range of event indices
  std::vector<int64_t> event_time_us;  // per sampled event index in `samples`
  std::vector<uint64_t> samples;       // event indices sampled
  std::vector<uint64_t> other_bytes;   // per sample: the merged band
  std::vector<uint64_t> total_bytes;   // per sample
  std::vector<TimelineBand> bands;     // the largest allocations
  TimelineKind kind = TimelineKind::kActive;
  uint64_t allocations = 0;            // all of them (or segments and mappings), merged or not
  uint64_t peak_bytes = 0;
  uint64_t peak_event = 0;  // on the x axis (alloc and free events)
  // The peak's event as the trace numbers its entries (what Trace, Segments' "at event" and
  // the state API count): the entry after which memory in use is at its peak.
  uint64_t peak_entry = 0;
  // In the window, in event order; where they are denser than the samples, the first of each
  // kind per sample interval (marker_count: all of them in the window).
  std::vector<TimelineMarker> markers;
  uint64_t marker_count = 0;
  std::vector<RoleBytes> role_bytes;    // with options.roles: per sample, by MemoryRole
  std::vector<MempoolId> pools;         // with options.pools: global first, then by id
  std::vector<std::vector<uint64_t>> pool_bytes;  // per sample, by `pools` index
};

Timeline compute_timeline(const Snapshot& snapshot, const TimelineOptions& options = {});

}  // namespace memsnap
