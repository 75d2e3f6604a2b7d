#include "viewer/timeline.h"

#include "snapshot/segment_pools.h"

#include "allocator/device_stats.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>

namespace memsnap {
namespace {

struct Allocation {
  uint64_t address, size;
  StackIndex stack;
  uint64_t start, end;
  bool before_trace;
};

// The exact peak of events [lo, hi]: a sweep over every allocation's start and end.
void compute_peak(const std::vector<Allocation>& allocations, uint64_t events, uint64_t lo, uint64_t hi,
                  Timeline& out) {
  std::vector<std::pair<uint64_t, int64_t>> deltas;
  deltas.reserve(allocations.size() * 2);
  for (const Allocation& a : allocations) {
    deltas.push_back({a.start, static_cast<int64_t>(a.size)});
    if (a.end < events) deltas.push_back({a.end, -static_cast<int64_t>(a.size)});
  }
  std::sort(deltas.begin(), deltas.end());
  int64_t in_use = 0;
  size_t next = 0;
  while (next < deltas.size() && deltas[next].first <= lo) in_use += deltas[next++].second;
  out.peak_bytes = static_cast<uint64_t>(std::max<int64_t>(in_use, 0));
  out.peak_event = lo;
  // Then at each later event where the memory in use changes.
  while (next < deltas.size() && deltas[next].first <= hi) {
    const uint64_t event = deltas[next].first;
    while (next < deltas.size() && deltas[next].first == event) in_use += deltas[next++].second;
    if (in_use > 0 && static_cast<uint64_t>(in_use) > out.peak_bytes) {
      out.peak_bytes = static_cast<uint64_t>(in_use);
      out.peak_event = event;
    }
  }
}

bool is_alloc_or_free(TraceAction action) {
  return action == TraceAction::kAlloc || action == TraceAction::kFreeCompleted;
}

void mark_oom(const TraceEntry& e, uint64_t index, std::vector<TimelineMarker>& markers) {
  markers.push_back({index, "oom", "out of memory: " + format_bytes(static_cast<int64_t>(e.size))});
}

// Allocations, each from its alloc to its free_completed (paired by address); those alive
// before the trace began (freed without an alloc, or live in the snapshot) from the start.
void collect_allocations(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device,
                         std::vector<Allocation>& allocations, std::vector<int64_t>& times,
                         std::vector<TimelineMarker>& markers, uint64_t& index) {
  std::unordered_map<uint64_t, size_t> live;  // address -> allocation
  for (const TraceEntry& e : trace) {
    if (e.action == TraceAction::kOom) mark_oom(e, index, markers);
    if (!is_alloc_or_free(e.action)) continue;
    if (e.action == TraceAction::kAlloc) {
      live[e.address] = allocations.size();
      allocations.push_back({e.address, e.size, e.stack, index, UINT64_MAX, false});
    } else if (auto it = live.find(e.address); it != live.end()) {
      allocations[it->second].end = index;
      live.erase(it);
    } else {  // allocated before the trace began
      allocations.push_back({e.address, e.size, e.stack, 0, index, true});
    }
    times.push_back(e.time_us);
    ++index;
  }
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (segment.device != device) continue;
    for (const SnapshotBlock& block : segment.blocks)
      if (block.state != BlockState::kInactive && !live.count(block.address))
        allocations.push_back({block.address, block.requested_size, block.stack, 0, UINT64_MAX, true});
  }
}

// Reserved memory: each segment from its segment_alloc to its segment_free, each expandable
// mapping from its segment_map until an unmap covers it (an unmap of part of a mapping ends
// it and starts what is left). Segments from before the trace (freed without an alloc, or in
// the snapshot with none) from the start.
void collect_segments(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device,
                      std::vector<Allocation>& allocations, std::vector<int64_t>& times,
                      std::vector<TimelineMarker>& markers, uint64_t& index) {
  std::map<uint64_t, size_t> live;  // start address -> segment or mapping
  const auto end_range = [&](uint64_t address, uint64_t size) {
    const uint64_t stop = address + size;
    bool ended = false;
    auto it = live.upper_bound(address);
    if (it != live.begin()) --it;
    while (it != live.end() && it->first < stop) {
      const Allocation ended_one = allocations[it->second];  // a copy: push_back below may move it
      const uint64_t ended_stop = ended_one.address + ended_one.size;
      if (ended_stop <= address) {
        ++it;
        continue;
      }
      allocations[it->second].end = index;
      ended = true;
      it = live.erase(it);
      // What the unmap left of the mapping goes on as a mapping of its own.
      if (ended_one.address < address) {
        live[ended_one.address] = allocations.size();
        allocations.push_back({ended_one.address, address - ended_one.address, ended_one.stack, index, UINT64_MAX, false});
      }
      if (ended_stop > stop) {
        live[stop] = allocations.size();
        allocations.push_back({stop, ended_stop - stop, ended_one.stack, index, UINT64_MAX, false});
      }
    }
    if (!ended) allocations.push_back({address, size, kNoStackIndex, 0, index, true});  // from before the trace
  };
  for (const TraceEntry& e : trace) {
    if (e.action == TraceAction::kOom) mark_oom(e, index, markers);
    if (e.action == TraceAction::kSegmentAlloc || e.action == TraceAction::kSegmentMap) {
      live[e.address] = allocations.size();
      allocations.push_back({e.address, e.size, e.stack, index, UINT64_MAX, false});
    } else if (e.action == TraceAction::kSegmentFree || e.action == TraceAction::kSegmentUnmap) {
      end_range(e.address, e.size);
    }
    if (!is_alloc_or_free(e.action)) continue;
    times.push_back(e.time_us);
    ++index;
  }
  for (const SnapshotSegment& segment : snapshot.segments) {
    if (segment.device != device) continue;
    auto it = live.lower_bound(segment.address);
    if (it != live.end() && it->first < segment.address + segment.total_size) continue;  // made in the trace
    allocations.push_back({segment.address, segment.total_size, segment.stack, 0, UINT64_MAX, true});
  }
}

// The bytes of each group (a memory role, a pool) live at each sample: one sweep over every
// allocation's start and end.
template <typename GroupOf>
std::vector<std::vector<uint64_t>> bytes_by_group(const std::vector<Allocation>& allocations,
                                                  const std::vector<uint64_t>& samples, uint64_t events,
                                                  size_t groups, GroupOf group_of) {
  std::vector<std::tuple<uint64_t, int64_t, size_t>> deltas;
  for (const Allocation& a : allocations) {
    const size_t group = group_of(a);
    deltas.emplace_back(a.start, static_cast<int64_t>(a.size), group);
    if (a.end < events) deltas.emplace_back(a.end, -static_cast<int64_t>(a.size), group);
  }
  std::sort(deltas.begin(), deltas.end());
  std::vector<int64_t> in_use(groups, 0);
  std::vector<std::vector<uint64_t>> out;
  size_t next = 0;
  for (uint64_t sample : samples) {
    while (next < deltas.size() && std::get<0>(deltas[next]) <= sample) {
      in_use[std::get<2>(deltas[next])] += std::get<1>(deltas[next]);
      ++next;
    }
    std::vector<uint64_t>& row = out.emplace_back(groups);
    for (size_t g = 0; g < groups; ++g) row[g] = static_cast<uint64_t>(std::max<int64_t>(in_use[g], 0));
  }
  return out;
}

// The window's markers, at most one of each kind (out-of-memory or annotation) per 1/`buckets`
// of the window: a run annotated at every step has tens of thousands, more than the axis has
// pixels, and each would cost the page a line to draw. `marker_count` keeps how many there were.
void keep_markers_in_window(std::vector<TimelineMarker>& markers, uint64_t lo, uint64_t hi, size_t buckets,
                            Timeline& out) {
  const uint64_t span = hi - lo + 1;
  buckets = std::max<size_t>(buckets, 1);
  std::optional<uint64_t> last_bucket[2];
  for (TimelineMarker& m : markers) {
    if (m.event < lo || m.event > hi) continue;
    ++out.marker_count;
    const uint64_t bucket = static_cast<uint64_t>(static_cast<double>(m.event - lo) / static_cast<double>(span) *
                                                  static_cast<double>(buckets));
    std::optional<uint64_t>& last = last_bucket[m.kind == "oom" ? 1 : 0];
    if (last == bucket) continue;
    last = bucket;
    out.markers.push_back(std::move(m));
  }
}

}  // namespace

Timeline compute_timeline(const Snapshot& snapshot, const TimelineOptions& options) {
  Timeline out;
  out.device = options.device.value_or(busiest_device(snapshot));
  static const DeviceTrace kNoTrace;
  const DeviceTrace& trace =
      out.device >= 0 && static_cast<size_t>(out.device) < snapshot.device_traces.size()
          ? snapshot.device_traces[static_cast<size_t>(out.device)] : kNoTrace;

  // The x axis counts alloc and free events; everything else happens between two of them.
  std::vector<Allocation> allocations;
  std::vector<int64_t> times;
  std::vector<TimelineMarker> markers;
  uint64_t index = 0;
  if (options.kind == TimelineKind::kSegments)
    collect_segments(snapshot, trace, out.device, allocations, times, markers, index);
  else
    collect_allocations(snapshot, trace, out.device, allocations, times, markers, index);
  out.kind = options.kind;
  out.events = index;
  for (Allocation& a : allocations)
    if (a.end == UINT64_MAX) a.end = out.events;
  out.allocations = allocations.size();
  const uint64_t lo = std::min(options.window_begin, out.events);
  const uint64_t hi = std::clamp(options.window_end.value_or(out.events), lo, out.events);
  out.window_begin = lo;
  out.window_end = hi;
  // Annotations are timed, not indexed: each marks the first event at or after it.
  for (const SnapshotAnnotation& a : snapshot.external_annotations) {
    if (a.device != out.device) continue;
    const uint64_t at = static_cast<uint64_t>(std::lower_bound(times.begin(), times.end(), a.time_us) - times.begin());
    markers.push_back({at, a.stage, a.name});
  }
  std::stable_sort(markers.begin(), markers.end(),
                   [](const TimelineMarker& a, const TimelineMarker& b) { return a.event < b.event; });
  keep_markers_in_window(markers, lo, hi, options.max_samples, out);

  // The exact peak of the window, from every allocation (the samples below are a subset of the
  // events and could miss it); its event is sampled too, so the picture shows it.
  compute_peak(allocations, out.events, lo, hi, out);

  // Bands go to what makes the picture: first the largest allocations alive at the peak (up
  // to a third of the bands), then by area, bytes times the events each lives in the window.
  const auto alive_at = [&](const Allocation& a, uint64_t event) {
    return a.start <= event && (a.end > event || a.end == out.events);
  };
  std::vector<size_t> order;
  for (size_t i = 0; i < allocations.size(); ++i)
    if (allocations[i].start <= hi && (allocations[i].end > lo || allocations[i].end == out.events)) order.push_back(i);
  const auto area = [&](size_t i) {
    const Allocation& a = allocations[i];
    const uint64_t visible = std::min(a.end, hi) - std::max(a.start, lo) + 1;
    return static_cast<long double>(a.size) * static_cast<long double>(visible);
  };
  std::vector<size_t> at_peak;
  for (size_t i : order)
    if (alive_at(allocations[i], out.peak_event)) at_peak.push_back(i);
  const size_t peak_share = std::min(at_peak.size(), options.max_bands / 3);
  std::partial_sort(at_peak.begin(), at_peak.begin() + static_cast<std::ptrdiff_t>(peak_share), at_peak.end(),
                    [&](size_t a, size_t b) { return allocations[a].size != allocations[b].size ? allocations[a].size > allocations[b].size : a < b; });
  std::vector<bool> is_band(allocations.size(), false);
  std::vector<size_t> band_allocations;
  for (size_t k = 0; k < peak_share; ++k) {
    is_band[at_peak[k]] = true;
    band_allocations.push_back(at_peak[k]);
  }
  std::vector<size_t> rest;
  for (size_t i : order)
    if (!is_band[i]) rest.push_back(i);
  const size_t kept = std::min(options.max_bands - band_allocations.size(), rest.size());
  std::partial_sort(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(kept), rest.end(),
                    [&](size_t a, size_t b) { const auto x = area(a), y = area(b); return x != y ? x > y : a < b; });
  for (size_t k = 0; k < kept; ++k) {
    is_band[rest[k]] = true;
    band_allocations.push_back(rest[k]);
  }
  // Stacking order: allocations from before the trace lowest, then by allocation time.
  std::sort(band_allocations.begin(), band_allocations.end(), [&](size_t a, size_t b) {
    const Allocation &x = allocations[a], &y = allocations[b];
    if (x.before_trace != y.before_trace) return x.before_trace;
    if (x.start != y.start) return x.start < y.start;
    return a < b;
  });
  for (size_t a : band_allocations) {
    const Allocation& x = allocations[a];
    out.bands.push_back({x.address, x.size, x.stack, x.start, x.end, x.before_trace, {}});
  }

  // Sample points: evenly spaced, plus every band's start and end so none is missed, plus
  // the peak.
  std::vector<uint64_t> samples;
  samples.push_back(out.peak_event);
  const uint64_t steps = std::min<uint64_t>(options.max_samples, std::max<uint64_t>(hi - lo, 1));
  for (uint64_t s = 0; s <= steps; ++s) samples.push_back(lo + (hi - lo) * s / steps);
  for (const TimelineBand& b : out.bands) {
    samples.push_back(std::clamp(b.start, lo, hi));
    samples.push_back(std::clamp(b.end, lo, hi));
  }
  std::sort(samples.begin(), samples.end());
  samples.erase(std::unique(samples.begin(), samples.end()), samples.end());

  // Bytes of the merged (small) allocations at each sample: a sweep over their deltas.
  std::vector<std::pair<uint64_t, int64_t>> deltas;
  for (size_t i = 0; i < allocations.size(); ++i) {
    if (is_band[i]) continue;
    deltas.push_back({allocations[i].start, static_cast<int64_t>(allocations[i].size)});
    // Never freed: still live at the last event.
    if (allocations[i].end < out.events)
      deltas.push_back({allocations[i].end, -static_cast<int64_t>(allocations[i].size)});
  }
  std::sort(deltas.begin(), deltas.end());
  size_t next_delta = 0;
  int64_t other = 0;
  for (uint64_t sample : samples) {
    // Live at `sample`: started at or before it, ending after it.
    while (next_delta < deltas.size() && deltas[next_delta].first <= sample) other += deltas[next_delta++].second;
    uint64_t offset = static_cast<uint64_t>(std::max<int64_t>(other, 0));
    out.other_bytes.push_back(offset);
    for (TimelineBand& b : out.bands) {
      if (b.start > sample || (b.end <= sample && !(b.end == out.events && sample == out.events))) continue;
      b.bottom.push_back({sample, offset});
      offset += b.size;
    }
    // A band that ends here still needs its last point.
    for (TimelineBand& b : out.bands)
      if (b.end == sample && b.end != out.events && (b.bottom.empty() || b.bottom.back().first != sample))
        b.bottom.push_back({sample, b.bottom.empty() ? 0 : b.bottom.back().second});
    out.total_bytes.push_back(offset);
    out.event_time_us.push_back(sample < times.size() ? times[sample] : (times.empty() ? 0 : times.back()));
  }
  if (options.roles) {
    const MemoryRoles roles(snapshot);
    const auto by_role = bytes_by_group(allocations, samples, out.events, kMemoryRoles,
                                        [&](const Allocation& a) { return static_cast<size_t>(roles.of(a.stack)); });
    for (const std::vector<uint64_t>& bytes : by_role) {
      RoleBytes row{};
      std::copy(bytes.begin(), bytes.end(), row.begin());
      out.role_bytes.push_back(row);
    }
  }
  if (options.pools) {
    const SegmentPools pools(snapshot, out.device);
    std::map<MempoolId, size_t> index_of{{MempoolId{}, 0}};
    for (const SnapshotSegment& s : snapshot.segments)
      if (s.device == out.device) index_of.try_emplace(s.segment_pool_id, 0);
    for (auto& [pool, i] : index_of) {
      i = out.pools.size();
      out.pools.push_back(pool);
    }
    out.pool_bytes = bytes_by_group(allocations, samples, out.events, out.pools.size(),
                                    [&](const Allocation& a) { return index_of.at(pools.at(a.address)); });
  }
  out.samples = std::move(samples);
  return out;
}

}  // namespace memsnap
