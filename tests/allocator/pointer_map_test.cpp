#include "allocator/pointer_map.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace memsnap {
namespace {

TEST(PointerMap, BehavesLikeAStandardMapUnderRandomInsertsAndErases) {
  PointerMap map;
  std::unordered_map<uintptr_t, Block*> expected;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 300000; ++i) {
    // Addresses cluster like real ones (512-byte multiples in a few regions).
    const uintptr_t address = 0x7f0000000000 + (rng() % 4) * (uintptr_t{1} << 32) + (rng() % 4096) * 512;
    Block* value = reinterpret_cast<Block*>(address ^ 0x1);
    if (rng() % 2) {
      EXPECT_EQ(map.insert(address, value), expected.emplace(address, value).second);
    } else {
      auto it = expected.find(address);
      EXPECT_EQ(map.erase(address), it == expected.end() ? nullptr : it->second);
      if (it != expected.end()) expected.erase(it);
    }
    ASSERT_EQ(map.size(), expected.size());
  }
  for (auto& [address, value] : expected) EXPECT_EQ(map.find(address), value);
  size_t seen = 0;
  map.for_each([&](uintptr_t address, Block* value) {
    ++seen;
    EXPECT_EQ(expected.at(address), value);
  });
  EXPECT_EQ(seen, expected.size());
}

}  // namespace
}  // namespace memsnap
