// Active memory over time from a device's trace, as PyTorch's "Active Memory Timeline":
// every allocation is a band from its alloc to its free_completed, stacked so the outline is
// the memory in use. A band keeps its place while it lives: bands stack bottom up in the order
// they began (those live before the trace first, the longest-lived lowest), so one moves only
// when a band below it is freed, and what a program keeps is a base that never moves.
// Downsampled for big traces: the allocations that make most of the picture keep their own
// bands (those alive at the peak first, then by bytes times the events they live in the
// window); the rest merge, those live before the trace right above its bands and those made in
// it on top of everything, where they never move a band. The time axis is sampled at a
// bounded number of points, so 300,000 events still give a small, responsive picture. The peak
// is exact whatever the sampling. Allocations alive before the trace began (freed without a
// recorded alloc, or still live in the snapshot) are drawn from the start. Out-of-memory
// errors and annotations are markers on the event axis.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "snapshot/snapshot.h"
#include "viewer/memory_roles.h"
#include "viewer/whole_device_timeline.h"

namespace memsnap {

enum class TimelineKind {
  kActive,    // allocations: active memory (PyTorch's Active Memory Timeline)
  kSegments,  // segments and expandable mappings: reserved memory (its Active Cached Segment Timeline)
};

struct TimelineOptions {
  TimelineKind kind = TimelineKind::kActive;
  std::optional<int64_t> device;  // default: the device with the most trace entries
  size_t max_bands = 500;
  // Of the allocations made in the trace without a band, those of this many call sites (the
  // most bytes times events) are merged by site, the rest together.
  size_t max_merged_sites = 12;
  size_t max_samples = 800;
  bool roles = false;  // also the bytes of each memory role at each sample (memory_roles.h)
  // Also the bytes of each memory pool at each sample: the global pools and each CUDA graph's or
  // MemPool's private pool (memory_viz's "incl. Private Pools"), by the snapshot's segments.
  bool pools = false;
  // Also the whole device at each sample: the allocator's reserved bytes, other libraries'
  // memory, and the driver's figures at the snapshot (whole_device_timeline.h).
  bool whole_device = false;
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
  uint64_t start_entry = 0, end_entry = 0;  // the same, as the trace numbers its entries
  bool before_trace = false;
  // Stacked outline: (event index, bottom offset in bytes) where the band starts, ends and
  // moves (the two ends of each run of samples where its bottom stays; straight in between).
  std::vector<std::pair<uint64_t, uint64_t>> bottom;
};

struct TimelineMarker {
  uint64_t event = 0;  // the alloc/free event index it precedes
  std::string kind;    // "oom", or an annotation's "START" / "END"
  std::string label;   // the annotation's name, or the failed request's size
  // In the trace's numbering: an out-of-memory error's own entry; an annotation's, the entry
  // of the event it precedes.
  std::optional<uint64_t> entry;
};

struct Timeline {
  int64_t device = 0;
  uint64_t events = 0;  // alloc and free events on the x axis
  uint64_t window_begin = 0, window_end = 0;  // the sampled range of event indices
  // What users see is numbered by trace entry, as Trace, Segments' "at event" and the state API
  // number them: the trace's entries, and the entry of each event index named here (the axis's
  // end, past the last event, is the last entry).
  uint64_t entries = 0;
  uint64_t window_begin_entry = 0, window_end_entry = 0;
  std::vector<uint64_t> sample_entries;  // per sample
  std::vector<int64_t> event_time_us;  // per sampled event index in `samples`
  std::vector<uint64_t> samples;       // event indices sampled
  // Per sample, the stack from the bottom: the bands from before the trace; from `base_bottom`,
  // `base_bytes` (the rest of what was live before the trace, merged); the bands made in the
  // trace; from `sites_bottom`, the rest of those by the call sites with the most of them
  // (`merged_sites`, the most first; `merged_site_bytes[sample][k]`), each merged; from
  // `other_bottom`, `other_bytes`, the rest of what the trace allocated, merged.
  std::vector<uint64_t> base_bottom, base_bytes;
  std::vector<std::string> merged_sites;
  std::vector<uint64_t> sites_bottom;
  std::vector<std::vector<uint64_t>> merged_site_bytes;
  std::vector<uint64_t> other_bottom, other_bytes;
  std::vector<uint64_t> total_bytes;   // per sample: the top of the stack, the memory in use
  // Per sample, the least and the most memory in use at any event since the sample before (a
  // long trace's steps are shorter than a sample's interval: what the samples cannot draw).
  std::vector<uint64_t> least_bytes, most_bytes;
  std::vector<TimelineBand> bands;     // the largest allocations
  TimelineKind kind = TimelineKind::kActive;
  uint64_t allocations = 0;            // all of them (or segments and mappings), merged or not
  uint64_t before_trace_allocations = 0;  // of those, live before the trace's first entry
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
  std::optional<WholeDeviceTimeline> whole_device;  // with options.whole_device
};

Timeline compute_timeline(const Snapshot& snapshot, const TimelineOptions& options = {});

}  // namespace memsnap
