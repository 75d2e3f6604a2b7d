// memsnap stats: totals by stream and by memory pool, on PyTorch snapshots with private pools.
#include "viewer/snapshot_stats.h"

#include <gtest/gtest.h>

#include "snapshot/snapshot_loader.h"
#include "tests/test_snapshots.h"

namespace memsnap {
namespace {

constexpr uint64_t kMiB = 1 << 20;


// Two graphs' pools at the OOM of bench/make_pytorch_pool_snapshots.py pool_oom: each holds a
// 384 MiB free block and a 128 MiB output; PyTorch's snapshot names them (1,0) and (2,0).
TEST(SnapshotStats, PrivatePoolsAreTotalledAndNamed) {
  const Snapshot snapshot = testing::load_test_snapshot("pytorch-2.11-pools/pool_oom.pickle");
  const SnapshotStats stats = compute_stats(snapshot);
  ASSERT_EQ(stats.by_pool.size(), 3u);
  EXPECT_TRUE(stats.by_pool[0].pool.is_global());
  EXPECT_EQ(stats.by_pool[1].pool, (MempoolId{1, 0}));
  EXPECT_EQ(stats.by_pool[2].pool, (MempoolId{2, 0}));
  for (size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(stats.by_pool[i].totals.reserved_bytes, 512 * kMiB);
    EXPECT_EQ(stats.by_pool[i].totals.allocated_bytes, 128 * kMiB);
  }
  const std::string text = stats_to_text(stats, snapshot);
  EXPECT_NE(text.find("CUDA graph pool 2                  2  512.00 MiB  128.00 MiB  128.00 MiB    384.00 MiB"),
            std::string::npos)
      << text;
  const nlohmann::json json = stats_to_json(stats, snapshot);
  EXPECT_EQ(json["by_pool"][1]["name"], "CUDA graph pool 1");
  EXPECT_EQ(json["by_pool"][1]["pool"], nlohmann::json::array({1, 0}));
}

TEST(SnapshotStats, AMemPoolIsNamedAsOne) {
  const Snapshot snapshot = testing::load_test_snapshot("pytorch-2.11-pools/mempool.pickle");
  const SnapshotStats stats = compute_stats(snapshot);
  ASSERT_EQ(stats.by_pool.size(), 2u);
  EXPECT_EQ(pool_display_name(stats.by_pool[1].pool), "MemPool (0,1)");
  EXPECT_EQ(stats.by_pool[1].totals.reserved_bytes, 320 * kMiB);  // y's 256 MiB and z's 64 MiB
}

TEST(SnapshotStats, WithoutPrivatePoolsThereIsNoPoolTable) {
  const Snapshot snapshot = testing::load_test_snapshot("pytorch-2.11/two_streams.pickle");
  const SnapshotStats stats = compute_stats(snapshot);
  ASSERT_EQ(stats.by_pool.size(), 1u);
  EXPECT_EQ(stats_to_text(stats, snapshot).find("by memory pool"), std::string::npos);
}

}  // namespace
}  // namespace memsnap
