// AddressHistory against the plain rule it implements: an allocation replaces every entry
// its bytes touch; a freed segment forgets its entries.
#include "history/address_history.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace address_history_test {

using memsnap::AddressHistory;
using Entry = AddressHistory::Entry;

// The rule written the obvious way: one ordered map, overlaps found by scanning.
class ReferenceHistory {
 public:
  void record(const Entry& entry) {
    forget(entry.address, entry.block_size);
    entries_[entry.address] = entry;
  }
  void forget(uintptr_t address, size_t size) {
    std::erase_if(entries_, [&](const auto& kv) {
      return kv.first < address + size && kv.first + kv.second.block_size > address;
    });
  }
  std::vector<Entry> within(uintptr_t address, size_t size) const {
    std::vector<Entry> out;
    for (const auto& [start, entry] : entries_)
      if (start >= address && start < address + size) out.push_back(entry);
    return out;
  }

 private:
  std::map<uintptr_t, Entry> entries_;
};

void expect_same(const std::vector<Entry>& got, const std::vector<Entry>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].address, want[i].address) << i;
    EXPECT_EQ(got[i].block_size, want[i].block_size) << i;
    EXPECT_EQ(got[i].stack, want[i].stack) << i;
    EXPECT_EQ(got[i].ticks, want[i].ticks) << i;
  }
}

TEST(AddressHistory, SameBlockReusedReplacesItsEntry) {
  AddressHistory history;
  history.record(0x1000, 0x1000, {0x1000, 512, 500, 1, 10});
  history.record(0x1000, 0x1000, {0x1000, 512, 400, 2, 20});
  const auto kept = history.within(0x1000, 0x1000);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].stack, 2u);
  EXPECT_EQ(kept[0].requested_size, 400u);
}

TEST(AddressHistory, MergedNeighboursKeepBothUntilSomethingLandsOnThem) {
  AddressHistory history;
  history.record(0x1000, 0x1000, {0x1000, 0x200, 0x200, 1, 1});
  history.record(0x1000, 0x1000, {0x1200, 0x200, 0x200, 2, 2});
  EXPECT_EQ(history.within(0x1000, 0x1000).size(), 2u);
  // An allocation over the tail of the first and the head of the second replaces both.
  history.record(0x1000, 0x1000, {0x1100, 0x200, 0x180, 3, 3});
  const auto kept = history.within(0x1000, 0x1000);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].address, 0x1100u);
}

TEST(AddressHistory, ForgettingASegmentDropsOnlyItsEntries) {
  AddressHistory history;
  history.record(0x1000, 0x1000, {0x1000, 0x200, 0x200, 1, 1});
  history.record(0x4000, 0x1000, {0x4000, 0x200, 0x200, 2, 2});
  history.forget(0x1000, 0x1000);
  EXPECT_TRUE(history.within(0x1000, 0x1000).empty());
  EXPECT_EQ(history.within(0, ~size_t{0}).size(), 1u);
  EXPECT_EQ(history.size(), 1u);
}

TEST(AddressHistory, EverythingFromAnAddressDoesNotWrap) {
  AddressHistory history;
  history.record(0x1000, 0x1000, {0x1800, 0x200, 0x200, 1, 1});
  EXPECT_EQ(history.within(0x1400, ~size_t{0}).size(), 1u);
}

// Random allocations of 512-byte multiples in a few segments, checked after every step.
TEST(AddressHistory, MatchesTheReferenceOnRandomWork) {
  std::mt19937_64 random(7);
  AddressHistory history;
  ReferenceHistory reference;
  constexpr uintptr_t kSegments[] = {0x100000, 0x300000, 0x200000};
  constexpr size_t kSegmentSize = 64 * 512;
  for (int step = 0; step < 20000; ++step) {
    const uintptr_t segment = kSegments[random() % 3];
    if (random() % 200 == 0) {
      history.forget(segment, kSegmentSize);
      reference.forget(segment, kSegmentSize);
    } else {
      const size_t first = random() % 64;
      const size_t blocks = 1 + random() % std::min<size_t>(8, 64 - first);
      const Entry entry{segment + first * 512, blocks * 512, blocks * 512 - 7,
                        static_cast<memsnap::StackId>(step), static_cast<memsnap::Ticks>(step)};
      history.record(segment, kSegmentSize, entry);
      reference.record(entry);
    }
    if (step % 97 == 0) {
      for (uintptr_t s : kSegments) expect_same(history.within(s, kSegmentSize), reference.within(s, kSegmentSize));
      expect_same(history.within(0x100000 + 5 * 512, 0x1000), reference.within(0x100000 + 5 * 512, 0x1000));
      if (HasFailure()) return;
    }
  }
}

// The places the allocator keeps for the recorder (Block/Segment::observer_hint) are guesses:
// right, stale, or garbage, the result must be the rule's.
TEST(AddressHistory, PlaceHintsRightStaleOrWrongNeverChangeTheResult) {
  std::mt19937_64 random(11);
  AddressHistory history;
  ReferenceHistory reference;
  constexpr uintptr_t kSegments[] = {0x100000, 0x300000, 0x200000};
  constexpr size_t kSegmentSize = 64 * 512;
  uint32_t segment_hints[3] = {0, 0, 0};
  uint32_t block_hints[3][64] = {};  // one per block start, as blocks carry them
  for (int step = 0; step < 20000; ++step) {
    const size_t s = random() % 3;
    if (random() % 300 == 0) {
      history.forget(kSegments[s], kSegmentSize);
      reference.forget(kSegments[s], kSegmentSize);
      continue;
    }
    const size_t first = random() % 64;
    const size_t blocks = 1 + random() % std::min<size_t>(8, 64 - first);
    if (random() % 10 == 0) block_hints[s][first] = static_cast<uint32_t>(random() % 80);
    if (random() % 50 == 0) segment_hints[s] = static_cast<uint32_t>(random() % 5);
    const Entry entry{kSegments[s] + first * 512, blocks * 512, blocks * 512 - 7,
                      static_cast<memsnap::StackId>(step), static_cast<memsnap::Ticks>(step)};
    history.record(kSegments[s], kSegmentSize, entry, {segment_hints[s], block_hints[s][first]});
    reference.record(entry);
    if (step % 89 == 0) {
      for (uintptr_t segment : kSegments)
        expect_same(history.within(segment, kSegmentSize), reference.within(segment, kSegmentSize));
      if (HasFailure()) return;
    }
  }
}

}  // namespace address_history_test
