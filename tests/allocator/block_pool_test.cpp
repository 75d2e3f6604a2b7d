// The binned pool must order blocks exactly as PyTorch's (stream, size, address) tree does:
// checked against a std::set under random inserts, erases and best-fit searches.
#include "allocator/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <random>
#include <set>
#include <tuple>

namespace memsnap {
namespace {

using Key = std::tuple<StreamId, size_t, uintptr_t>;

// Random inserts, erases and best-fit searches on `streams` streams (the lower ones busier),
// checked against the reference after each step.
void check_against_an_ordered_set(StreamId streams, uint64_t seed) {
  BlockPool pool(false);
  std::set<Key> reference;
  std::deque<Block> storage;  // stable addresses
  std::vector<Block*> inside;
  std::mt19937_64 rng(seed);
  // What take_inserted_since_last_look must return at least: the blocks inserted since the
  // last look that are still inside; at most, every block (when too many were inserted).
  std::set<Block*> inserted_since{};
  bool looked = false;
  auto check_look = [&](int step) {
    const std::vector<Block*> taken = pool.take_inserted_since_last_look();
    std::vector<Block*> expected;
    for (Block* block : pool.ordered_blocks())
      if (inserted_since.count(block) != 0) expected.push_back(block);
    if (!looked || taken != expected) {
      ASSERT_EQ(taken, pool.ordered_blocks()) << "step " << step << ": neither the new blocks nor all";
      if (looked) {
        ASSERT_GT(taken.size(), expected.size()) << "step " << step;
      }
    }
    looked = true;
    inserted_since.clear();
  };
  auto random_stream = [&] { return rng() % (1 + rng() % streams); };
  auto random_size = [&] {
    // Mostly small and clustered sizes (many ties), sometimes huge ones.
    switch (rng() % 4) {
      case 0: return size_t{512} * (1 + rng() % 8);
      case 1: return size_t{512} * (1 + rng() % 4096);
      case 2: return (size_t{1} << (20 + rng() % 20)) + size_t{512} * (rng() % 64);
      default: return size_t{512} * (1 + rng() % (size_t{1} << 30));
    }
  };
  for (int step = 0; step < 200000; ++step) {
    const int action = static_cast<int>(rng() % 3);
    if (action == 0 || inside.empty()) {
      Block& block = storage.emplace_back();
      block.stream = random_stream();
      block.size = random_size();
      block.address = 0x100000000 + (rng() % (uint64_t{1} << 36)) * 512;
      if (!reference.emplace(block.stream, block.size, block.address).second) continue;
      pool.insert(&block);
      inside.push_back(&block);
      inserted_since.insert(&block);
    } else if (action == 1) {
      const size_t index = rng() % inside.size();
      Block* block = inside[index];
      pool.erase(block);
      reference.erase({block->stream, block->size, block->address});
      inside[index] = inside.back();
      inside.pop_back();
    } else {
      const StreamId stream = random_stream();
      const size_t size = random_size();
      Block* found = pool.lower_bound(stream, size);
      auto it = reference.lower_bound({stream, size, 0});
      const bool expect_found = it != reference.end() && std::get<0>(*it) == stream;
      ASSERT_EQ(found != nullptr, expect_found) << "step " << step;
      if (found) {
        EXPECT_EQ(found->size, std::get<1>(*it));
        EXPECT_EQ(found->address, std::get<2>(*it));
        // The walk on from there (a bin's second block, a third out of line, the next bin).
        const Block* next = pool.next_in_order(found);
        const auto after = std::next(it);
        const bool expect_next = after != reference.end() && std::get<0>(*after) == stream;
        ASSERT_EQ(next != nullptr, expect_next) << "step " << step;
        if (next) {
          EXPECT_EQ(Key(next->stream, next->size, next->address), *after) << "step " << step;
        }
      }
    }
    ASSERT_EQ(pool.size(), reference.size());
    if (rng() % 1000 == 0) check_look(step);
    if (step % 5000 == 0) {
      ASSERT_EQ(pool.structure_problems(), std::vector<std::string>{}) << "step " << step;
    }
  }
  std::vector<Block*> ordered = pool.ordered_blocks();
  ASSERT_EQ(ordered.size(), reference.size());
  auto it = reference.begin();
  for (Block* block : ordered) {
    EXPECT_EQ(Key(block->stream, block->size, block->address), *it);
    EXPECT_TRUE(pool.contains(block));
    ++it;
  }
  EXPECT_TRUE(pool.structure_problems().empty());
  for (StreamId stream = 0; stream < streams; ++stream) {
    const std::vector<Block*> on_stream = pool.ordered_blocks(stream);
    auto first = reference.lower_bound({stream, 0, 0});
    ASSERT_EQ(on_stream.size(), static_cast<size_t>(std::distance(first, reference.lower_bound({stream + 1, 0, 0}))));
    for (const Block* block : on_stream) EXPECT_EQ(Key(block->stream, block->size, block->address), *first++);
  }
}

TEST(BlockPool, OrdersAndSearchesLikeAnOrderedSetOfStreamSizeAddress) {
  check_against_an_ordered_set(3, 11);
}

// Past kStreamsBinnedOnSight streams, a stream's blocks sit in one ordered set until it holds
// more than kFewBlocks; streams whose bins emptied are dropped: the order stays the set's.
TEST(BlockPool, OrdersAndSearchesLikeAnOrderedSetWithHundredsOfStreams) {
  check_against_an_ordered_set(300, 12);
}

TEST(BlockPool, StreamsGetBinsWhileFewOrOnceTheyHoldManyBlocksAndLoseThemEmpty) {
  BlockPool pool(false);
  std::deque<Block> storage;
  uintptr_t next_address = 0x100000000;
  auto add = [&](StreamId stream) {
    Block& block = storage.emplace_back();
    block.stream = stream;
    block.size = 4096;
    block.address = next_address += 4096;
    pool.insert(&block);
    return &block;
  };
  std::vector<Block*> first_streams;
  for (StreamId stream = 0; stream < BlockPool::kStreamsBinnedOnSight; ++stream) first_streams.push_back(add(stream));
  EXPECT_EQ(pool.binned_streams(), BlockPool::kStreamsBinnedOnSight);
  for (size_t i = 0; i < BlockPool::kFewBlocks; ++i) add(100);
  EXPECT_EQ(pool.binned_streams(), BlockPool::kStreamsBinnedOnSight);  // stream 100's are in the set
  Block* last = add(100);
  EXPECT_EQ(pool.binned_streams(), BlockPool::kStreamsBinnedOnSight + 1);  // now binned
  EXPECT_EQ(pool.lower_bound(100, 4096)->address, last->address - BlockPool::kFewBlocks * 4096);
  EXPECT_EQ(pool.structure_problems(), std::vector<std::string>{});
  // The first streams empty: they keep their bins until the binned streams have doubled.
  for (Block* block : first_streams) pool.erase(block);
  StreamId stream = 200;
  while (pool.binned_streams() < 2 * BlockPool::kStreamsBinnedOnSight) {
    for (size_t i = 0; i <= BlockPool::kFewBlocks; ++i) add(stream);
    ++stream;
  }
  for (size_t i = 0; i <= BlockPool::kFewBlocks; ++i) add(stream);
  EXPECT_EQ(pool.binned_streams(), 2 * BlockPool::kStreamsBinnedOnSight + 1 - first_streams.size());
  EXPECT_EQ(pool.lower_bound(0, 512), nullptr);
  EXPECT_EQ(pool.structure_problems(), std::vector<std::string>{});
  EXPECT_EQ(pool.size(), storage.size() - first_streams.size());
  EXPECT_EQ(pool.ordered_blocks().size(), pool.size());
}

// The allocator's release passes look only at what changed since the last pass: the first
// look and a look after more inserts than twice the blocks held take every block, otherwise
// the blocks inserted since the last look that are still held, each once, in pool order (a
// block erased and inserted again, on another stream, is found in its new place).
TEST(BlockPool, ALookTakesTheBlocksInsertedSinceTheLastOneInOrder) {
  BlockPool pool(false);
  std::deque<Block> storage;
  auto add = [&](StreamId stream, size_t size, uintptr_t address) {
    Block& block = storage.emplace_back();
    block.stream = stream;
    block.size = size;
    block.address = address;
    pool.insert(&block);
    return &block;
  };
  for (uintptr_t i = 0; i < 100; ++i) add(i % 10, 4096 * (1 + i % 3), 0x100000000 + (i << 20));
  EXPECT_EQ(pool.take_inserted_since_last_look(), pool.ordered_blocks());
  EXPECT_EQ(pool.take_inserted_since_last_look(), std::vector<Block*>{});

  Block* late = add(7, 8192, 0x200000000);
  Block* gone = add(3, 8192, 0x200100000);
  Block* early = add(1, 1 << 20, 0x200200000);
  Block* moved = add(9, 512, 0x200300000);
  pool.erase(gone);
  pool.erase(moved);
  moved->stream = 0;
  pool.insert(moved);
  pool.erase(moved);
  pool.insert(moved);  // inserted three times, held once
  EXPECT_EQ(pool.take_inserted_since_last_look(), (std::vector<Block*>{moved, early, late}));
  EXPECT_EQ(pool.take_inserted_since_last_look(), std::vector<Block*>{});

  // More inserts than twice the blocks held plus 64: the record stops, the look takes all.
  Block* churn = add(5, 4096, 0x300000000);
  for (int i = 0; i < 2 * 104 + 64; ++i) {
    pool.erase(churn);
    pool.insert(churn);
  }
  EXPECT_EQ(pool.take_inserted_since_last_look(), pool.ordered_blocks());
  EXPECT_EQ(pool.take_inserted_since_last_look(), std::vector<Block*>{});
}

TEST(BlockPool, ErasingABlockItDoesNotHoldIsALogicError) {
  BlockPool pool(true);
  Block block;
  block.size = 4096;
  block.address = 0x7f0000000000;
  EXPECT_THROW(pool.erase(&block), std::logic_error);
  pool.insert(&block);
  EXPECT_TRUE(pool.contains(&block));
  pool.erase(&block);
  EXPECT_FALSE(pool.contains(&block));
}

TEST(SizeBins, AreOrderedAndFitEverySize) {
  size_t previous = 0;
  for (size_t units = 1; units < (size_t{1} << 22); units += 1 + units / 97) {
    const size_t bin = size_bin(units * 512);
    EXPECT_GE(bin, previous);
    previous = bin;
  }
  EXPECT_LT(size_bin(~size_t{0} - 511), kSizeBinCount);
  SizeBinBitmap bitmap;
  bitmap.set(5);
  bitmap.set(700);
  bitmap.set(4095);
  EXPECT_EQ(bitmap.next_set(0), 5u);
  EXPECT_EQ(bitmap.next_set(6), 700u);
  EXPECT_EQ(bitmap.next_set(701), 4095u);
  bitmap.clear(4095);
  EXPECT_EQ(bitmap.next_set(701), kNoSizeBin);
  EXPECT_EQ(bitmap.next_set(kSizeBinCount), kNoSizeBin);
}

}  // namespace
}  // namespace memsnap
