// A million random operations, each checked against a naive reference allocator (same
// addresses, same statistics) and by the invariant checker: reference_allocator.h for the
// usual segments, reference_expandable.h for expandable_segments:True.
#include <random>

#include "tests/test_scale.h"
#include "allocator_harness.h"
#include "reference_allocator.h"
#include "reference_expandable.h"

namespace memsnap::testing {
namespace {

struct Workload {
  const char* config;
  uint64_t seed;
};

class ReferenceModel : public ::testing::TestWithParam<Workload> {};

size_t random_size(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 10);
  auto log_uniform = [&](int min_log2, int max_log2) {
    const int bits = min_log2 + static_cast<int>(rng() % static_cast<uint64_t>(max_log2 - min_log2));
    return (size_t{1} << bits) + rng() % (size_t{1} << bits);
  };
  if (kind < 4) return log_uniform(0, 20);          // small pool
  if (kind < 8) return log_uniform(20, 23);         // 1-16 MiB
  if (kind < 9) return 12 * kMiB;                   // repeated sizes make ties
  return log_uniform(23, 27);                       // up to 256 MiB
}

template <typename Reference>
void agree_on_every_address_and_statistic(const Workload& workload) {
  constexpr size_t kCapacity = size_t{1} << 30;
  // The reference's naive walks run about 15 times slower under AddressSanitizer.
  constexpr int kOperations = 250000 / (kWorkDivisor == 1 ? 1 : 2 * kWorkDivisor);
  Harness h(workload.config, kCapacity);
  Reference reference(config_from(workload.config), kCapacity);
  std::mt19937_64 rng(workload.seed);
  std::vector<uintptr_t> live;
  int ooms = 0;

  for (int step = 0; step < kOperations; ++step) {
    const uint64_t roll = rng() % 1000;
    if (roll < 2) {
      h.allocator.empty_cache();
      reference.empty_cache();
    } else if (live.empty() || roll < 520) {
      const size_t bytes = random_size(rng);
      const StreamId stream = rng() % 3;
      const std::optional<uintptr_t> expected = reference.allocate(bytes, stream);
      uintptr_t actual = 0;
      try {
        actual = h.alloc(bytes, stream);
      } catch (const OutOfMemoryError&) {
        ++ooms;
      }
      ASSERT_EQ(actual, expected.value_or(0)) << "step " << step << ", alloc of " << bytes;
      if (actual) live.push_back(actual);
    } else {
      const size_t i = rng() % live.size();
      h.free(live[i]);
      reference.free(live[i]);
      live[i] = live.back();
      live.pop_back();
    }

    const DeviceStats stats = h.stats();
    const ReferenceAllocator::Totals totals = reference.totals();
    ASSERT_EQ(stats.allocated_bytes[kAggregate].current, totals.allocated_bytes) << "step " << step;
    ASSERT_EQ(stats.reserved_bytes[kAggregate].current, totals.reserved_bytes) << "step " << step;
    ASSERT_EQ(stats.requested_bytes[kAggregate].current, totals.requested_bytes) << "step " << step;
    ASSERT_EQ(stats.segment[kAggregate].current, totals.segments) << "step " << step;
    ASSERT_EQ(stats.allocation[kAggregate].current, totals.allocations) << "step " << step;
    ASSERT_EQ(stats.inactive_split[kAggregate].current, totals.inactive_split) << "step " << step;
    ASSERT_EQ(stats.inactive_split_bytes[kAggregate].current, totals.inactive_split_bytes)
        << "step " << step;
    ASSERT_EQ(stats.num_alloc_retries, totals.retries) << "step " << step;
    ASSERT_EQ(static_cast<int64_t>(h.backend->used_bytes(0)), stats.reserved_bytes[kAggregate].current)
        << "step " << step << ": the device and the statistics disagree on reserved memory";
    const auto problems = h.allocator.check_invariants();
    ASSERT_TRUE(problems.empty()) << "step " << step << ": " << ::testing::PrintToString(problems);
  }
  EXPECT_GT(ooms, 0) << "the workload should exercise the out-of-memory path";
  EXPECT_GT(h.stats().num_alloc_retries, 0);
  EXPECT_GT(h.stats().num_device_free, 0);
  ::testing::Test::RecordProperty("ooms", ooms);
}

TEST_P(ReferenceModel, AgreesOnEveryAddressAndStatistic) {
  const Workload workload = GetParam();
  if (config_from(workload.config).expandable_segments)
    agree_on_every_address_and_statistic<ReferenceExpandable>(workload);
  else
    agree_on_every_address_and_statistic<ReferenceAllocator>(workload);
}

std::string workload_name(const ::testing::TestParamInfo<Workload>& param) {
  const char* names[] = {"Defaults", "MaxSplitSize", "PowerTwoDivisions", "NonSplitRounding",
                         "ExpandableSegments", "ExpandableWithMaxSplitSize"};
  return names[param.index];
}

INSTANTIATE_TEST_SUITE_P(
    Configs, ReferenceModel,
    ::testing::Values(Workload{"", 1}, Workload{"max_split_size_mb:40", 2},
                      Workload{"roundup_power2_divisions:[1:4,16:8,>:2]", 3},
                      Workload{"max_split_size_mb:64,max_non_split_rounding_mb:30", 4},
                      Workload{"expandable_segments:True", 5},
                      Workload{"expandable_segments:True,max_split_size_mb:40", 6}),
    workload_name);

}  // namespace
}  // namespace memsnap::testing
