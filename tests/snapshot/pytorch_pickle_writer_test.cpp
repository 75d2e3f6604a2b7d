// memsnap's writer of PyTorch's snapshot pickle, read back by memsnap's PyTorch reader (the
// one checked against real PyTorch pickles): integers at their limits, stacks joined to their
// forward call split into frames and forward_frames and joined again, shared frames written
// once. (tests/snapshot/pickle_writer_check.py checks the same files against Python's pickle.)
#include "snapshot/pytorch_pickle_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "snapshot/snapshot_loader.h"

namespace pytorch_pickle_writer_test {

memsnap::Snapshot joined_snapshot() {
  memsnap::Snapshot s;
  s.frames = {{"at::native::empty_cuda", "", 0},
              {std::string(memsnap::kBackwardOfForwardFunction), "", 0},
              {"forward", "/models/linear.py", 134},
              {"<module>", "train.py", 57}};
  s.stacks = {{0, 1, 2, 3}, {2, 3}, {1, 2, 3}};
  memsnap::SnapshotSegment segment;
  segment.address = uint64_t{1} << 47;
  segment.total_size = uint64_t{20} << 30;  // past 32 bits
  segment.stream = UINT64_MAX - 1;          // past int64: a stream handle's bits
  segment.segment_type = "large";
  segment.segment_pool_id = {3, 0};
  segment.stack = 1;
  memsnap::SnapshotBlock block;
  block.address = segment.address;
  block.size = segment.total_size;
  block.requested_size = segment.total_size - 1;
  block.state = memsnap::BlockState::kActiveAllocated;
  block.stack = 0;
  segment.blocks.push_back(block);
  segment.allocated_size = segment.active_size = block.size;
  segment.requested_size = block.requested_size;
  s.segments.push_back(segment);
  s.device_traces.resize(1);
  for (int i = 0; i < 1500; ++i)  // past one batch of a thousand items
    s.device_traces[0].push_back({memsnap::TraceAction::kAlloc, block.address + static_cast<uint64_t>(i), 512,
                                  segment.stream, -5 + i, i % 3});
  s.device_traces[0].push_back({memsnap::TraceAction::kOom, 123456789, uint64_t{1} << 40, 0, 2000, 2});
  // Integers in LONG1 at each of its lengths, both signs: times before the epoch down to
  // INT64_MIN, sizes up to UINT64_MAX (nine bytes).
  for (int bits = 31; bits < 63; ++bits) {
    const int64_t magnitude = int64_t{1} << bits;
    s.device_traces[0].push_back({memsnap::TraceAction::kFreeRequested, uint64_t{1} << bits,
                                  ~uint64_t{0} >> (63 - bits), 0, -magnitude - 1, 0});
    s.device_traces[0].push_back({memsnap::TraceAction::kFreeCompleted, (uint64_t{1} << bits) - 1,
                                  uint64_t{1} << bits, 0, -magnitude, 0});
  }
  s.device_traces[0].push_back({memsnap::TraceAction::kFreeCompleted, uint64_t{1} << 63, UINT64_MAX, 0, INT64_MIN, 0});
  s.allocator_settings = {{"config", "\"max_split_size_mb:64\""}, {"max_split_size", "67108864"},
                          {"garbage_collection_threshold", "0.5"}, {"roundup_power2_divisions", "[0,4,0]"}};
  return s;
}

TEST(PyTorchPickleWriter, ReadsBackAsTheSnapshotItWasWrittenFrom) {
  const memsnap::Snapshot want = joined_snapshot();
  const std::string bytes = memsnap::to_pytorch_pickle(want);
  const auto loaded = memsnap::load_snapshot_from_memory(bytes);
  ASSERT_TRUE(loaded) << loaded.error();
  ASSERT_EQ(loaded.value().format, memsnap::SnapshotFormat::kPickle);
  const memsnap::Snapshot& got = loaded.value().snapshot;
  const auto frames_of = [](const memsnap::Snapshot& s, memsnap::StackIndex stack) {
    std::vector<memsnap::Frame> out;
    if (stack >= 0)
      for (uint32_t f : s.stacks.at(static_cast<size_t>(stack))) out.push_back(s.frames.at(f));
    return out;
  };
  ASSERT_EQ(got.segments.size(), 1u);
  const memsnap::SnapshotSegment& segment = got.segments[0];
  EXPECT_EQ(segment.address, want.segments[0].address);
  EXPECT_EQ(segment.total_size, want.segments[0].total_size);
  EXPECT_EQ(segment.stream, want.segments[0].stream);
  EXPECT_EQ(segment.segment_pool_id, want.segments[0].segment_pool_id);
  EXPECT_EQ(frames_of(got, segment.stack), frames_of(want, 1));
  ASSERT_EQ(segment.blocks.size(), 1u);
  EXPECT_EQ(segment.blocks[0].requested_size, want.segments[0].blocks[0].requested_size);
  EXPECT_EQ(frames_of(got, segment.blocks[0].stack), frames_of(want, 0)) << "C++ frames, joint, forward call";
  ASSERT_EQ(got.device_traces.size(), 1u);
  ASSERT_EQ(got.device_traces[0].size(), want.device_traces[0].size());
  for (size_t i = 0; i < want.device_traces[0].size(); ++i) {
    const memsnap::TraceEntry& w = want.device_traces[0][i];
    const memsnap::TraceEntry& g = got.device_traces[0][i];
    ASSERT_EQ(g.action, w.action) << i;
    EXPECT_EQ(g.address, w.address) << i;
    EXPECT_EQ(g.size, w.size) << i;
    EXPECT_EQ(g.stream, w.stream) << i;
    EXPECT_EQ(g.time_us, w.time_us) << i;
    EXPECT_EQ(frames_of(got, g.stack), frames_of(want, w.stack)) << i;
  }
  // memsnap's setting names become PyTorch's.
  std::vector<std::pair<std::string, std::string>> settings(got.allocator_settings.begin(), got.allocator_settings.end());
  EXPECT_NE(std::find(settings.begin(), settings.end(), std::pair<std::string, std::string>{"PYTORCH_CUDA_ALLOC_CONF", "\"max_split_size_mb:64\""}),
            settings.end());
  EXPECT_NE(std::find(settings.begin(), settings.end(), std::pair<std::string, std::string>{"roundup_power2_divisions", "{\"1\":0,\"2\":4,\"4\":0}"}),
            settings.end());
}

TEST(PyTorchPickleWriter, WritesEachFrameAndStackOnce) {
  memsnap::Snapshot s = joined_snapshot();
  const size_t once = memsnap::to_pytorch_pickle(s).size();
  for (int i = 0; i < 10000; ++i) s.device_traces[0].push_back(s.device_traces[0][static_cast<size_t>(i % 1500)]);
  const size_t more = memsnap::to_pytorch_pickle(s).size();
  // An entry names its keys, strings and stack by memo: well under 100 bytes.
  EXPECT_LT((more - once) / 10000.0, 100.0);
}

}  // namespace pytorch_pickle_writer_test
