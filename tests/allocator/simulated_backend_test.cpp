// The simulated device: deterministic placement in one address space shared by all devices,
// preferred addresses honoured wherever they are free, capacity and injected failures.
#include "allocator/simulated_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace memsnap {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

SimulatedBackend two_devices() {
  SimulatedBackend::Options options;
  options.device_count = 2;
  options.capacity_bytes = size_t{1} << 30;
  return SimulatedBackend(options);
}

TEST(SimulatedBackend, PlacesSegmentsFirstFitFromEachDevicesBase) {
  SimulatedBackend backend = two_devices();
  EXPECT_EQ(backend.reserve(0, 2 * kMiB), SimulatedBackend::base_address(0));
  EXPECT_EQ(backend.reserve(0, 3 * kMiB), SimulatedBackend::base_address(0) + 2 * kMiB);
  // The next placement starts at the next 2 MiB boundary.
  EXPECT_EQ(backend.reserve(0, 2 * kMiB), SimulatedBackend::base_address(0) + 6 * kMiB);
  EXPECT_EQ(backend.reserve(1, 2 * kMiB), SimulatedBackend::base_address(1));
}

TEST(SimulatedBackend, HonoursAPreferredAddressAnywhereInUserSpace) {
  SimulatedBackend backend = two_devices();
  const uintptr_t recorded = 0x7fc56c800000;  // above device 0's base, as real runs are
  backend.prefer_address_for_next_reserve(0, recorded);
  EXPECT_EQ(backend.reserve(0, 16 * kMiB), recorded);
  // The hint is used once, then placement is first fit again.
  EXPECT_EQ(backend.reserve(0, 2 * kMiB), SimulatedBackend::base_address(0));
}

TEST(SimulatedBackend, DeclinesAPreferredAddressThatOverlapsAnotherDevicesSegment) {
  SimulatedBackend backend = two_devices();
  const uintptr_t taken = *backend.reserve(1, 4 * kMiB);
  backend.prefer_address_for_next_reserve(0, taken + 2 * kMiB);
  const auto placed = backend.reserve(0, 2 * kMiB);
  ASSERT_TRUE(placed.has_value());
  EXPECT_TRUE(*placed + 2 * kMiB <= taken || *placed >= taken + 4 * kMiB);
}

TEST(SimulatedBackend, ReleasedRangesCoalesceAndAreReused) {
  SimulatedBackend backend = two_devices();
  const uintptr_t a = *backend.reserve(0, 2 * kMiB);
  const uintptr_t b = *backend.reserve(0, 2 * kMiB);
  backend.release(0, a, 2 * kMiB);
  backend.release(0, b, 2 * kMiB);
  EXPECT_EQ(backend.reserve(0, 4 * kMiB), a);
  EXPECT_THROW(backend.release(0, b, 2 * kMiB), DeviceError);
}

TEST(SimulatedBackend, CapacityAndInjectedFailuresRefuseReservations) {
  SimulatedBackend backend = two_devices();
  EXPECT_FALSE(backend.reserve(0, (size_t{1} << 30) + 1).has_value());
  backend.fail_next_reserves(0, 1);
  EXPECT_FALSE(backend.reserve(0, 2 * kMiB).has_value());
  EXPECT_TRUE(backend.reserve(0, 2 * kMiB).has_value());
  EXPECT_EQ(backend.failed_reserves(), 2u);
}

// The allocator looks only at the streams on which events completed since it last asked.
TEST(SimulatedBackend, TellsOnWhichStreamsEventsCompletedSinceACount) {
  SimulatedBackend::Options options;
  options.device_count = 2;
  options.events_complete_immediately = false;
  SimulatedBackend backend(options);
  const auto completed_since = [&](int device, uint64_t since, uint64_t& count) {
    std::vector<StreamId> streams;
    EXPECT_TRUE(backend.streams_completed_since(device, since, count, streams));
    std::sort(streams.begin(), streams.end());
    return streams;
  };
  const EventHandle on_1 = backend.record_event(0, 1);
  const EventHandle on_2 = backend.record_event(0, 2);
  const EventHandle on_3 = backend.record_event(0, 3);
  const EventHandle other_device = backend.record_event(1, 2);
  const EventHandle released = backend.record_event(0, 4);
  backend.release_event(released);
  uint64_t start = 0;
  EXPECT_EQ(completed_since(0, 0, start), std::vector<StreamId>{});
  backend.complete_events(2);  // both devices' events on stream 2
  backend.complete_events(4);  // none left there: nothing completes
  uint64_t after = 0;
  EXPECT_EQ(completed_since(0, start, after), std::vector<StreamId>{2});
  EXPECT_EQ(completed_since(1, start, after), std::vector<StreamId>{2});
  EXPECT_TRUE(backend.event_completed(on_2));
  EXPECT_TRUE(backend.event_completed(other_device));
  EXPECT_FALSE(backend.event_completed(on_1));
  uint64_t later = 0;
  EXPECT_EQ(completed_since(0, after, later), std::vector<StreamId>{});
  backend.synchronize_event(on_3);
  backend.complete_all_events();  // completes on_1
  EXPECT_EQ(completed_since(0, after, later), (std::vector<StreamId>{1, 3}));
  EXPECT_EQ(completed_since(0, 0, later), (std::vector<StreamId>{1, 2, 3}));  // each stream once
  for (EventHandle event : {on_1, on_2, on_3, other_device}) backend.release_event(event);
  EXPECT_EQ(backend.live_events(), 0u);
  // Events that complete when queried complete untold: it cannot tell.
  backend.set_events_complete_immediately(true);
  std::vector<StreamId> streams;
  EXPECT_FALSE(backend.streams_completed_since(0, 0, later, streams));
}

}  // namespace
}  // namespace memsnap
