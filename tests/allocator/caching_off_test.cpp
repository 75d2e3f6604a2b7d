// Caching off (MEMSNAP_NO_CACHING=1, PYTORCH_NO_CUDA_MEMORY_CACHING=1): every request is a device
// allocation and every free gives the memory back, with statistics kept.
#include <cstdlib>

#include "allocator_harness.h"

namespace memsnap::testing {
namespace {

AllocatorConfig no_caching() {
  AllocatorConfig config;
  config.caching = false;
  return config;
}

struct Uncached {
  std::shared_ptr<SimulatedBackend> backend = std::make_shared<SimulatedBackend>(
      SimulatedBackend::Options{1, size_t{80} << 30, /*events_complete_immediately=*/false});
  CachingAllocator allocator{backend, no_caching()};
  DeviceStats stats() { return allocator.device_stats(0); }
};

TEST(CachingOff, EveryRequestIsItsOwnDeviceAllocationAndEveryFreeGivesItBack) {
  Uncached u;
  void* a = u.allocator.allocate(1000);
  void* b = u.allocator.allocate(3 * kMiB);
  EXPECT_EQ(u.stats().num_device_alloc, 2);
  EXPECT_EQ(u.stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(1024 + 3 * kMiB));
  EXPECT_EQ(u.stats().allocated_bytes[kAggregate].current, static_cast<int64_t>(1024 + 3 * kMiB));
  u.allocator.deallocate(a);
  EXPECT_EQ(u.stats().num_device_free, 1);
  void* c = u.allocator.allocate(1000);  // nothing cached to reuse
  EXPECT_EQ(u.stats().num_device_alloc, 3);
  u.allocator.deallocate(b);
  u.allocator.deallocate(c);
  EXPECT_EQ(u.stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_EQ(u.stats().reserved_bytes[kAggregate].peak, static_cast<int64_t>(1024 + 3 * kMiB));
  EXPECT_EQ(u.stats().num_device_free, 3);
  EXPECT_TRUE(u.allocator.check_invariants().empty());
}

TEST(CachingOff, MemoryUsedOnAnotherStreamGoesBackWhenThatStreamIsDone) {
  Uncached u;
  void* a = u.allocator.allocate(8 * kMiB);
  u.allocator.record_stream(a, 5);
  u.allocator.deallocate(a);
  EXPECT_EQ(u.stats().reserved_bytes[kAggregate].current, static_cast<int64_t>(8 * kMiB));
  EXPECT_EQ(u.stats().active_bytes[kAggregate].current, static_cast<int64_t>(8 * kMiB));
  EXPECT_TRUE(u.allocator.check_invariants().empty());
  u.backend->complete_all_events();
  u.allocator.deallocate(u.allocator.allocate(512));  // the next request collects it
  EXPECT_EQ(u.stats().reserved_bytes[kAggregate].current, 0);
  EXPECT_TRUE(u.allocator.check_invariants().empty());
}

TEST(CachingOff, OutOfMemoryIsTheDevicesOwn) {
  auto backend = std::make_shared<SimulatedBackend>(SimulatedBackend::Options{1, 10 * kMiB, true});
  CachingAllocator allocator(backend, no_caching());
  void* a = allocator.allocate(6 * kMiB);
  EXPECT_THROW(allocator.allocate(6 * kMiB), OutOfMemoryError);
  allocator.deallocate(a);
  EXPECT_NO_THROW(allocator.deallocate(allocator.allocate(6 * kMiB)));
  EXPECT_TRUE(allocator.check_invariants().empty());
}

TEST(CachingOff, TheEnvironmentTurnsItOffAndABadValueIsNamed) {
  ::setenv("MEMSNAP_NO_CACHING", "1", 1);
  Result<AllocatorConfig> config = allocator_config_from_environment();
  ASSERT_TRUE(config.ok()) << config.error();
  EXPECT_FALSE(config->caching);
  ::setenv("MEMSNAP_NO_CACHING", "0", 1);
  ::setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", 1);
  config = allocator_config_from_environment();
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(config->caching);
  ::setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "maybe", 1);
  config = allocator_config_from_environment();
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.error().find("PYTORCH_NO_CUDA_MEMORY_CACHING"), std::string::npos) << config.error();
  ::unsetenv("PYTORCH_NO_CUDA_MEMORY_CACHING");
  ::unsetenv("MEMSNAP_NO_CACHING");
  config = allocator_config_from_environment();
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(config->caching);
}

}  // namespace
}  // namespace memsnap::testing
