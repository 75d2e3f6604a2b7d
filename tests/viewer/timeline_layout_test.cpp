// The timeline's layout: where each band sits while it lives, and what the merged regions hold.
// A golden layout worked out by hand, and properties checked on real PyTorch traces: the
// regions tile the memory in use, a band moves only when one below it ends, what the program
// keeps from before the trace never moves, and the range between samples is what the events say.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "snapshot/snapshot_loader.h"
#include "viewer/timeline.h"

namespace memsnap {
namespace {

using Outline = std::vector<std::pair<uint64_t, uint64_t>>;

// A band's bottom at a sample it lives at: its outline is straight between points, and a move
// happens between two consecutive samples, so the last point at or before the sample holds.
uint64_t bottom_at(const TimelineBand& band, uint64_t sample) {
  uint64_t bottom = band.bottom.front().second;
  for (const auto& [event, at] : band.bottom)
    if (event <= sample) bottom = at;
  return bottom;
}

bool alive_at(const Timeline& t, const TimelineBand& band, uint64_t sample) {
  return band.start <= sample && (band.end > sample || (band.end == t.events && sample <= t.events));
}

// Two Python call sites, f (a.py:1) and g (b.py:2).
Snapshot two_sites() {
  Snapshot s;
  s.frames = {{"f", "a.py", 1}, {"g", "b.py", 2}};
  s.stacks = {{0}, {1}};
  return s;
}

// P (4 KiB) is live from before the trace to its end; Q (8 KiB) from before it until event 2;
// A, B and C are made in the trace (A and C at site f, B at site g) and freed, A first.
Snapshot golden_trace() {
  Snapshot s = two_sites();
  s.device_traces.resize(1);
  const std::vector<std::tuple<TraceAction, uint64_t, uint64_t, int64_t>> events = {
      {TraceAction::kAlloc, 0x1000, 1024, 0},         {TraceAction::kAlloc, 0x2000, 2048, 1},
      {TraceAction::kFreeCompleted, 0x9000, 8192, -1}, {TraceAction::kAlloc, 0x3000, 512, 0},
      {TraceAction::kFreeCompleted, 0x1000, 1024, 0}, {TraceAction::kFreeCompleted, 0x3000, 512, 0},
      {TraceAction::kFreeCompleted, 0x2000, 2048, 1}};
  int64_t time = 0;
  for (const auto& [action, address, size, stack] : events) s.device_traces[0].push_back({action, address, size, 0, time++, stack});
  SnapshotSegment segment;
  segment.address = 0x8000;
  segment.total_size = 2 << 20;
  SnapshotBlock p;
  p.address = 0x8000;
  p.size = p.requested_size = 4096;
  p.state = BlockState::kActiveAllocated;
  segment.blocks.push_back(p);
  s.segments.push_back(segment);
  return s;
}

TEST(TimelineLayout, TheGoldenLayout) {
  const Timeline t = compute_timeline(golden_trace());
  ASSERT_EQ(t.events, 7u);
  EXPECT_EQ(t.samples, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(t.before_trace_allocations, 2u);
  // Bottom up: P (before the trace, never freed), Q (before the trace, freed at event 2), then
  // A, B and C in the order they were made. Each outline keeps the ends of its flat runs.
  ASSERT_EQ(t.bands.size(), 5u);
  const std::vector<std::pair<uint64_t, Outline>> expected = {
      {0x8000, {{0, 0}, {7, 0}}},
      {0x9000, {{0, 4096}, {2, 4096}}},
      {0x1000, {{0, 12288}, {1, 12288}, {2, 4096}, {4, 4096}}},
      {0x2000, {{1, 13312}, {2, 5120}, {3, 5120}, {4, 4096}, {6, 4096}}},
      {0x3000, {{3, 7168}, {4, 6144}, {5, 6144}}},
  };
  for (size_t k = 0; k < expected.size(); ++k) {
    SCOPED_TRACE("band " + std::to_string(k));
    EXPECT_EQ(t.bands[k].address, expected[k].first);
    EXPECT_EQ(t.bands[k].bottom, expected[k].second);
  }
  EXPECT_TRUE(t.bands[0].before_trace && t.bands[1].before_trace && !t.bands[2].before_trace);
  EXPECT_EQ(t.total_bytes, (std::vector<uint64_t>{13312, 15360, 7168, 7680, 6656, 6144, 4096, 4096}));
  // Everything has a band: nothing is merged.
  EXPECT_TRUE(std::all_of(t.base_bytes.begin(), t.base_bytes.end(), [](uint64_t b) { return b == 0; }));
  EXPECT_TRUE(std::all_of(t.other_bytes.begin(), t.other_bytes.end(), [](uint64_t b) { return b == 0; }));
  EXPECT_TRUE(t.merged_sites.empty());
}

// With two bands (P and Q, the most bytes times events), what the trace made is merged: site g
// (B, the most merged bytes times events) apart, site f with the rest.
TEST(TimelineLayout, MergedMemorySitsOnTopByCallSite) {
  TimelineOptions options;
  options.max_bands = 2;
  options.max_merged_sites = 1;
  const Timeline t = compute_timeline(golden_trace(), options);
  ASSERT_EQ(t.bands.size(), 2u);
  EXPECT_EQ(t.bands[0].address, 0x8000u);
  EXPECT_EQ(t.bands[1].address, 0x9000u);
  EXPECT_EQ(t.merged_sites, (std::vector<std::string>{"g (b.py:2)"}));
  const std::vector<uint64_t> g = {0, 2048, 2048, 2048, 2048, 2048, 0, 0};
  const std::vector<uint64_t> f = {1024, 1024, 1024, 1536, 512, 0, 0, 0};
  const std::vector<uint64_t> banded = {12288, 12288, 4096, 4096, 4096, 4096, 4096, 4096};
  ASSERT_EQ(t.merged_site_bytes.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    SCOPED_TRACE("sample " + std::to_string(i));
    EXPECT_EQ(t.base_bytes[i], 0u);
    EXPECT_EQ(t.sites_bottom[i], banded[i]) << "merged memory sits on the bands";
    EXPECT_EQ(t.merged_site_bytes[i], std::vector<uint64_t>{g[i]});
    EXPECT_EQ(t.other_bottom[i], banded[i] + g[i]);
    EXPECT_EQ(t.other_bytes[i], f[i]);
    EXPECT_EQ(t.total_bytes[i], banded[i] + g[i] + f[i]);
  }
  // One band: Q (before the trace, not banded) is the merged base above P, and moves nothing.
  options.max_bands = 1;
  const Timeline base = compute_timeline(golden_trace(), options);
  ASSERT_EQ(base.bands.size(), 1u);
  EXPECT_EQ(base.bands[0].bottom, (Outline{{0, 0}, {7, 0}}));
  EXPECT_EQ(base.base_bottom, std::vector<uint64_t>(8, 4096));
  EXPECT_EQ(base.base_bytes, (std::vector<uint64_t>{8192, 8192, 0, 0, 0, 0, 0, 0}));
}

// The range between samples: the least and the most memory in use at the events since the
// sample before, by brute force.
TEST(TimelineLayout, TheRangeBetweenSamplesIsWhatTheEventsSay) {
  Snapshot s;
  s.device_traces.resize(1);
  for (uint64_t i = 0; i < 5000; ++i) {  // steps of 4 events that rise to 3 KiB and fall to 0
    for (uint64_t k = 1; k <= 2; ++k) s.device_traces[0].push_back({TraceAction::kAlloc, 0x1000 * k, 1024 * k, 0, 0, -1});
    for (uint64_t k = 1; k <= 2; ++k) s.device_traces[0].push_back({TraceAction::kFreeCompleted, 0x1000 * k, 1024 * k, 0, 0, -1});
  }
  TimelineOptions options;
  options.max_samples = 100;
  const Timeline t = compute_timeline(s, options);
  ASSERT_EQ(t.most_bytes.size(), t.samples.size());
  std::vector<uint64_t> in_use;
  uint64_t live = 0;
  for (const TraceEntry& e : s.device_traces[0]) in_use.push_back(live += e.action == TraceAction::kAlloc ? e.size : -e.size);
  // in_use[k]: after event k. The axis's end (sample == events) is the state after the last one.
  for (size_t i = 1; i < t.samples.size(); ++i) {
    const uint64_t last = std::min<uint64_t>(t.samples[i], in_use.size() - 1);
    const uint64_t first = std::min(t.samples[i - 1] + 1, last);
    const auto [least, most] = std::minmax_element(in_use.begin() + static_cast<std::ptrdiff_t>(first),
                                                   in_use.begin() + static_cast<std::ptrdiff_t>(last + 1));
    EXPECT_EQ(t.least_bytes[i], *least) << "sample " << t.samples[i];
    EXPECT_EQ(t.most_bytes[i], *most) << "sample " << t.samples[i];
  }
  EXPECT_EQ(*std::max_element(t.most_bytes.begin(), t.most_bytes.end()), 3072u) << "every step's top, whatever the sampling";
}

// On real traces (a wrapped one among them): the regions tile the memory in use with no gap or
// overlap; a band moves only when a band below it ended, or, for a band of the trace's own,
// when the merged memory from before the trace shrank; the lowest band never moves.
TEST(TimelineLayout, BandsKeepTheirPlaceOnRealTraces) {
  for (const char* name : {"pytorch-2.11-h100/transformer_s0.pickle.gz", "pytorch-2.11-h200/wrapped_decoder.pickle",
                           "pytorch-2.11-h100/expandable_streams.pickle"}) {
    SCOPED_TRACE(name);
    const auto loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/" + name);
    ASSERT_TRUE(loaded) << loaded.error();
    for (const size_t bands : {size_t{20}, size_t{500}}) {
      TimelineOptions options;
      options.max_bands = bands;
      const Timeline t = compute_timeline(loaded.value().snapshot, options);
      ASSERT_FALSE(t.bands.empty());
      for (size_t i = 0; i < t.samples.size(); ++i) {
        const uint64_t sample = t.samples[i];
        // (bottom, height) of every region alive here, bottom up.
        std::vector<std::pair<uint64_t, uint64_t>> regions;
        for (const TimelineBand& b : t.bands)
          if (alive_at(t, b, sample)) regions.push_back({bottom_at(b, sample), b.size});
        regions.push_back({t.base_bottom[i], t.base_bytes[i]});
        uint64_t site_bottom = t.sites_bottom.empty() ? t.other_bottom[i] : t.sites_bottom[i];
        for (size_t k = 0; k < t.merged_sites.size(); ++k) {
          regions.push_back({site_bottom, t.merged_site_bytes[i][k]});
          site_bottom += t.merged_site_bytes[i][k];
        }
        regions.push_back({t.other_bottom[i], t.other_bytes[i]});
        std::erase_if(regions, [](const auto& r) { return r.second == 0; });
        std::sort(regions.begin(), regions.end());
        uint64_t top = 0;
        for (const auto& [bottom, height] : regions) {
          ASSERT_EQ(bottom, top) << "bands " << bands << ", sample " << sample << ": a gap or an overlap";
          top += height;
        }
        ASSERT_EQ(top, t.total_bytes[i]) << "bands " << bands << ", sample " << sample;
      }
      for (size_t k = 0; k < t.bands.size(); ++k) {
        const TimelineBand& b = t.bands[k];
        for (size_t p = 1; p < b.bottom.size(); ++p) {
          if (b.bottom[p].second == b.bottom[p - 1].second) continue;
          const uint64_t from = b.bottom[p - 1].first, to = b.bottom[p].first;
          const bool one_below_ended = std::any_of(t.bands.begin(), t.bands.begin() + static_cast<std::ptrdiff_t>(k),
                                                   [&](const TimelineBand& below) { return below.end > from && below.end <= to; });
          const auto at = [&](uint64_t sample) {
            return static_cast<size_t>(std::lower_bound(t.samples.begin(), t.samples.end(), sample) - t.samples.begin());
          };
          const bool base_shrank = !b.before_trace && t.base_bytes[at(to)] < t.base_bytes[at(from)];
          EXPECT_TRUE(one_below_ended || base_shrank)
              << "bands " << bands << ": band " << k << " moved between events " << from << " and " << to;
          EXPECT_LT(b.bottom[p].second, b.bottom[p - 1].second) << "a band only moves down";
        }
      }
      if (t.bands.front().before_trace && t.bands.front().end == t.events) {
        EXPECT_EQ(t.bands.front().bottom.size(), 2u) << "what the program keeps from before the trace never moves";
      }
    }
  }
}

}  // namespace
}  // namespace memsnap
