// The replay of CUDA graphs sharing one private pool must reserve what PyTorch reserved when
// the same program shared it: two_graphs.pickle and shared_pool.pickle are one program recorded
// with a pool per graph and with torch.cuda.graph(g2, pool=g1.pool()).
#include "viewer/shared_graph_pool.h"

#include <gtest/gtest.h>

#include "replay/recorded_config.h"
#include "snapshot/snapshot_loader.h"
#include "tests/test_snapshots.h"

namespace memsnap {
namespace {

constexpr uint64_t kMiB = 1 << 20;


TEST(SharedGraphPool, ReservesWhatPyTorchReservedWithTheGraphsSharingOnePool) {
  const Snapshot apart = testing::load_test_snapshot("pytorch-2.11-pools/two_graphs.pickle");
  const std::optional<SharedGraphPool> shared =
      replay_with_one_graph_pool(apart, 0, apart.device_traces[0].size(), recorded_allocator_config(apart).value());
  ASSERT_TRUE(shared.has_value());
  EXPECT_EQ(shared->graphs, 2u);
  // two_graphs.steps.json and shared_pool.steps.json, after the second capture: 1,538 MiB
  // with a pool per graph, 1,282 MiB with one pool.
  EXPECT_EQ(shared->apart_reserved_bytes, 1538 * kMiB);
  EXPECT_EQ(shared->shared_reserved_bytes, 1282 * kMiB);
}

TEST(SharedGraphPool, OneGraphPoolHasNothingToShare) {
  const Snapshot one = testing::load_test_snapshot("pytorch-2.11-pools/shared_pool.pickle");
  EXPECT_FALSE(replay_with_one_graph_pool(one, 0, one.device_traces[0].size(), recorded_allocator_config(one).value()));
}

}  // namespace
}  // namespace memsnap
