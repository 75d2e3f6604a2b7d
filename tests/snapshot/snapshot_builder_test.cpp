// A snapshot of a live allocator says what the allocator holds, who asked for it, and what
// happened, with stacks starting at the user's code.
#include "snapshot/snapshot_builder.h"

#include <gtest/gtest.h>

#include <string>

#include "snapshot/json_writer.h"
#include "snapshot_test_support.h"

namespace snapshot_test {

using memsnap::BlockState;
using memsnap::Snapshot;

std::string first_function(const Snapshot& s, memsnap::StackIndex stack) {
  if (stack < 0) return "";
  const auto& frames = s.stacks.at(static_cast<size_t>(stack));
  return frames.empty() ? "" : s.frames.at(frames.front()).function;
}

TEST(SnapshotBuilder, DescribesSegmentsBlocksAndTheirStates) {
  RecordedProgram program;
  run_training_step(program);
  const Snapshot s = memsnap::take_snapshot(program.allocator, &program.recorder);
  const auto stats = program.allocator.device_stats(0);
  ASSERT_EQ(s.segments.size(), static_cast<size_t>(stats.segment[memsnap::kAggregate].current));
  uint64_t allocated = 0, reserved = 0;
  size_t active_blocks = 0;
  for (const auto& segment : s.segments) {
    reserved += segment.total_size;
    allocated += segment.allocated_size;
    uint64_t covered = 0;
    for (const auto& block : segment.blocks) {
      covered += block.size;
      if (block.state == BlockState::kActiveAllocated) {
        ++active_blocks;
        EXPECT_GT(block.requested_size, 0u);
        EXPECT_GE(block.stack, 0) << "an allocated block names the stack that allocated it";
      }
    }
    EXPECT_EQ(covered, segment.total_size);
    EXPECT_TRUE(segment.segment_type == "small" || segment.segment_type == "large");
  }
  EXPECT_EQ(allocated, static_cast<uint64_t>(stats.allocated_bytes[memsnap::kAggregate].current));
  EXPECT_EQ(reserved, static_cast<uint64_t>(stats.reserved_bytes[memsnap::kAggregate].current));
  EXPECT_EQ(active_blocks, program.held.size());
  ASSERT_EQ(s.statistics.size(), 1u);
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_GT(s.process.pid, 0);
  EXPECT_FALSE(s.allocator_settings.empty());
}

TEST(SnapshotBuilder, StacksStartAtTheUsersCode) {
  RecordedProgram program;
  run_training_step(program);
  const Snapshot s = memsnap::take_snapshot(program.allocator, &program.recorder);
  ASSERT_FALSE(s.device_traces.at(0).empty());
  size_t allocs = 0;
  for (const auto& entry : s.device_traces[0]) {
    if (entry.action != memsnap::TraceAction::kAlloc) continue;
    ++allocs;
    const std::string top = first_function(s, entry.stack);
    EXPECT_EQ(top.rfind("memsnap::", 0), std::string::npos) << top;
    EXPECT_NE(top.find("run_training_step"), std::string::npos) << top;
  }
  EXPECT_EQ(allocs, 7u);
  EXPECT_EQ(s.device_traces[0].back().action, memsnap::TraceAction::kSnapshot);
  ASSERT_EQ(s.external_annotations.size(), 2u);
  EXPECT_EQ(s.external_annotations[0].stage, "START");
  EXPECT_EQ(s.external_annotations[0].name, "step 1");
}

// Each frame of the table is held by some stack, once: the recorder's own frames, which
// stacks leave out, are not in it.
TEST(SnapshotBuilder, TheFrameTableHoldsTheStacksFramesOnly) {
  RecordedProgram program;
  run_training_step(program);
  run_training_step(program);
  const Snapshot s = memsnap::take_snapshot(program.allocator, &program.recorder);
  ASSERT_FALSE(s.frames.empty());
  std::vector<int> uses(s.frames.size(), 0);
  for (const std::vector<uint32_t>& stack : s.stacks)
    for (const uint32_t frame : stack) ++uses.at(frame);
  for (size_t i = 0; i < s.frames.size(); ++i) {
    EXPECT_GT(uses[i], 0) << s.frames[i].function;
    EXPECT_EQ(s.frames[i].function.rfind("memsnap::", 0), std::string::npos) << s.frames[i].function;
    for (size_t j = 0; j < i; ++j) EXPECT_FALSE(s.frames[j] == s.frames[i]) << s.frames[i].function;
  }
}

TEST(SnapshotBuilder, WithoutARecorderStillDescribesMemory) {
  RecordedProgram program;
  run_training_step(program);
  const Snapshot s = memsnap::take_snapshot(program.allocator, nullptr);
  EXPECT_FALSE(s.segments.empty());
  EXPECT_TRUE(s.frames.empty());
  for (const auto& segment : s.segments)
    for (const auto& block : segment.blocks) EXPECT_EQ(block.stack, memsnap::kNoStackIndex);
}

TEST(SnapshotBuilder, JsonExpandsFrames) {
  RecordedProgram program;
  run_training_step(program);
  const nlohmann::json json = nlohmann::json::parse(memsnap::to_json_text(memsnap::take_snapshot(program.allocator, &program.recorder)));
  EXPECT_EQ(json["format"], "memsnap-snapshot");
  const auto& first_alloc = json["device_traces"][0][0];
  EXPECT_EQ(first_alloc["action"], "segment_alloc");
  ASSERT_FALSE(first_alloc["frames"].empty());
  EXPECT_TRUE(first_alloc["frames"][0].contains("filename"));
  EXPECT_TRUE(json["segments"][0]["blocks"][0].contains("state"));
}

}  // namespace snapshot_test
