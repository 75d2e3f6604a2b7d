// What a trace's events were recorded under: the log of changes beside the ring (bounded, right
// after the ring wrapped), the calling thread's labels, and what the recorder writes into a
// trace when a program changes its settings, its metadata or its compile context.
#include <gtest/gtest.h>

#include <thread>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "history/trace_labels.h"
#include "history/trace_state_log.h"

namespace trace_state_test {

using memsnap::TraceStateChange;
using memsnap::TraceStateKind;

TEST(TraceStateLog, ChangesLandOnTheEventsTheyPrecede) {
  memsnap::TraceStateLog log;
  log.set(TraceStateKind::kSettings, "a", 0, 0);
  log.set(TraceStateKind::kSettings, "b", 5, 0, "request b");
  log.set(TraceStateKind::kSettings, "c", 9, 0);
  // A trace holding events 3..12: "a" held at its first event (index 0), b from event 5 (index
  // 2), c from event 9 (index 6).
  const std::vector<TraceStateChange> changes = log.changes_for(3, 10);
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0], (TraceStateChange{0, TraceStateKind::kSettings, "a", ""}));
  EXPECT_EQ(changes[1], (TraceStateChange{2, TraceStateKind::kSettings, "b", "request b"}));
  EXPECT_EQ(changes[2], (TraceStateChange{6, TraceStateKind::kSettings, "c", ""}));
  // After the ring wrapped past event 9, "c" is what the first event was recorded under.
  EXPECT_EQ(log.changes_for(10, 3), (std::vector<TraceStateChange>{{0, TraceStateKind::kSettings, "c", ""}}));
}

TEST(TraceStateLog, ChangesWithNoEventBetweenKeepTheLastAndFoldAwayWhenOld) {
  memsnap::TraceStateLog log;
  for (int i = 0; i < 10'000; ++i) log.set(TraceStateKind::kSettings, "v" + std::to_string(i), 7, 0);
  EXPECT_EQ(log.changes_for(7, 1).size(), 1u);
  // One change per event, the ring keeping the last 100: the log stays near what the ring holds.
  for (uint64_t event = 8; event < 100'000; ++event)
    log.set(TraceStateKind::kSettings, "e" + std::to_string(event), event, event > 100 ? event - 100 : 0);
  const std::vector<TraceStateChange> kept = log.changes_for(99'900, 100);
  ASSERT_EQ(kept.size(), 100u);
  EXPECT_EQ(kept.front().value, "e99900");
  EXPECT_EQ(kept.back().value, "e99999");
}

TEST(TraceLabels, BelongToTheCallingThread) {
  memsnap::trace_labels::set_user_metadata("step 7");
  memsnap::trace_labels::push_compile_context("Torch-Compiled Region: 0/0");
  const memsnap::LabelId here = memsnap::trace_labels::current();
  memsnap::LabelId there = 1;
  std::thread([&] { there = memsnap::trace_labels::current(); }).join();
  EXPECT_EQ(there, memsnap::kNoLabel);
  const memsnap::TraceLabel label = memsnap::trace_labels::resolve(here);
  EXPECT_EQ(label.user_metadata, "step 7");
  EXPECT_EQ(label.compile_context, "Torch-Compiled Region: 0/0");
  memsnap::trace_labels::pop_compile_context();
  memsnap::trace_labels::pop_compile_context();  // (popping none does nothing)
  EXPECT_EQ(memsnap::trace_labels::resolve(memsnap::trace_labels::current()).compile_context, "");
  memsnap::trace_labels::set_user_metadata("");
  EXPECT_EQ(memsnap::trace_labels::current(), memsnap::kNoLabel);
}

struct Recording {
  std::shared_ptr<memsnap::SimulatedBackend> backend = std::make_shared<memsnap::SimulatedBackend>();
  memsnap::CachingAllocator allocator{backend};
  memsnap::HistoryRecorder recorder{allocator};
};

TEST(HistoryRecorderState, ASettingsChangeIsRecordedAtTheEventItPrecedes) {
  Recording s;
  s.recorder.configure({memsnap::HistoryLevel::kAll, 1000, false});
  s.allocator.deallocate(s.allocator.allocate(4096));  // 4 events: segment, alloc, free x2
  s.allocator.set_config(memsnap::parse_allocator_config("max_split_size_mb:64").value(), "max_split_size_mb:64");
  s.allocator.deallocate(s.allocator.allocate(4096));
  const memsnap::HistoryRecorder::TraceRead read = s.recorder.trace_read(0);
  ASSERT_EQ(read.events.size(), 7u);
  ASSERT_EQ(read.changes.size(), 3u);
  EXPECT_EQ(read.changes[0], (TraceStateChange{0, TraceStateKind::kSettings, "", ""}));
  EXPECT_EQ(read.changes[1], (TraceStateChange{0, TraceStateKind::kMemoryCap, "none", ""}));
  EXPECT_EQ(read.changes[2],
            (TraceStateChange{4, TraceStateKind::kSettings, "max_split_size_mb:64", "max_split_size_mb:64"}));
}

// Settings unchanged while recording are the snapshot's own: the trace carries no copy. The memory
// cap it always carries (none here), so a replay knows it ran under none.
TEST(HistoryRecorderState, WithoutAChangeTheTraceCarriesNoSettings) {
  Recording s;
  s.recorder.configure({memsnap::HistoryLevel::kAll, 1000, false});
  s.allocator.deallocate(s.allocator.allocate(4096));
  EXPECT_EQ(s.recorder.trace_read(0).changes,
            (std::vector<TraceStateChange>{{0, TraceStateKind::kMemoryCap, "none", ""}}));
}

TEST(HistoryRecorderState, EventsCarryTheRecordingThreadsLabel) {
  Recording s;
  s.recorder.configure({memsnap::HistoryLevel::kAll, 1000, false});
  memsnap::trace_labels::set_user_metadata("metadata test");
  void* p = s.allocator.allocate(4096);
  memsnap::trace_labels::set_user_metadata("");
  s.allocator.deallocate(p);
  const auto events = s.recorder.trace(0);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(memsnap::trace_labels::resolve(events[1].label).user_metadata, "metadata test");  // the alloc
  EXPECT_EQ(events[2].label, memsnap::kNoLabel);                                             // its free
}

}  // namespace trace_state_test
