// The device's figures just before the allocator's first segment (DeviceCachingAllocator::
// figures_before_first_segment): taken once, before that segment's memory is asked for, never
// for a segment made while a private pool is being allocated to, and never at the cost of the
// allocation when the backend cannot answer.
#include <unistd.h>

#include <memory>
#include <vector>

#include "allocator_harness.h"
#include "forwarding_backend.h"

namespace memsnap::testing {
namespace {

constexpr MempoolId kPool{0, 1};

TEST(FirstSegmentFigures, TakenOnceJustBeforeTheFirstSegment) {
  Harness h("", 1024 * kMiB);
  DeviceCachingAllocator& device = h.allocator.device(0);
  h.backend->set_device_processes(0, {{getpid(), 500 * kMiB}, {777, 100 * kMiB}});
  EXPECT_FALSE(device.figures_before_first_segment());  // no segment asked for yet
  const uintptr_t small = h.alloc(1 * kMiB);
  const std::optional<DeviceMemoryFigures> first = device.figures_before_first_segment();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->memory.total_bytes, 1024 * kMiB);
  EXPECT_EQ(first->memory.free_bytes, 1024 * kMiB);  // before the segment's 2 MiB were taken
  EXPECT_EQ(first->processes, (std::vector<DeviceProcess>{{getpid(), 500 * kMiB}, {777, 100 * kMiB}}));
  // Later segments leave them as they were.
  h.backend->set_device_processes(0, {{getpid(), 900 * kMiB}});
  const uintptr_t large = h.alloc(300 * kMiB);
  EXPECT_EQ(h.segments(), 2);
  EXPECT_EQ(device.figures_before_first_segment()->processes[0].bytes, 500 * kMiB);
  EXPECT_EQ(device.figures_before_first_segment()->memory.free_bytes, 1024 * kMiB);
  h.free(small);
  h.free(large);
  EXPECT_CONSISTENT(h);
}

TEST(FirstSegmentFigures, ExpandableSegmentsTakeThemBeforeTheirFirstPages) {
  Harness h("expandable_segments:True", 1024 * kMiB);
  h.backend->set_device_processes(0, {{getpid(), 400 * kMiB}});
  const uintptr_t a = h.alloc(10 * kMiB);
  const std::optional<DeviceMemoryFigures> first = h.allocator.device(0).figures_before_first_segment();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->memory.free_bytes, 1024 * kMiB);
  EXPECT_EQ(first->processes.at(0).bytes, 400 * kMiB);
  h.free(a);
  EXPECT_CONSISTENT(h);
}

// A first segment made for a private pool (a CUDA graph being captured, a MemPool) may come
// during a capture, where no call beside the capture's own may run: nothing is taken then, nor
// later (the figures would no longer be of the process before the allocator).
TEST(FirstSegmentFigures, NotTakenForAFirstSegmentMadeForAPrivatePool) {
  Harness h("", 1024 * kMiB, 1, /*events_complete_immediately=*/true);
  DeviceCachingAllocator& device = h.allocator.device(0);
  h.backend->set_device_processes(0, {{getpid(), 500 * kMiB}});
  device.create_or_incref_pool(kPool);
  device.begin_allocate_to_pool(kPool, [](StreamId) { return true; });
  const uintptr_t pooled = h.alloc(1 * kMiB);
  device.end_allocate_to_pool(kPool);
  device.release_pool(kPool);  // (the scope's use of it)
  EXPECT_FALSE(device.figures_before_first_segment());
  const uintptr_t global = h.alloc(1 * kMiB);  // the device's own pools: a second segment
  EXPECT_FALSE(device.figures_before_first_segment());
  h.free(pooled);
  h.free(global);
  device.release_pool(kPool);
  EXPECT_CONSISTENT(h);
}

// NVML not loadable, the driver refusing the query: the allocation is served all the same.
class NvmlFails final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::vector<DeviceProcess> device_processes(int) override { throw DeviceError("NVML: driver not loaded"); }
};

TEST(FirstSegmentFigures, ABackendThatCannotAnswerLeavesThemUnsetAndTheAllocationGoesOn) {
  auto simulated = std::make_shared<SimulatedBackend>(SimulatedBackend::Options{1, 1024 * kMiB, false});
  CachingAllocator allocator(std::make_shared<NvmlFails>(simulated));
  void* block = allocator.allocate(1 * kMiB);
  ASSERT_NE(block, nullptr);
  EXPECT_FALSE(allocator.device(0).figures_before_first_segment());
  EXPECT_EQ(allocator.device_stats(0).segment[kAggregate].current, 1);
  allocator.deallocate(block);
  EXPECT_TRUE(allocator.check_invariants().empty());
}

}  // namespace
}  // namespace memsnap::testing
