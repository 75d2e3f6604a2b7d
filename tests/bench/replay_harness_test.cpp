// The benchmarks' replay loop (bench/replay_harness.h): both harnesses make the same calls.
#include "bench/replay_harness.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace memsnap::bench {
namespace {

// What an allocator saw: "a BYTES -> N" for the N-th allocation, "f N" for its free.
struct CallLog {
  std::vector<std::string> calls;
  uintptr_t next = 0;

  void* allocate(uint64_t bytes, int stream) {
    ++next;
    calls.push_back("a " + std::to_string(bytes) + " s" + std::to_string(stream) + " -> " +
                    std::to_string(next));
    return reinterpret_cast<void*>(next);
  }
  void release(void* pointer) {
    calls.push_back("f " + std::to_string(reinterpret_cast<uintptr_t>(pointer)));
  }
};

std::vector<std::string> replay(const ReplayPlan& plan, Harness harness, int passes) {
  std::vector<int> streams;
  for (const TraceEvent& e : plan.trace().events) streams.push_back(static_cast<int>(e.stream));
  CallLog log;
  replay_ns_per_event(
      plan, streams, harness, passes,
      [&](uint64_t bytes, int stream) { return log.allocate(bytes, stream); },
      [&](void* pointer) { log.release(pointer); });
  return log.calls;
}

TEST(ReplayHarness, SlotsAndMapMakeTheSameCalls) {
  // id 9 is freed without being allocated; id 2 is allocated again while live (the first one
  // is never freed, as with the map's overwritten entry); ids 2 and 4 are live at the end.
  const auto trace = parse_allocation_trace(
      "a 1 100 0\n"
      "a 2 200 0\n"
      "f 1 0\n"
      "f 9 0\n"
      "a 2 300 1\n"
      "a 3 400 0\n"
      "a 4 500 1\n"
      "f 3 0\n");
  ASSERT_TRUE(trace.ok()) << trace.error();
  const ReplayPlan plan(trace.value());
  EXPECT_EQ(plan.slot_count(), 5u);
  EXPECT_EQ(plan.slot(2), 0u);
  EXPECT_EQ(plan.slot(3), ReplayPlan::kNoSlot);
  EXPECT_EQ(plan.slot(7), 3u);
  EXPECT_EQ(plan.left_live(), (std::vector<uint32_t>{2, 4}));

  const std::vector<std::string> one_pass{"a 100 s0 -> 1", "a 200 s0 -> 2", "f 1",
                                          "a 300 s1 -> 3", "a 400 s0 -> 4", "a 500 s1 -> 5",
                                          "f 4",           "f 3",           "f 5"};
  EXPECT_EQ(replay(plan, Harness::kSlots, 1), one_pass);
  // The map frees what is left in its own order.
  std::vector<std::string> map_calls = replay(plan, Harness::kMap, 1);
  ASSERT_EQ(map_calls.size(), one_pass.size());
  EXPECT_EQ(std::vector<std::string>(map_calls.begin(), map_calls.end() - 2),
            std::vector<std::string>(one_pass.begin(), one_pass.end() - 2));
  EXPECT_TRUE((map_calls[7] == "f 3" && map_calls[8] == "f 5") ||
              (map_calls[7] == "f 5" && map_calls[8] == "f 3"));

  // A second pass starts with nothing live and the same calls.
  const std::vector<std::string> two = replay(plan, Harness::kSlots, 2);
  ASSERT_EQ(two.size(), 2 * one_pass.size());
  EXPECT_EQ(two[9], "a 100 s0 -> 6");
  EXPECT_EQ(two[11], "f 6");
  EXPECT_EQ(two.back(), "f 10");
}

TEST(ReplayHarness, TimesAShortTraceOverAsManyEventsAsALongOne) {
  EXPECT_EQ(passes_for(19978), 4);    // 79,912 events a turn
  EXPECT_EQ(passes_for(162), 371);    // 60,102
  EXPECT_EQ(passes_for(6), 10000);    // 60,000
  EXPECT_EQ(passes_for(60000), 3);    // never fewer than 3
  EXPECT_EQ(passes_for(1000000), 3);
  EXPECT_EQ(passes_for(0), 3);
  EXPECT_EQ(passes_for(1, 1000000000), 100000);  // the benches' own limit
}

TEST(ReplayHarness, NamesItsHarnesses) {
  Harness harness = Harness::kMap;
  EXPECT_TRUE(parse_harness("slots", harness));
  EXPECT_EQ(harness, Harness::kSlots);
  EXPECT_STREQ(harness_name(harness), "slots");
  EXPECT_TRUE(parse_harness("map", harness));
  EXPECT_EQ(harness, Harness::kMap);
  EXPECT_FALSE(parse_harness("Map", harness));
  EXPECT_FALSE(parse_harness("", harness));
  EXPECT_EQ(harness, Harness::kMap);
}

}  // namespace
}  // namespace memsnap::bench
