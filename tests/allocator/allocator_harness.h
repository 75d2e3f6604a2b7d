// A caching allocator on a simulated device, with helpers the allocator tests share.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"

namespace memsnap::testing {

inline constexpr size_t kKiB = 1024;
inline constexpr size_t kMiB = 1024 * 1024;

inline AllocatorConfig config_from(const std::string& text) {
  Result<AllocatorConfig> parsed = parse_allocator_config(text);
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  return parsed.ok() ? parsed.value() : AllocatorConfig{};
}

struct Harness {
  explicit Harness(const std::string& config = "", size_t capacity = size_t{80} << 30,
                   int devices = 1, bool events_complete_immediately = false)
      : backend(std::make_shared<SimulatedBackend>(
            SimulatedBackend::Options{devices, capacity, events_complete_immediately})),
        allocator(backend, config_from(config)) {}

  uintptr_t alloc(size_t bytes, StreamId stream = 0, int device = 0) {
    return reinterpret_cast<uintptr_t>(allocator.allocate(bytes, device, stream));
  }
  void free(uintptr_t address) { allocator.deallocate(reinterpret_cast<void*>(address)); }
  const DeviceStats stats(int device = 0) { return allocator.device_stats(device); }
  int64_t reserved(int device = 0) { return stats(device).reserved_bytes[kAggregate].current; }
  int64_t segments(int device = 0) { return stats(device).segment[kAggregate].current; }

  std::shared_ptr<SimulatedBackend> backend;
  CachingAllocator allocator;
};

// Fails the test with every violated invariant.
#define EXPECT_CONSISTENT(harness)                                        \
  do {                                                                    \
    auto problems_ = (harness).allocator.check_invariants();              \
    EXPECT_TRUE(problems_.empty()) << ::testing::PrintToString(problems_); \
  } while (0)

}  // namespace memsnap::testing
