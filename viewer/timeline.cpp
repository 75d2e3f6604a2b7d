#include "viewer/timeline.h"

#include "snapshot/segment_pools.h"
#include "viewer/call_sites.h"

#include "allocator/device_stats.h"

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <type_traits>
#include <unordered_map>

namespace memsnap {
namespace {

struct Allocation {
  uint64_t address, size;
  StackIndex stack;
  uint64_t start, end;  // event indices; end == the walk's event count when never freed
  bool before_trace;
  uint64_t id;  // the order it was met in: of two otherwise equal, the first wins
};

bool is_alloc_or_free(TraceAction action) {
  return action == TraceAction::kAlloc || action == TraceAction::kFreeCompleted;
}

// A walk over a device's trace that pairs its events into allocations, each from its alloc to
// its free_completed (paired by address), or with TimelineKind::kSegments into segments and
// expandable mappings, each from its segment_alloc or segment_map to the segment_free or
// unmap that ends it (an unmap of part of a mapping ends it and starts what is left).
// Allocations alive before the trace began (freed without an alloc, or live in the snapshot
// with none) run from the start. Each allocation is handed out once its end is known, so a
// walk holds only those alive at a time, never all of them: the picture of a 3M-event trace
// is drawn in a few bytes per event.
class AllocationWalk {
 public:
  AllocationWalk(const Snapshot& snapshot, const DeviceTrace& trace, int64_t device, TimelineKind kind)
      : snapshot_(snapshot), trace_(trace), device_(device), kind_(kind) {
    for (const TraceEntry& e : trace) events_ += is_alloc_or_free(e.action);
  }
  // Alloc and free events: the x axis. Everything else happens between two of them.
  uint64_t events() const { return events_; }

  // on_allocation(const Allocation&) for each allocation; on_event(int64_t time_us) for each
  // event on the x axis, in order; on_oom(uint64_t index, uint64_t entry) for each
  // out-of-memory entry (its index in the trace), at the x axis's index.
  template <typename OnAllocation, typename OnEvent, typename OnOom>
  void run(OnAllocation on_allocation, OnEvent on_event, OnOom on_oom) const {
    // Allocations pair by their exact address, found by hashing; segments and mappings by
    // ranges (an unmap of part of a mapping), found in address order.
    if (kind_ == TimelineKind::kSegments)
      run_pass<std::map<uint64_t, Allocation>>(on_allocation, on_event, on_oom);
    else
      run_pass<std::unordered_map<uint64_t, Allocation>>(on_allocation, on_event, on_oom);
  }

 private:
  template <typename Live, typename OnAllocation, typename OnEvent, typename OnOom>
  void run_pass(OnAllocation& on_allocation, OnEvent& on_event, OnOom& on_oom) const {
    constexpr bool kSegmentsWalk = std::is_same_v<Live, std::map<uint64_t, Allocation>>;
    Pass<OnAllocation, Live> pass{*this, on_allocation, 0, 0, {}};
    uint64_t entry = 0;
    for (const TraceEntry& e : trace_) {
      if (e.action == TraceAction::kOom) on_oom(pass.index, entry);
      ++entry;
      if constexpr (kSegmentsWalk) pass.segment_event(e);
      else pass.allocation_event(e);
      if (!is_alloc_or_free(e.action)) continue;
      on_event(e.time_us);
      ++pass.index;
    }
    if constexpr (kSegmentsWalk) pass.snapshot_segments();
    else pass.snapshot_blocks();
    for (const auto& [address, a] : pass.live) pass.ended(a, events_);
  }

  template <typename OnAllocation, typename Live>
  struct Pass {
    const AllocationWalk& walk;
    OnAllocation& on_allocation;
    uint64_t index = 0;  // on the x axis
    uint64_t made = 0;
    Live live;  // by start address

    void ended(Allocation a, uint64_t end) {
      a.end = end;
      on_allocation(static_cast<const Allocation&>(a));
    }
    void begin(uint64_t address, uint64_t size, StackIndex stack) {
      const auto [it, made_now] = live.try_emplace(address);
      if (!made_now) ended(it->second, walk.events_);  // begun again at its address: never freed
      it->second = Allocation{address, size, stack, index, 0, false, made++};
    }
    void from_before(uint64_t address, uint64_t size, StackIndex stack, uint64_t end) {
      ended(Allocation{address, size, stack, 0, 0, true, made++}, end);
    }

    void allocation_event(const TraceEntry& e) {
      if (e.action == TraceAction::kAlloc) {
        begin(e.address, e.size, e.stack);
      } else if (e.action == TraceAction::kFreeCompleted) {
        if (auto it = live.find(e.address); it != live.end()) {
          ended(it->second, index);
          live.erase(it);
        } else {
          from_before(e.address, e.size, e.stack, index);
        }
      }
    }
    void snapshot_blocks() {
      for (const SnapshotSegment& segment : walk.snapshot_.segments) {
        if (segment.device != walk.device_) continue;
        for (const SnapshotBlock& block : segment.blocks)
          if (block.state != BlockState::kInactive && !live.count(block.address))
            from_before(block.address, block.requested_size, block.stack, walk.events_);
      }
    }

    void segment_event(const TraceEntry& e) {
      if (e.action == TraceAction::kSegmentAlloc || e.action == TraceAction::kSegmentMap)
        begin(e.address, e.size, e.stack);
      else if (e.action == TraceAction::kSegmentFree || e.action == TraceAction::kSegmentUnmap)
        end_range(e.address, e.size);
    }
    void end_range(uint64_t address, uint64_t size) {
      const uint64_t stop = address + size;
      bool any = false;
      auto it = live.upper_bound(address);
      if (it != live.begin()) --it;
      while (it != live.end() && it->first < stop) {
        const Allocation one = it->second;
        const uint64_t one_stop = one.address + one.size;
        if (one_stop <= address) {
          ++it;
          continue;
        }
        ended(one, index);
        any = true;
        it = live.erase(it);
        // What the unmap left of the mapping goes on as a mapping of its own.
        if (one.address < address) begin(one.address, address - one.address, one.stack);
        if (one_stop > stop) begin(stop, one_stop - stop, one.stack);
      }
      if (!any) from_before(address, size, kNoStackIndex, index);
    }
    void snapshot_segments() {
      for (const SnapshotSegment& segment : walk.snapshot_.segments) {
        if (segment.device != walk.device_) continue;
        auto it = live.lower_bound(segment.address);
        if (it != live.end() && it->first < segment.address + segment.total_size) continue;  // made in the trace
        from_before(segment.address, segment.total_size, segment.stack, walk.events_);
      }
    }
  };

  const Snapshot& snapshot_;
  const DeviceTrace& trace_;
  int64_t device_;
  TimelineKind kind_;
  uint64_t events_ = 0;
};

// A wrapping sum of sizes read as signed; a negative one (a trace that frees more than it
// allocated) counts as nothing in use.
uint64_t bytes_in_use(uint64_t sum) { return static_cast<uint64_t>(std::max<int64_t>(static_cast<int64_t>(sum), 0)); }

// A marker before it is kept: an out-of-memory entry of the trace, or an annotation.
struct MarkerSource {
  uint64_t event;
  uint64_t index : 63;  // in the trace, or in the snapshot's annotations
  uint64_t oom : 1;
};
static_assert(sizeof(MarkerSource) == 16);

// The window's markers, at most one of each kind (out-of-memory or annotation) per 1/`buckets`
// of the window: a run annotated at every step has tens of thousands, more than the axis has
// pixels, and each would cost the page a line to draw. `marker_count` keeps how many there were.
void keep_markers_in_window(const Snapshot& snapshot, const DeviceTrace& trace, const std::vector<MarkerSource>& markers,
                            uint64_t lo, uint64_t hi, size_t buckets, Timeline& out) {
  const uint64_t span = hi - lo + 1;
  buckets = std::max<size_t>(buckets, 1);
  std::optional<uint64_t> last_bucket[2];
  for (const MarkerSource& m : markers) {
    if (m.event < lo || m.event > hi) continue;
    ++out.marker_count;
    const AnnotationList& annotations = snapshot.external_annotations;
    const bool oom_kind = m.oom || annotations.stage(m.index) == "oom";
    const uint64_t bucket = static_cast<uint64_t>(static_cast<double>(m.event - lo) / static_cast<double>(span) *
                                                  static_cast<double>(buckets));
    std::optional<uint64_t>& last = last_bucket[oom_kind ? 1 : 0];
    if (last == bucket) continue;
    last = bucket;
    if (!m.oom)
      out.markers.push_back({m.event, annotations.stage(m.index), annotations.name(m.index), std::nullopt});
    else
      out.markers.push_back({m.event, "oom", "out of memory: " + format_bytes(static_cast<int64_t>(trace[m.index].size)),
                             m.index});
  }
}

// The best `count` of what it is offered, by `better` (a strict order).
template <typename Better>
class Best {
 public:
  Best(size_t count, Better better) : count_(count), better_(better) {}
  void offer(const Allocation& a) {
    if (count_ == 0) return;
    if (kept_.size() == count_) {
      if (!better_(a, kept_.front())) return;
      std::pop_heap(kept_.begin(), kept_.end(), better_);
      kept_.pop_back();
    }
    kept_.push_back(a);
    std::push_heap(kept_.begin(), kept_.end(), better_);  // the worst kept at the front
  }
  std::vector<Allocation> best_first() {
    std::sort_heap(kept_.begin(), kept_.end(), better_);
    return std::move(kept_);
  }

 private:
  size_t count_;
  Better better_;
  std::vector<Allocation> kept_;
};

// The trace's own numbering of what the x axis counts: each event index named by its alloc or
// free entry (the state right after it is the memory in use at that event); the axis's end,
// past the last event, by the trace's last entry. One walk over the trace for the few indices
// a picture names, instead of an entry per event held for all of them.
void number_by_entries(const DeviceTrace& trace, Timeline& out) {
  std::vector<uint64_t> wanted(out.samples);
  wanted.insert(wanted.end(), {out.peak_event, out.window_begin, out.window_end});
  for (const TimelineBand& b : out.bands) wanted.insert(wanted.end(), {b.start, b.end});
  for (const TimelineMarker& m : out.markers) wanted.push_back(m.event);
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  std::vector<uint64_t> entries(wanted.size(), trace.empty() ? 0 : trace.size() - 1);
  size_t next = 0;
  for (uint64_t entry = 0, event = 0; entry < trace.size() && next < wanted.size(); ++entry) {
    if (!is_alloc_or_free(trace[entry].action)) continue;
    if (event++ == wanted[next]) entries[next++] = entry;
  }
  const auto entry_of = [&](uint64_t event) {
    return entries[static_cast<size_t>(std::lower_bound(wanted.begin(), wanted.end(), event) - wanted.begin())];
  };
  out.entries = trace.size();
  out.sample_entries.clear();
  for (uint64_t sample : out.samples) out.sample_entries.push_back(entry_of(sample));
  out.peak_entry = entry_of(out.peak_event);
  out.window_begin_entry = entry_of(out.window_begin);
  out.window_end_entry = entry_of(out.window_end);
  for (TimelineBand& b : out.bands) {
    b.start_entry = entry_of(b.start);
    b.end_entry = entry_of(b.end);
  }
  for (TimelineMarker& m : out.markers)
    if (!m.entry) m.entry = entry_of(m.event);
}

}  // namespace

Timeline compute_timeline(const Snapshot& snapshot, const TimelineOptions& options) {
  Timeline out;
  out.device = options.device.value_or(busiest_device(snapshot));
  static const DeviceTrace kNoTrace;
  const DeviceTrace& trace =
      out.device >= 0 && static_cast<size_t>(out.device) < snapshot.device_traces.size()
          ? snapshot.device_traces[static_cast<size_t>(out.device)] : kNoTrace;
  const AllocationWalk walk(snapshot, trace, out.device, options.kind);
  out.kind = options.kind;
  out.events = walk.events();

  // First walk: each event's time, and the bytes in use after each event (the allocations'
  // starts and ends, summed).
  std::vector<int64_t> times;
  times.reserve(out.events);
  // Sums in unsigned arithmetic, which wraps: a hostile file's sizes cannot overflow them, and
  // read as signed they are what signed sums would be.
  std::vector<uint64_t> in_use(out.events + 1, 0);
  std::vector<MarkerSource> markers;
  // Allocations live before the trace's first entry: (end, size), to tell the merged ones apart.
  std::vector<std::pair<uint64_t, uint64_t>> before;
  walk.run(
      [&](const Allocation& a) {
        ++out.allocations;
        in_use[a.start] += a.size;
        if (a.end < out.events) in_use[a.end] -= a.size;
        if (a.before_trace) before.push_back({a.end, a.size});
      },
      [&](int64_t time_us) { times.push_back(time_us); },
      [&](uint64_t index, uint64_t entry) { markers.push_back({index, entry, true}); });
  for (size_t i = 1; i < in_use.size(); ++i) in_use[i] += in_use[i - 1];
  const uint64_t lo = std::min(options.window_begin, out.events);
  const uint64_t hi = std::clamp(options.window_end.value_or(out.events), lo, out.events);
  out.window_begin = lo;
  out.window_end = hi;
  // Annotations are timed, not indexed: each marks the first event at or after it.
  markers.reserve(markers.size() + snapshot.external_annotations.size());
  for (size_t i = 0; i < snapshot.external_annotations.size(); ++i) {
    if (snapshot.external_annotations.device(i) != out.device) continue;
    const int64_t time_us = snapshot.external_annotations.time_us(i);
    const uint64_t at = static_cast<uint64_t>(std::lower_bound(times.begin(), times.end(), time_us) - times.begin());
    markers.push_back({at, i, false});
  }
  const auto earlier = [](const MarkerSource& a, const MarkerSource& b) { return a.event < b.event; };
  if (!std::is_sorted(markers.begin(), markers.end(), earlier)) std::stable_sort(markers.begin(), markers.end(), earlier);
  keep_markers_in_window(snapshot, trace, markers, lo, hi, options.max_samples, out);
  std::vector<MarkerSource>().swap(markers);

  // The exact peak of the window, from every event (the samples below are a subset of them
  // and could miss it); its event is sampled too, so the picture shows it.
  out.peak_bytes = bytes_in_use(in_use[lo]);
  out.peak_event = lo;
  for (uint64_t event = lo + 1; event <= hi; ++event)
    if (bytes_in_use(in_use[event]) > out.peak_bytes) {
      out.peak_bytes = bytes_in_use(in_use[event]);
      out.peak_event = event;
    }

  // Second walk: bands go to what makes the picture. First the largest allocations alive at
  // the peak (up to a third of the bands), then by area, bytes times the events each lives in
  // the window.
  const auto alive_at = [&](const Allocation& a, uint64_t event) {
    return a.start <= event && (a.end > event || a.end == out.events);
  };
  const auto area = [&](const Allocation& a) {
    const uint64_t visible = std::min(a.end, hi) - std::max(a.start, lo) + 1;
    return static_cast<long double>(a.size) * static_cast<long double>(visible);
  };
  const auto larger = [](const Allocation& a, const Allocation& b) {
    return a.size != b.size ? a.size > b.size : a.id < b.id;
  };
  const auto wider = [&](const Allocation& a, const Allocation& b) {
    const auto x = area(a), y = area(b);
    return x != y ? x > y : a.id < b.id;
  };
  Best at_peak(options.max_bands / 3, larger);
  // Enough by area that, less those taken at the peak, the rest of the bands remain.
  Best by_area(options.max_bands, wider);
  // The area of each call site's allocations made in the trace, to find the largest of those
  // without a band.
  CallSites sites(snapshot);
  std::vector<long double> site_area;
  const bool by_site = options.max_merged_sites > 0;
  walk.run(
      [&](const Allocation& a) {
        if (a.start > hi || !(a.end > lo || a.end == out.events)) return;
        if (alive_at(a, out.peak_event)) at_peak.offer(a);
        by_area.offer(a);
        if (by_site && !a.before_trace) {
          const uint32_t site = sites.of(a.stack);
          if (site >= site_area.size()) site_area.resize(site + 1, 0);
          site_area[site] += area(a);
        }
      },
      [](int64_t) {}, [](uint64_t, uint64_t) {});
  // Allocations are numbered in the order a walk meets them, the same in every walk.
  std::vector<bool> is_band(out.allocations, false);
  const auto take = [&](const Allocation& a) {
    if (a.id < is_band.size()) is_band[a.id] = true;
  };
  const auto has_band = [&](const Allocation& a) { return a.id < is_band.size() && is_band[a.id]; };
  std::vector<Allocation> bands = at_peak.best_first();
  for (const Allocation& a : bands) take(a);
  const size_t peak_bands = bands.size();
  for (const Allocation& a : by_area.best_first())
    if (bands.size() - peak_bands < options.max_bands - peak_bands && !has_band(a)) {
      bands.push_back(a);
      take(a);
    }
  // The call sites with the most merged memory (their allocations' area less their bands').
  std::vector<int32_t> merged_site_of(site_area.size(), -1);
  if (by_site) {
    for (const Allocation& a : bands)
      if (!a.before_trace) site_area[sites.of(a.stack)] -= area(a);
    std::vector<uint32_t> order;
    for (uint32_t site = 0; site < site_area.size(); ++site)
      if (site_area[site] >= 1) order.push_back(site);
    const size_t keep = std::min(order.size(), options.max_merged_sites);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                      [&](uint32_t x, uint32_t y) { return site_area[x] != site_area[y] ? site_area[x] > site_area[y] : x < y; });
    for (size_t k = 0; k < keep; ++k) {
      merged_site_of[order[k]] = static_cast<int32_t>(k);
      out.merged_sites.push_back(sites.label(order[k]));
    }
  }
  // Stacking order, bottom up: allocations from before the trace, the longest-lived lowest (what
  // the program keeps, such as parameters, is a base that never moves); then those made in the
  // trace in allocation order, so a band moves only when one below it is freed, and a step's
  // activations, freed in reverse, fall away from the top.
  std::sort(bands.begin(), bands.end(), [](const Allocation& x, const Allocation& y) {
    if (x.before_trace != y.before_trace) return x.before_trace;
    if (x.before_trace && x.end != y.end) return x.end > y.end;
    if (x.start != y.start) return x.start < y.start;
    return x.id < y.id;
  });
  for (const Allocation& x : bands) out.bands.push_back({x.address, x.size, x.stack, x.start, x.end, 0, 0, x.before_trace, {}});
  out.before_trace_allocations = before.size();

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

  // Bytes of the allocations from before the trace still live at each sample (their ends in
  // order, walked once with the samples).
  std::sort(before.begin(), before.end());
  uint64_t before_live = 0;
  for (const auto& [end, size] : before) before_live += size;
  size_t before_ended = 0;

  // At each sample, bottom up: the bands from before the trace, the rest of what was live
  // before it (merged), the bands made in the trace, and the rest of those (merged) on top, so
  // merged memory never moves a band.
  const auto alive = [&](const TimelineBand& b, uint64_t sample) {
    return b.start <= sample && (b.end > sample || (b.end == out.events && sample <= out.events));
  };
  for (uint64_t sample : samples) {
    while (before_ended < before.size() && before[before_ended].first <= sample && before[before_ended].first < out.events)
      before_live -= before[before_ended++].second;
    uint64_t banded_before = 0, banded = 0;
    for (const TimelineBand& b : out.bands)
      if (alive(b, sample)) (b.before_trace ? banded_before : banded) += b.size;
    const uint64_t base = bytes_in_use(before_live - banded_before);
    const uint64_t other = bytes_in_use(in_use[sample] - before_live - banded);
    uint64_t offset = 0;
    const auto stack_bands = [&](bool before_trace) {
      for (TimelineBand& b : out.bands) {
        if (b.before_trace != before_trace) continue;
        if (alive(b, sample)) {
          b.bottom.push_back({sample, offset});
          offset += b.size;
        } else if (b.end == sample && !b.bottom.empty() && b.bottom.back().first != sample) {
          b.bottom.push_back({sample, b.bottom.back().second});  // a band that ends here: its last point
        }
      }
    };
    stack_bands(true);
    out.base_bottom.push_back(offset);
    out.base_bytes.push_back(base);
    offset += base;
    stack_bands(false);
    out.other_bottom.push_back(offset);
    out.other_bytes.push_back(other);
    offset += other;
    out.total_bytes.push_back(offset);
    out.event_time_us.push_back(sample < times.size() ? times[sample] : (times.empty() ? 0 : times.back()));
  }
  // Between two samples memory in use may rise and fall many times (a step of a long trace is
  // shorter than a sample's interval): the least and the most it was in each interval.
  for (size_t i = 0; i < samples.size(); ++i) {
    const uint64_t from = i > 0 ? samples[i - 1] + 1 : samples[i];
    uint64_t least = bytes_in_use(in_use[samples[i]]), most = least;
    for (uint64_t event = from; event < samples[i]; ++event) {
      least = std::min(least, bytes_in_use(in_use[event]));
      most = std::max(most, bytes_in_use(in_use[event]));
    }
    out.least_bytes.push_back(least);
    out.most_bytes.push_back(most);
  }
  std::vector<uint64_t>().swap(in_use);
  std::vector<int64_t>().swap(times);
  // A band's outline keeps the two ends of each run of equal bottoms: the band is drawn the
  // same, and an outline costs points where the band moves, not where it lives.
  for (TimelineBand& b : out.bands) {
    std::vector<std::pair<uint64_t, uint64_t>>& points = b.bottom;
    size_t kept = 0;
    for (size_t i = 0; i < points.size(); ++i) {
      const bool run_inside = i > 0 && i + 1 < points.size() && points[i - 1].second == points[i].second &&
                              points[i + 1].second == points[i].second;
      if (!run_inside) points[kept++] = points[i];
    }
    points.resize(kept);
  }

  // Third walk, when there is something to count: the merged bytes of the largest call sites,
  // and when asked the bytes of each memory role and of each pool, at each sample.
  if (options.roles || options.pools || !out.merged_sites.empty()) {
    std::optional<MemoryRoles> roles;
    std::optional<SegmentPools> pools;
    if (options.roles) roles.emplace(snapshot);
    if (options.pools) pools.emplace(snapshot, out.device);
    std::map<MempoolId, size_t> index_of{{MempoolId{}, 0}};
    if (options.pools) {
      for (const SnapshotSegment& s : snapshot.segments)
        if (s.device == out.device) index_of.try_emplace(s.segment_pool_id, 0);
      for (auto& [pool, i] : index_of) {
        i = out.pools.size();
        out.pools.push_back(pool);
      }
    }
    // Per group, the bytes that begin (and end) at each sample: summed in order, the bytes live.
    std::vector<std::vector<uint64_t>> by_role(options.roles ? kMemoryRoles : 0, std::vector<uint64_t>(samples.size() + 1));
    std::vector<std::vector<uint64_t>> by_pool(out.pools.size(), std::vector<uint64_t>(samples.size() + 1));
    std::vector<std::vector<uint64_t>> by_merged_site(out.merged_sites.size(), std::vector<uint64_t>(samples.size() + 1));
    walk.run(
        [&](const Allocation& a) {
          const auto first = static_cast<size_t>(std::lower_bound(samples.begin(), samples.end(), a.start) - samples.begin());
          const size_t stop = a.end < out.events
              ? static_cast<size_t>(std::lower_bound(samples.begin(), samples.end(), a.end) - samples.begin())
              : samples.size();
          const auto add = [&](std::vector<uint64_t>& deltas) {
            deltas[first] += a.size;
            deltas[stop] -= a.size;
          };
          if (roles) add(by_role[static_cast<size_t>(roles->of(a.stack))]);
          if (pools) add(by_pool[index_of.at(pools->at(a.address))]);
          if (!by_merged_site.empty() && !a.before_trace && !has_band(a)) {
            const uint32_t site = sites.of(a.stack);
            if (site < merged_site_of.size() && merged_site_of[site] >= 0) add(by_merged_site[static_cast<size_t>(merged_site_of[site])]);
          }
        },
        [](int64_t) {}, [](uint64_t, uint64_t) {});
    const auto live_bytes = [&](std::vector<std::vector<uint64_t>>& deltas, size_t sample) {
      std::vector<uint64_t> row(deltas.size());
      for (size_t g = 0; g < deltas.size(); ++g) {
        if (sample > 0) deltas[g][sample] += deltas[g][sample - 1];
        row[g] = bytes_in_use(deltas[g][sample]);
      }
      return row;
    };
    for (size_t i = 0; i < samples.size(); ++i) {
      if (options.roles) {
        const std::vector<uint64_t> bytes = live_bytes(by_role, i);
        RoleBytes row{};
        std::copy(bytes.begin(), bytes.end(), row.begin());
        out.role_bytes.push_back(row);
      }
      if (options.pools) out.pool_bytes.push_back(live_bytes(by_pool, i));
      if (!by_merged_site.empty()) {
        // The merged call sites stack where the merged memory began; the rest goes above them.
        std::vector<uint64_t> row = live_bytes(by_merged_site, i);
        uint64_t sum = 0;
        for (uint64_t& bytes : row) sum += bytes = std::min(bytes, out.other_bytes[i] - sum);
        out.sites_bottom.push_back(out.other_bottom[i]);
        out.other_bottom[i] += sum;
        out.other_bytes[i] -= sum;
        out.merged_site_bytes.push_back(std::move(row));
      }
    }
  }
  out.samples = std::move(samples);
  number_by_entries(trace, out);
  if (options.whole_device)
    out.whole_device = whole_device_timeline(snapshot, out.device, out.samples, out.window_begin, out.window_end);
  return out;
}

}  // namespace memsnap
