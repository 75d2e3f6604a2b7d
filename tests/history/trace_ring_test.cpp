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

}  // namespace trace_ring_test
