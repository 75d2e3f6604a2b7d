// The trace ring keeps the newest entries, oldest first, through wrap-around and resizing.
#include "history/trace_ring.h"

#include <gtest/gtest.h>

namespace trace_ring_test {

std::vector<size_t> sizes(const memsnap::TraceRing& ring) {
  std::vector<size_t> out;
  for (const auto& event : ring.entries()) out.push_back(event.size);
  return out;
}

TEST(TraceRing, KeepsTheNewestEntriesOldestFirst) {
  memsnap::TraceRing ring(3);
  for (size_t i = 1; i <= 7; ++i) ring.push({memsnap::TraceAction::kAlloc, 0, i, 0, 0, 0});
  EXPECT_EQ(sizes(ring), (std::vector<size_t>{5, 6, 7}));
  EXPECT_EQ(ring.dropped(), 4u);
  ring.set_capacity(2);
  EXPECT_EQ(sizes(ring), (std::vector<size_t>{6, 7}));
  ring.set_capacity(4);
  ring.push({memsnap::TraceAction::kAlloc, 0, 8, 0, 0, 0});
  EXPECT_EQ(sizes(ring), (std::vector<size_t>{6, 7, 8}));
  ring.clear();
  EXPECT_TRUE(ring.entries().empty());
  ring.set_capacity(0);
  ring.push({});
  EXPECT_EQ(ring.size(), 0u);
}

TEST(TraceRing, TurnedOffDropsItsEntriesAndOnAgainStartsEmpty) {
  memsnap::TraceRing ring(3);
  for (size_t i = 1; i <= 4; ++i) ring.push({memsnap::TraceAction::kAlloc, 0, i, 0, 0, 0});
  ring.set_capacity(0);  // recording off
  EXPECT_EQ(ring.capacity(), 0u);
  EXPECT_TRUE(ring.entries().empty());
  ring.push({memsnap::TraceAction::kAlloc, 0, 9, 0, 0, 0});
  EXPECT_TRUE(ring.entries().empty());
  ring.set_capacity(3);  // on again, in the buffer kept
  EXPECT_EQ(ring.capacity(), 3u);
  EXPECT_TRUE(ring.entries().empty());
  for (size_t i = 10; i <= 14; ++i) ring.push({memsnap::TraceAction::kAlloc, 0, i, 0, 0, 0});
  EXPECT_EQ(sizes(ring), (std::vector<size_t>{12, 13, 14}));
  ring.set_capacity(0);
  ring.set_capacity(5);  // on again with another capacity
  ring.push({memsnap::TraceAction::kAlloc, 0, 20, 0, 0, 0});
  EXPECT_EQ(sizes(ring), (std::vector<size_t>{20}));
  EXPECT_EQ(ring.capacity(), 5u);
}

}  // namespace trace_ring_test
