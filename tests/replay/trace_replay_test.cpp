// Replaying traces recorded from PyTorch must reproduce PyTorch's segment allocations.
#include "replay/trace_replay.h"

#include <gtest/gtest.h>

#include "replay/replay_report.h"

namespace memsnap {
namespace {

constexpr size_t kMiB = 1 << 20;

AllocationTrace mlp_trace() {
  auto trace = read_allocation_trace(MEMSNAP_TEST_DATA_DIR "/pytorch-2.11/mlp_train.trace");
  EXPECT_TRUE(trace.ok()) << trace.error();
  return trace.ok() ? trace.value() : AllocationTrace{};
}

TEST(TraceReplay, ReproducesPyTorchSegmentAllocationsForTheMlpTrace) {
  // The recorded run (../shared/data/pytorch-2.11/mlp_train.pickle) made these 15
  // segment_alloc events, in this order.
  const std::vector<size_t> recorded = {16 * kMiB, 2 * kMiB,  16 * kMiB, 32 * kMiB, 2 * kMiB,
                                        32 * kMiB, 16 * kMiB, 16 * kMiB, 16 * kMiB, 16 * kMiB,
                                        16 * kMiB, 16 * kMiB, 16 * kMiB, 16 * kMiB, 2 * kMiB};
  const ReplayResult result = replay_trace(mlp_trace(), {});
  EXPECT_EQ(result.segment_alloc_sizes, recorded);
  EXPECT_TRUE(result.address_hints_used);
  EXPECT_EQ(result.events, 162u);
  EXPECT_EQ(result.ignored_frees, 0u);
  EXPECT_EQ(result.failed_allocs, 0u);
  EXPECT_TRUE(result.invariant_problems.empty());
  EXPECT_EQ(result.stats.reserved_bytes[kAggregate].peak, 230 * static_cast<int64_t>(kMiB));
  EXPECT_EQ(result.address_mismatches, 0u);
}

TEST(TraceReplay, OtherSettingsChangeTheOutcome) {
  ReplayOptions options;
  options.config = parse_allocator_config("roundup_power2_divisions:2").value();
  const ReplayResult result = replay_trace(mlp_trace(), options);
  EXPECT_EQ(result.config, "roundup_power2_divisions:[1:2,2:2,4:2,8:2,16:2,32:2,64:2,128:2,256:2,"
                           "512:2,1024:2,2048:2,4096:2,8192:2,16384:2,32768:2]");
  EXPECT_TRUE(result.invariant_problems.empty());
  EXPECT_GE(result.stats.allocated_bytes[kAggregate].peak,
            replay_trace(mlp_trace(), {}).stats.allocated_bytes[kAggregate].peak);
}

TEST(TraceReplay, SmallDeviceRunsOutOfMemoryAndSaysSo) {
  ReplayOptions options;
  options.capacity_bytes = 64 * kMiB;
  const ReplayResult result = replay_trace(mlp_trace(), options);
  EXPECT_GT(result.failed_allocs, 0u);
  EXPECT_EQ(result.stats.num_ooms, static_cast<int64_t>(result.failed_allocs));
  EXPECT_GT(result.ignored_frees, 0u);  // frees of the allocations that failed
  EXPECT_TRUE(result.invariant_problems.empty());
  const auto json = replay_to_json(result);
  EXPECT_EQ(json["num_ooms"], result.failed_allocs);
}

TEST(TraceReplay, UnknownFreesAreIgnoredAndReusedIdsKeepTheOlderBlock) {
  const auto trace = parse_allocation_trace("f 9 0\na 1 100 0\na 1 100 0\nf 1 0\n");
  const ReplayResult result = replay_trace(trace.value(), {});
  EXPECT_EQ(result.ignored_frees, 1u);
  EXPECT_EQ(result.reused_live_ids, 1u);
  EXPECT_FALSE(result.address_hints_used);  // id 1 is not an address
  EXPECT_EQ(result.stats.allocated_bytes[kAggregate].current, 512);
}

TEST(TraceReplay, JsonHasTheKeysScriptsRelyOn) {
  const auto json = replay_to_json(replay_trace(mlp_trace(), {}));
  for (const char* key : {"events", "segment_allocs", "segment_alloc_sizes", "peak_reserved_bytes",
                          "peak_allocated_bytes", "num_alloc_retries", "num_ooms", "device_mallocs",
                          "fragmentation"})
    EXPECT_TRUE(json.contains(key)) << key;
  EXPECT_EQ(json["segment_allocs"], 15);
  EXPECT_EQ(json["device_mallocs"], 15);
}

}  // namespace
}  // namespace memsnap
