// DeviceTrace holds events compactly; whatever the events, it gives back exactly what it was
// given, in order, like the std::vector<TraceEntry> it stands for.
#include "snapshot/device_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace device_trace_test {

using memsnap::DeviceTrace;
using memsnap::TraceAction;
using memsnap::TraceEntry;

void expect_same(const DeviceTrace& trace, const std::vector<TraceEntry>& want) {
  ASSERT_EQ(trace.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(trace[i], want[i]) << "event " << i;
  size_t i = 0;
  for (const TraceEntry& e : trace) ASSERT_EQ(e, want[i++]);
  EXPECT_TRUE(std::equal(trace.rbegin(), trace.rend(), want.rbegin(), want.rend()));
}

DeviceTrace from(const std::vector<TraceEntry>& entries) {
  DeviceTrace trace;
  for (const TraceEntry& e : entries) trace.push_back(e);
  return trace;
}

// A training loop's events: a few streams, sizes and addresses of a GPU, µs times.
std::vector<TraceEntry> ordinary_events(size_t count) {
  std::mt19937_64 rng(11);
  std::vector<TraceEntry> events;
  int64_t time = 1'764'000'000'000'000;
  for (size_t i = 0; i < count; ++i) {
    time += static_cast<int64_t>(rng() % 50);
    events.emplace_back(static_cast<TraceAction>(rng() % memsnap::kTraceActionCount),
                        0x7f0000000000 + (rng() % (uint64_t{80} << 30)), (rng() % 100000) * 512,
                        rng() % 3 == 0 ? 0 : 0x55d0c0de0000 + rng() % 2, time, static_cast<int64_t>(rng() % 5000) - 1);
  }
  return events;
}

TEST(DeviceTrace, GivesBackWhatItWasGivenIn24BytesAnEvent) {
  const std::vector<TraceEntry> events = ordinary_events(100000);
  DeviceTrace trace;
  trace.reserve(events.size());
  for (const TraceEntry& e : events) trace.push_back(e);
  expect_same(trace, events);
  EXPECT_EQ(trace.front(), events.front());
  EXPECT_EQ(trace.back(), events.back());
  EXPECT_EQ(trace.at(5), events[5]);
  EXPECT_THROW((void)trace.at(events.size()), std::out_of_range);
  EXPECT_LE(trace.bytes_held(), events.size() * 24 + events.size() / 4096 * 8 + 4096);
}

// Events no row can hold: kept whole beside the rows, given back the same.
TEST(DeviceTrace, EventsThatDoNotFitARowAreKeptWhole) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  std::vector<TraceEntry> events = ordinary_events(9000);
  const auto at = [&](size_t i) { return events.begin() + static_cast<std::ptrdiff_t>(i); };
  events.insert(at(10), TraceEntry(TraceAction::kSegmentAlloc, kMax, kMax, kMax, kMin, std::numeric_limits<int32_t>::max()));
  events.insert(at(11), TraceEntry(TraceAction::kAlloc, 1, uint64_t{1} << 48, 0, 0, -1));        // size past 48 bits
  events.insert(at(4096), TraceEntry(TraceAction::kOom, 0, 1, 0, std::numeric_limits<int64_t>::max(), 3));
  events.insert(at(4097), TraceEntry(static_cast<TraceAction>(255), 2, 3, 4, 5, 6));           // an action no row names
  for (uint64_t s = 0; s < 300; ++s)  // more streams than the table has slots
    events.insert(at(5000 + s), TraceEntry(TraceAction::kAlloc, s, s, 1000 + s, events[5000].time_us, 0));
  events.insert(at(8000), TraceEntry(TraceAction::kAlloc, 0, 0, 0, events[7999].time_us + (int64_t{1} << 31), 0));
  events.insert(at(8001), TraceEntry(TraceAction::kAlloc, 0, 0, 0, events[7999].time_us - (int64_t{1} << 31) - 1, 0));
  expect_same(from(events), events);
}

// A trace changed in place (set, erase) reads like a vector changed the same way.
TEST(DeviceTrace, ChangesInPlaceMatchAVector) {
  std::mt19937_64 rng(5);
  std::vector<TraceEntry> want = ordinary_events(20000);
  DeviceTrace trace = from(want);
  const std::vector<TraceEntry> odd = {
      TraceEntry(TraceAction::kAlloc, 0, uint64_t{1} << 50, 0, 0, 0),
      TraceEntry(TraceAction::kFreeCompleted, 9, 9, 0xabcdef, std::numeric_limits<int64_t>::min(), 0),
  };
  for (int round = 0; round < 2000; ++round) {
    const size_t i = rng() % want.size();
    TraceEntry e = rng() % 4 == 0 ? odd[rng() % odd.size()] : want[rng() % want.size()];
    e.stack = static_cast<int32_t>(rng() % 100);
    want[i] = e;
    trace.set(i, e);
  }
  expect_same(trace, want);
  want.erase(want.begin() + 100, want.begin() + 5000);
  trace.erase(trace.begin() + 100, trace.begin() + 5000);
  want.erase(want.begin());
  trace.erase(trace.begin());
  expect_same(trace, want);
  EXPECT_TRUE(trace == from(want));
  DeviceTrace other = from(want);
  other.set(7, odd[0]);
  EXPECT_FALSE(trace == other);
  trace.clear();
  EXPECT_TRUE(trace.empty());
  trace.push_back(odd[1]);
  expect_same(trace, {odd[1]});
}

// Sorted searches and other algorithms work on its iterators.
TEST(DeviceTrace, IteratorsServeTheStandardAlgorithms) {
  const std::vector<TraceEntry> events = ordinary_events(50000);
  const DeviceTrace trace = from(events);
  for (const int64_t t : {events.front().time_us, events[1234].time_us + 1, events.back().time_us + 1}) {
    const auto by_time = [](const TraceEntry& e, int64_t when) { return e.time_us < when; };
    EXPECT_EQ(std::lower_bound(trace.begin(), trace.end(), t, by_time) - trace.begin(),
              std::lower_bound(events.begin(), events.end(), t, by_time) - events.begin());
  }
  const auto is_oom = [](const TraceEntry& e) { return e.action == TraceAction::kOom; };
  EXPECT_EQ(std::count_if(trace.begin(), trace.end(), is_oom), std::count_if(events.begin(), events.end(), is_oom));
  auto it = trace.begin() + 10;
  EXPECT_EQ(it->address, events[10].address);
  EXPECT_EQ(it[5], events[15]);
  EXPECT_EQ(*(it - 3), events[7]);
  EXPECT_EQ(trace.end() - it, static_cast<std::ptrdiff_t>(events.size() - 10));
}

}  // namespace device_trace_test
