// The recorder's levels, trace bound, per-block history and annotations, on the simulated
// device.
#include "history/history_recorder.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/symbolizer.h"

namespace history_recorder_test {

using memsnap::HistoryLevel;
using memsnap::TraceAction;

constexpr size_t kKiB = 1024;

struct Recording {
  std::shared_ptr<memsnap::SimulatedBackend> backend = std::make_shared<memsnap::SimulatedBackend>();
  memsnap::CachingAllocator allocator{backend};
  memsnap::HistoryRecorder recorder{allocator};

  void record(HistoryLevel level, size_t max_entries = 1000, bool stacks = true) {
    recorder.configure({level, max_entries, stacks});
  }
  std::vector<TraceAction> actions() {
    std::vector<TraceAction> out;
    for (const auto& event : recorder.trace(0)) out.push_back(event.action);
    return out;
  }
};

__attribute__((noinline)) void* allocate_parameters(memsnap::CachingAllocator& allocator) {
  void* p = allocator.allocate(300 * kKiB);
  asm volatile("" ::: "memory");
  return p;
}

TEST(HistoryRecorder, OffRecordsNothing) {
  Recording s;
  s.allocator.deallocate(s.allocator.allocate(4096));
  EXPECT_TRUE(s.recorder.trace(0).empty());
  EXPECT_TRUE(s.recorder.history_within(0, 0, ~uintptr_t{0}).empty());
}

// A device whose history is off is not watched at all, so its allocations take the
// allocator's fastest path; recording again watches it again and records.
TEST(HistoryRecorder, WatchesOnlyTheDevicesItRecords) {
  memsnap::SimulatedBackend::Options options;
  options.device_count = 2;
  memsnap::CachingAllocator allocator{std::make_shared<memsnap::SimulatedBackend>(options)};
  {
    memsnap::HistoryRecorder recorder{allocator};
    EXPECT_FALSE(allocator.device(0).observed());
    EXPECT_FALSE(allocator.device(1).observed());
    recorder.configure({HistoryLevel::kAll, 100, false}, /*device=*/1);
    EXPECT_FALSE(allocator.device(0).observed());
    EXPECT_TRUE(allocator.device(1).observed());
    recorder.configure({HistoryLevel::kAll, 100, false});
    EXPECT_TRUE(allocator.device(0).observed());
    recorder.configure({HistoryLevel::kOff, 100, false}, /*device=*/0);
    EXPECT_FALSE(allocator.device(0).observed());
    allocator.deallocate(allocator.allocate(4096, 0));
    EXPECT_TRUE(recorder.trace(0).empty());
    allocator.deallocate(allocator.allocate(4096, 1));
    EXPECT_EQ(recorder.trace(1).size(), 4u);  // segment_alloc, alloc, free_requested, free_completed
    recorder.configure({HistoryLevel::kAll, 100, false}, /*device=*/0);
    allocator.deallocate(allocator.allocate(4096, 0));
    EXPECT_EQ(recorder.trace(0).size(), 3u);  // its segment was made while nobody watched
  }
  EXPECT_FALSE(allocator.device(0).observed());  // a recorder gone watches nothing
  EXPECT_FALSE(allocator.device(1).observed());
}

TEST(HistoryRecorder, StateLevelKeepsWhoHoldsWhatButNoTrace) {
  Recording s;
  s.record(HistoryLevel::kState);
  void* p = s.allocator.allocate(4096);
  EXPECT_TRUE(s.recorder.trace(0).empty());
  const auto history = s.recorder.history_within(0, reinterpret_cast<uintptr_t>(p), 4096);
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].requested_size, 4096u);
  s.allocator.deallocate(p);
}

TEST(HistoryRecorder, AllocLevelTracesAllocationsOnlyAndAllAddsFreesAndSegments) {
  Recording s;
  s.record(HistoryLevel::kAlloc);
  s.allocator.deallocate(s.allocator.allocate(4096));
  EXPECT_EQ(s.actions(), std::vector<TraceAction>{TraceAction::kAlloc});
  s.recorder.clear();
  s.record(HistoryLevel::kAll);
  s.allocator.deallocate(s.allocator.allocate(4096));
  s.allocator.empty_cache();
  EXPECT_EQ(s.actions(), (std::vector<TraceAction>{TraceAction::kAlloc, TraceAction::kFreeRequested,
                                                   TraceAction::kFreeCompleted,
                                                   TraceAction::kSegmentFree}));
  s.allocator.deallocate(s.allocator.allocate(8192));
  EXPECT_EQ(s.actions()[4], TraceAction::kSegmentAlloc);
}

TEST(HistoryRecorder, TraceKeepsTheNewestMaxEntries) {
  Recording s;
  s.record(HistoryLevel::kAlloc, /*max_entries=*/3);
  std::vector<void*> held;
  for (size_t i = 1; i <= 5; ++i) held.push_back(s.allocator.allocate(i * 512));
  const auto trace = s.recorder.trace(0);
  ASSERT_EQ(trace.size(), 3u);
  EXPECT_EQ(trace[0].size, 3 * 512u);
  EXPECT_EQ(trace[2].size, 5 * 512u);
  EXPECT_EQ(s.recorder.dropped_trace_entries(0), 2u);
  for (void* p : held) s.allocator.deallocate(p);
}

TEST(HistoryRecorder, AllocationStackNamesTheCaller) {
  Recording s;
  s.record(HistoryLevel::kAlloc);
  void* p = allocate_parameters(s.allocator);
  const auto trace = s.recorder.trace(0);
  ASSERT_EQ(trace.size(), 1u);
  bool found = false;
  for (uintptr_t address : s.recorder.stack_frames(0, trace[0].stack))
    for (const auto& frame : memsnap::process_symbolizer().frames_at(address))
      found |= frame.function.find("allocate_parameters") != std::string::npos;
  EXPECT_TRUE(found);
  s.allocator.deallocate(p);
}

// One thread, one call path, two recorders whose tables give it different ids: the id a walk
// remembers for one table must never be handed to the other.
TEST(HistoryRecorder, ARepeatedPathGetsEachTablesOwnId) {
  Recording first;
  Recording second;
  // Warm caches first: a block taken from the cache is one path, a new segment another.
  first.allocator.deallocate(allocate_parameters(first.allocator));
  second.allocator.deallocate(allocate_parameters(second.allocator));
  first.record(HistoryLevel::kAlloc);
  second.record(HistoryLevel::kAlloc);
  second.allocator.deallocate(second.allocator.allocate(4096));  // another path takes id 0 there
  for (int i = 0; i < 40; ++i) {  // one call site for both: the same path
    memsnap::CachingAllocator& allocator = (i % 2 == 0 ? first : second).allocator;
    allocator.deallocate(allocate_parameters(allocator));
  }
  const auto first_trace = first.recorder.trace(0);
  const auto second_trace = second.recorder.trace(0);
  ASSERT_EQ(first_trace.size(), 20u);
  ASSERT_EQ(second_trace.size(), 21u);
  const std::vector<uintptr_t> path = first.recorder.stack_frames(0, first_trace[0].stack);
  ASSERT_FALSE(path.empty());
  EXPECT_NE(first_trace[0].stack, second_trace[1].stack);
  for (const auto& event : first_trace) EXPECT_EQ(first.recorder.stack_frames(0, event.stack), path);
  for (size_t i = 1; i < second_trace.size(); ++i)
    EXPECT_EQ(second.recorder.stack_frames(0, second_trace[i].stack), path) << i;
  EXPECT_EQ(first.recorder.stack_count(0), 1u);
  EXPECT_EQ(second.recorder.stack_count(0), 2u);
}

// As PyTorch's: under context "all" a free's entries carry the free's stack, a completion
// deferred by record_stream the stack of the allocation that completed it; under "alloc" both
// entries of a free carry the allocation's stack.
TEST(HistoryRecorder, FreeEntriesCarryTheStacksPyTorchGivesThem) {
  for (const memsnap::StackContext context : {memsnap::StackContext::kAll, memsnap::StackContext::kAlloc}) {
    Recording s;
    memsnap::HistorySettings settings;
    settings.level = HistoryLevel::kAll;
    settings.stack_context = context;
    s.recorder.configure(settings);
    void* now = allocate_parameters(s.allocator);
    s.allocator.deallocate(now);  // completes at once
    void* later = allocate_parameters(s.allocator);
    s.allocator.record_stream(later, 7);
    s.allocator.deallocate(later);                      // waits for stream 7
    s.allocator.deallocate(s.allocator.allocate(512));  // the next malloc completes it
    std::vector<memsnap::HistoryEvent> frees, allocs;
    for (const auto& event : s.recorder.trace(0)) {
      if (event.size != 300 * kKiB) continue;
      (event.action == TraceAction::kAlloc ? allocs : frees).push_back(event);
    }
    ASSERT_EQ(allocs.size(), 2u);
    ASSERT_EQ(frees.size(), 4u);  // requested, completed; requested, (deferred) completed
    EXPECT_EQ(frees[0].stack, frees[1].stack) << "a completion at once carries its free's stack";
    if (context == memsnap::StackContext::kAlloc) {
      EXPECT_EQ(frees[0].stack, allocs[0].stack);
      EXPECT_EQ(frees[2].stack, allocs[1].stack);
    } else {
      EXPECT_NE(frees[0].stack, allocs[0].stack) << "the free's own stack";
    }
    EXPECT_NE(frees[3].stack, memsnap::kNoStack) << "the completing call's stack";
  }
}

// While nothing records, allocations leave a block's tag (its allocation's stack) as it was;
// the frees of those allocations, recorded later, must not report the stack of an earlier
// allocation of the same block as theirs, whether they complete at once or after an event.
TEST(HistoryRecorder, FreesOfAllocationsMadeWhileOffCarryNoStack) {
  Recording s;
  memsnap::HistorySettings allocation_stacks;  // context "alloc": frees carry their allocation's
  allocation_stacks.level = HistoryLevel::kAll;
  allocation_stacks.stack_context = memsnap::StackContext::kAlloc;
  s.recorder.configure(allocation_stacks);
  void* first = allocate_parameters(s.allocator);
  void* second = allocate_parameters(s.allocator);
  s.allocator.deallocate(first);  // both blocks now carry a stack as their tag
  s.allocator.deallocate(second);
  s.recorder.configure({});
  void* now = allocate_parameters(s.allocator);  // the same blocks, from the cache
  void* later = allocate_parameters(s.allocator);
  s.allocator.record_stream(later, 7);
  s.allocator.deallocate(later);  // waits for stream 7
  s.recorder.configure(allocation_stacks);
  s.allocator.deallocate(now);
  s.allocator.deallocate(s.allocator.allocate(512));  // this malloc completes `later`
  int frees = 0;
  for (const auto& event : s.recorder.trace(0)) {
    if (event.action == TraceAction::kFreeRequested && event.size == 300 * kKiB) {
      ++frees;
      EXPECT_EQ(event.stack, memsnap::kNoStack);
    }
  }
  EXPECT_EQ(frees, 1);  // (`later` was requested while off)
}

TEST(HistoryRecorder, WithoutStacksEntriesCarryNone) {
  Recording s;
  s.record(HistoryLevel::kAll, 100, /*stacks=*/false);
  s.allocator.deallocate(s.allocator.allocate(4096));
  for (const auto& event : s.recorder.trace(0)) EXPECT_EQ(event.stack, memsnap::kNoStack);
  EXPECT_EQ(s.recorder.stack_count(0), 0u);
}

TEST(HistoryRecorder, MergedFreeBlocksKeepBothHistoriesUntilNewAllocationsOverlapThem) {
  Recording s;
  s.record(HistoryLevel::kState);
  void* a = s.allocator.allocate(512 * kKiB);
  void* b = s.allocator.allocate(512 * kKiB);
  const auto base = reinterpret_cast<uintptr_t>(a);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(b), base + 512 * kKiB);
  s.allocator.deallocate(a);
  s.allocator.deallocate(b);  // merges with a and the segment's free tail
  auto history = s.recorder.history_within(0, base, 2048 * kKiB);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].address, base);
  EXPECT_EQ(history[1].address, base + 512 * kKiB);
  void* c = s.allocator.allocate(768 * kKiB);  // lands at base, over all of a and half of b
  ASSERT_EQ(reinterpret_cast<uintptr_t>(c), base);
  history = s.recorder.history_within(0, base, 2048 * kKiB);
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].requested_size, 768 * kKiB);
  s.allocator.deallocate(c);
}

TEST(HistoryRecorder, ClearForgetsFreedMemoryButKeepsLiveAllocations) {
  Recording s;
  s.record(HistoryLevel::kAll);
  void* kept = s.allocator.allocate(4096);
  s.allocator.deallocate(s.allocator.allocate(4096));
  s.recorder.clear();
  EXPECT_TRUE(s.recorder.trace(0).empty());
  const auto history = s.recorder.history_within(0, 0, ~uintptr_t{0});
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].address, reinterpret_cast<uintptr_t>(kept));
  s.allocator.deallocate(kept);
}

TEST(HistoryRecorder, ScopedAnnotationsMarkStartAndEnd) {
  Recording s;
  s.record(HistoryLevel::kAlloc);
  {
    memsnap::ScopedAnnotation forward(s.recorder, "forward");
  }
  const auto annotations = s.recorder.annotations();
  ASSERT_EQ(annotations.size(), 2u);
  EXPECT_EQ(annotations[0].name, "forward");
  EXPECT_TRUE(annotations[0].start);
  EXPECT_FALSE(annotations[1].start);
  EXPECT_LE(annotations[0].time_us, annotations[1].time_us);
  EXPECT_THROW(s.recorder.configure({}, 3), std::out_of_range);
  EXPECT_EQ(memsnap::history_level_from_name("alloc"), HistoryLevel::kAlloc);
  EXPECT_FALSE(memsnap::history_level_from_name("everything").has_value());
}

}  // namespace history_recorder_test
