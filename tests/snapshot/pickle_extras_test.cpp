// What PyTorch's layout has no key for survives a PyTorch-layout pickle written by memsnap
// (snapshot/pickle_extras.h): the process, statistics, the driver's figures and the memory
// outside the allocator with its stacks, on a real H200 snapshot; its times become Unix time
// with the trace's; and a damaged "memsnap" string is a one-line error.
#include "snapshot/pickle_extras.h"

#include <gtest/gtest.h>

#include <string>

#include "snapshot/base64_text.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "tests/test_snapshots.h"

namespace memsnap {
namespace {

std::vector<Frame> frames_of(const Snapshot& s, StackIndex stack) {
  std::vector<Frame> out;
  if (stack >= 0)
    for (uint32_t f : s.stacks.at(static_cast<size_t>(stack))) out.push_back(s.frames.at(f));
  return out;
}

TEST(PickleExtras, ARealStepKeepsWhatPyTorchsLayoutHasNoKeyFor) {
  const Snapshot want = testing::load_test_snapshot("memsnap-h200/nccl_cudnn_step.msgpack");
  ASSERT_TRUE(want.outside_memory && !want.device_memory.empty() && !want.statistics.empty());
  const std::string bytes = to_pytorch_pickle(want);
  const auto loaded = load_snapshot_from_memory(bytes);
  ASSERT_TRUE(loaded) << loaded.error();
  const Snapshot& got = loaded.value().snapshot;
  EXPECT_EQ(got.device_memory, want.device_memory);
  EXPECT_EQ(got.statistics, want.statistics);
  EXPECT_EQ(got.devices, want.devices);
  EXPECT_EQ(got.process.pid, want.process.pid);
  EXPECT_EQ(got.process.host, want.process.host);
  EXPECT_EQ(got.process.clock_offset_us, 0);  // its times are Unix time already
  ASSERT_TRUE(got.outside_memory);
  const OutsideMemory& w = *want.outside_memory;
  const OutsideMemory& g = *got.outside_memory;
  ASSERT_EQ(g.live.size(), w.live.size());
  ASSERT_EQ(g.events.size(), w.events.size());
  EXPECT_EQ(g.dropped_events, w.dropped_events);
  const int64_t shift = want.process.clock_offset_us;
  for (size_t i = 0; i < w.live.size(); ++i) {
    OutsideAllocation expected = w.live[i];
    expected.time_us += shift;
    expected.stack = g.live[i].stack;  // compared by frames
    EXPECT_EQ(g.live[i], expected) << i;
    EXPECT_EQ(frames_of(got, g.live[i].stack), frames_of(want, w.live[i].stack)) << i;
  }
  for (size_t i = 0; i < w.events.size(); ++i) {
    EXPECT_EQ(g.events[i].action, w.events[i].action) << i;
    EXPECT_EQ(g.events[i].allocation.time_us, w.events[i].allocation.time_us + shift) << i;
    EXPECT_EQ(frames_of(got, g.events[i].allocation.stack), frames_of(want, w.events[i].allocation.stack)) << i;
  }
  // The trace moved by the same amount: what happened between them is where it was.
  ASSERT_FALSE(got.device_traces.at(0).empty());
  EXPECT_EQ(got.device_traces[0][0].time_us, want.device_traces[0][0].time_us + shift);
  // Written again from what was read: the same pickle (no second shift).
  const std::string second = to_pytorch_pickle(got);
  const auto again = load_snapshot_from_memory(second);
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ(again.value().snapshot.outside_memory, got.outside_memory);
  EXPECT_EQ(to_pytorch_pickle(again.value().snapshot), second);
}

// The figures before the allocator's first segment and when the calls outside it were recorded
// from: carried, on the pickle's Unix clock like every other time in it.
TEST(PickleExtras, TheFiguresBeforeTheFirstSegmentAndTheRecordingsStartAreCarried) {
  const Snapshot want = testing::load_test_snapshot("memsnap-h200/cupy_before_first_segment.msgpack");
  ASSERT_EQ(want.device_memory_before_first_segment.size(), 1u);
  ASSERT_TRUE(want.outside_memory && want.outside_memory->recorded_since_us);
  const auto loaded = load_snapshot_from_memory(to_pytorch_pickle(want));
  ASSERT_TRUE(loaded) << loaded.error();
  const Snapshot& got = loaded.value().snapshot;
  const int64_t shift = want.process.clock_offset_us;
  ASSERT_EQ(got.device_memory_before_first_segment.size(), 1u);
  DeviceMemorySample expected = want.device_memory_before_first_segment[0];
  expected.time_us += shift;
  EXPECT_EQ(got.device_memory_before_first_segment[0], expected);
  EXPECT_EQ(got.outside_memory->recorded_since_us, *want.outside_memory->recorded_since_us + shift);
}

TEST(PickleExtras, NothingToCarryWritesNoKey) {
  Snapshot pytorch;
  pytorch.segments.push_back({});
  EXPECT_EQ(pickle_extras_text(pytorch), "");
  EXPECT_EQ(to_pytorch_pickle(pytorch).find("memsnap"), std::string::npos);
}

TEST(PickleExtras, ADamagedStringIsAOneLineError) {
  Snapshot s;
  s.process.pid = 4242;
  s.statistics.push_back({{"allocated_bytes.all.current", 7}});
  const std::string text = pickle_extras_text(s);
  ASSERT_FALSE(text.empty());
  const std::string bytes = to_pytorch_pickle(s);
  const size_t at = bytes.find(text);
  ASSERT_NE(at, std::string::npos);
  std::string broken = bytes;
  broken.replace(at, 4, "!!!!");
  EXPECT_EQ(testing::load_error(broken), "'memsnap': not base64 text");
  // Base64 of what is no msgpack snapshot: the msgpack reader's own error, after the key.
  const std::string junk = to_base64(std::string(from_base64(text)->size(), '\xc1'));
  ASSERT_EQ(junk.size(), text.size());
  broken = bytes;
  broken.replace(at, junk.size(), junk);
  const std::string error = testing::load_error(broken);
  EXPECT_EQ(error.rfind("'memsnap': ", 0), 0u) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  // Not a string at all.
  const std::string number = std::string("\x80\x04}(\x8c\x08segments]\x8c\x07memsnapK\x05u.", 28);
  EXPECT_NE(testing::load_error(number).find("memsnap: expected a string"), std::string::npos) << testing::load_error(number);
}

}  // namespace
}  // namespace memsnap
