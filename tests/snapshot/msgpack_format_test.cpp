// The msgpack format: a round trip keeps the whole model; damaged and hostile files are
// refused with a clear error, never a crash or a huge allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "snapshot/json_writer.h"
#include "snapshot/msgpack_cursor.h"
#include "snapshot/msgpack_reader.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/snapshot_loader.h"
#include "tests/snapshot/cut_short_file.h"
#include "snapshot_test_support.h"

namespace snapshot_test {

std::string recorded_snapshot_bytes() {
  RecordedProgram program;
  run_training_step(program);
  return memsnap::to_msgpack(memsnap::take_snapshot(program.allocator, &program.recorder));
}

// A recorded snapshot whose trace is repeated to `entries` events: a file of several MiB.
memsnap::Snapshot long_snapshot(size_t entries) {
  RecordedProgram program;
  run_training_step(program);
  memsnap::Snapshot snapshot = memsnap::take_snapshot(program.allocator, &program.recorder);
  auto& trace = snapshot.device_traces.at(0);
  const auto recorded = trace;
  while (trace.size() < entries) trace.push_back(recorded[trace.size() % recorded.size()]);
  return snapshot;
}

// The top-level map's fields after the format tag and version: each field's key and value as
// the bytes that encode them.
std::vector<std::string> top_level_fields(const std::string& bytes, std::string& head) {
  memsnap::MsgpackCursor in(bytes);
  const size_t count = in.map(memsnap::Where{});
  for (int i = 0; i < 4; ++i) in.skip(memsnap::Where{});  // format, version
  head = bytes.substr(1, in.offset() - 1);
  std::vector<std::string> fields;
  for (size_t i = 2; i < count; ++i) {
    const size_t begin = in.offset();
    in.skip(memsnap::Where{});
    in.skip(memsnap::Where{});
    fields.push_back(bytes.substr(begin, in.offset() - begin));
  }
  return fields;
}

TEST(MsgpackFormat, RoundTripKeepsTheWholeModel) {
  RecordedProgram program;
  run_training_step(program);
  memsnap::SnapshotOptions options;
  options.job.rank = 3;
  const memsnap::Snapshot original = memsnap::take_snapshot(program.allocator, &program.recorder, options);
  ASSERT_FALSE(original.frames.empty());
  ASSERT_FALSE(original.device_traces.at(0).empty());
  const auto read = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(original));
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_TRUE(read.value() == original);
  EXPECT_EQ(read.value().process.rank, 3);
}

// The driver's figures for each device (device_memory) go through a file unchanged; a file whose
// figures contradict themselves is refused.
TEST(MsgpackFormat, DeviceMemorySamplesRoundTripAndImpossibleOnesAreRefused) {
  RecordedProgram program;
  run_training_step(program);
  memsnap::Snapshot snapshot = memsnap::take_snapshot(program.allocator, &program.recorder);
  ASSERT_EQ(snapshot.device_memory.size(), 1u);  // the simulated device, sampled
  snapshot.device_memory[0].processes = {{4242, 3u << 30}, {17, 1u << 20}};
  ASSERT_EQ(snapshot.device_memory_before_first_segment.size(), 1u);  // taken before its first segment
  snapshot.device_memory_before_first_segment[0].processes = {{4242, 500u << 20}};
  const auto read = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(snapshot));
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_EQ(read.value().device_memory, snapshot.device_memory);
  EXPECT_EQ(read.value().device_memory_before_first_segment, snapshot.device_memory_before_first_segment);
  const nlohmann::json json = nlohmann::json::parse(memsnap::to_json_text(snapshot));
  EXPECT_EQ(json["device_memory_before_first_segment"][0]["processes"][0]["bytes"], 500u << 20);
  memsnap::Snapshot first_impossible = snapshot;
  first_impossible.device_memory_before_first_segment[0].free_bytes =
      first_impossible.device_memory_before_first_segment[0].total_bytes + 1;
  EXPECT_NE(memsnap::snapshot_from_msgpack(memsnap::to_msgpack(first_impossible))
                .error()
                .find("device_memory_before_first_segment[0]: more bytes free than the device has"),
            std::string::npos);
  EXPECT_TRUE(read.value() == snapshot);
  snapshot.device_memory[0].free_bytes = snapshot.device_memory[0].total_bytes + 1;
  const auto impossible = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(snapshot));
  ASSERT_FALSE(impossible.ok());
  EXPECT_NE(impossible.error().find("device_memory[0]: more bytes free than the device has"), std::string::npos)
      << impossible.error();
  snapshot.device_memory[0].free_bytes = 0;
  snapshot.device_memory[0].device = 5000;
  EXPECT_NE(memsnap::snapshot_from_msgpack(memsnap::to_msgpack(snapshot)).error().find("out of range"),
            std::string::npos);
}

// Memory outside the allocator (outside_memory) goes through a file unchanged, in msgpack and in
// JSON; records that contradict themselves are refused.
TEST(MsgpackFormat, OutsideMemoryRoundTripsAndImpossibleRecordsAreRefused) {
  RecordedProgram program;
  run_training_step(program);
  memsnap::Snapshot snapshot = memsnap::take_snapshot(program.allocator, &program.recorder);
  ASSERT_FALSE(snapshot.stacks.empty());
  memsnap::OutsideMemory outside;
  const memsnap::OutsideAllocation nccl{0, 0x7f0000000000, 64u << 20, memsnap::OutsideKind::kDevice, "cudaMalloc",
                                        "libnccl.so.2", 0, 1234};
  const memsnap::OutsideAllocation pinned{-1, 0x5000000, 2u << 20, memsnap::OutsideKind::kPinnedHost,
                                          "cudaHostAlloc", "libtorch_cuda.so", memsnap::kNoStackIndex, 1300};
  outside.live = {nccl, pinned};
  memsnap::OutsideAllocation freed = nccl;
  freed.address = 0x7f1000000000;
  outside.events = {{memsnap::OutsideAction::kAlloc, nccl},
                    {memsnap::OutsideAction::kAlloc, freed},
                    {memsnap::OutsideAction::kFree, freed},
                    {memsnap::OutsideAction::kOom, {0, 0, 80ull << 30, memsnap::OutsideKind::kDevice, "cuMemAlloc", "libjax.so", 0, 1500}}};
  outside.dropped_events = 7;
  outside.recorded_since_us = 1000;
  snapshot.outside_memory = outside;
  const auto read = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(snapshot));
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_EQ(read.value().outside_memory, snapshot.outside_memory);
  EXPECT_TRUE(read.value() == snapshot);
  const nlohmann::json json = nlohmann::json::parse(memsnap::to_json_text(snapshot));
  ASSERT_TRUE(json.contains("outside_memory"));
  EXPECT_EQ(json["outside_memory"]["live"][0]["library"], "libnccl.so.2");
  EXPECT_EQ(json["outside_memory"]["live"][1]["kind"], "pinned_host");
  EXPECT_EQ(json["outside_memory"]["live"][1]["device"], -1);
  EXPECT_EQ(json["outside_memory"]["events"][2]["action"], "free");
  EXPECT_EQ(json["outside_memory"]["events"][3]["action"], "oom");
  EXPECT_EQ(json["outside_memory"]["dropped_events"], 7);
  EXPECT_EQ(json["outside_memory"]["recorded_since_us"], 1000);
  EXPECT_FALSE(json["outside_memory"]["live"][0]["frames"].empty());

  memsnap::Snapshot unrecorded = snapshot;
  unrecorded.outside_memory = memsnap::OutsideMemory{"another tool holds CUPTI's callbacks", {}, {}, 0, {}};
  const auto read_unrecorded = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(unrecorded));
  ASSERT_TRUE(read_unrecorded.ok()) << read_unrecorded.error();
  EXPECT_EQ(read_unrecorded.value().outside_memory->unrecorded_reason, "another tool holds CUPTI's callbacks");

  const auto refused = [&](const std::function<void(memsnap::OutsideAllocation&)>& spoil, const std::string& why) {
    memsnap::Snapshot bad = snapshot;
    spoil(bad.outside_memory->live[0]);
    const auto result = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(bad));
    ASSERT_FALSE(result.ok()) << why;
    EXPECT_NE(result.error().find(why), std::string::npos) << result.error();
  };
  refused([](auto& a) { a.device = -1; }, "host memory has device -1, and only host memory");
  refused([](auto& a) { a.kind = memsnap::OutsideKind::kRegisteredHost; }, "host memory has device -1");
  refused([](auto& a) { a.device = 4096; }, "out of range");
  refused([&](auto& a) { a.stack = static_cast<memsnap::StackIndex>(snapshot.stacks.size()); }, "stack index");
}

// The reader takes fields where they lie; a file whose tables come after what refers to them
// (another writer's order) reads the same.
TEST(MsgpackFormat, FieldsInAnyOrderReadTheSame) {
  const memsnap::Snapshot original = long_snapshot(1000);
  const std::string bytes = memsnap::to_msgpack(original);
  ASSERT_EQ(static_cast<uint8_t>(bytes[0]) & 0xf0, 0x80);  // a fixmap: one header byte
  std::string head;
  std::vector<std::string> fields = top_level_fields(bytes, head);
  ASSERT_GE(fields.size(), 8u);
  std::mt19937 rng(7);
  for (int order = 0; order < 6; ++order) {
    if (order == 0) std::reverse(fields.begin(), fields.end());
    else std::shuffle(fields.begin(), fields.end(), rng);
    std::string reordered = bytes.substr(0, 1) + head;
    for (const std::string& field : fields) reordered += field;
    ASSERT_EQ(reordered.size(), bytes.size());
    const auto read = memsnap::snapshot_from_msgpack(reordered);
    ASSERT_TRUE(read.ok()) << "order " << order << ": " << read.error();
    EXPECT_TRUE(read.value() == original) << "order " << order;
  }
}

// A large file is let go behind the reader, in order, and reads the same as when held whole.
TEST(MsgpackFormat, BytesBehindTheReaderAreLetGo) {
  // Over 8 MiB, so that the reader lets bytes go more than once. (An entry's size depends on
  // the addresses and times its recorded step got, which vary with what ran before it in
  // this process: the trace grows until the file is large enough.)
  memsnap::Snapshot original = long_snapshot(600000);
  std::string bytes = memsnap::to_msgpack(original);
  for (size_t entries = 900000; bytes.size() <= (size_t{8} << 20) && entries < 4000000; entries += entries / 2) {
    original = long_snapshot(entries);
    bytes = memsnap::to_msgpack(original);
  }
  ASSERT_GT(bytes.size(), size_t{8} << 20);
  std::vector<std::pair<uint64_t, uint64_t>> released;
  const auto read = memsnap::snapshot_from_msgpack(
      bytes, [&](uint64_t begin, uint64_t end) { released.emplace_back(begin, end); });
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_TRUE(read.value() == original);
  ASSERT_GE(released.size(), 2u);
  uint64_t behind = 0;
  for (const auto& [begin, end] : released) {
    EXPECT_EQ(begin, behind);
    EXPECT_GT(end, begin);
    behind = end;
  }
  EXPECT_LE(behind, bytes.size());
  EXPECT_GT(behind, bytes.size() / 2);
}

// A file cut short after it was opened: the read fails with one line that says so.
TEST(MsgpackFormat, AFileCutShortWhileReadFailsWithOneLine) {
  memsnap::testing_support::expect_reads_of_a_file_cut_short_fail(
      memsnap::to_msgpack(long_snapshot(200000)), testing::TempDir() + "memsnap_cut_short.msgpack",
      [](memsnap::ByteSource& source) { return memsnap::load_snapshot_from(source, "cut.msgpack"); });
}

TEST(MsgpackFormat, RejectsWhatIsNotASnapshot) {
  EXPECT_EQ(memsnap::snapshot_from_msgpack("").error(), "empty file");
  EXPECT_NE(memsnap::snapshot_from_msgpack("\x93\x01\x02\x03").error().find("not a memsnap snapshot"),
            std::string::npos);
  // {"format": "other", "version": 1}
  const std::string other("\x82\xa6" "format" "\xa5" "other" "\xa7" "version" "\x01", 23);
  EXPECT_NE(memsnap::snapshot_from_msgpack(other).error().find("not a memsnap snapshot"),
            std::string::npos);
  // {"format": "memsnap-snapshot", "version": 99}
  const std::string future = std::string("\x82\xa6" "format" "\xb0" "memsnap-snapshot" "\xa7" "version", 33) + "\x63";
  EXPECT_NE(memsnap::snapshot_from_msgpack(future).error().find("version 99"), std::string::npos);
}

TEST(MsgpackFormat, RejectsEveryTruncation) {
  const std::string bytes = recorded_snapshot_bytes();
  for (size_t length = 0; length < bytes.size(); length += 1 + length / 50) {
    const auto read = memsnap::snapshot_from_msgpack(std::string_view(bytes).substr(0, length));
    EXPECT_FALSE(read.ok()) << "accepted a file cut to " << length << " bytes";
  }
  EXPECT_NE(memsnap::snapshot_from_msgpack(bytes + "x").error().find("trailing bytes"),
            std::string::npos);
}

// A map key of the file's own making appears in the error's place: printable and short, so the
// error stays one line (found by snapshot_reader_fuzz).
TEST(MsgpackFormat, KeysFromTheFileKeepTheErrorOnOneLine) {
  // {"format": "memsnap-snapshot", "version": 1, "ke\ny": <a string cut short>}
  const std::string bytes = std::string("\x83\xa6" "format" "\xb0" "memsnap-snapshot" "\xa7" "version" "\x01" "\xa4" "ke\ny" "\xa5" "ab", 39);
  const auto read = memsnap::snapshot_from_msgpack(bytes);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().find('\n'), std::string::npos) << read.error();
  EXPECT_NE(read.error().find("ke?y"), std::string::npos) << read.error();
}

TEST(MsgpackFormat, HostileLengthsDoNotAllocate) {
  // An array that claims 4 billion elements, and a map that claims as many entries.
  EXPECT_FALSE(memsnap::snapshot_from_msgpack(std::string("\xdd\xff\xff\xff\xff", 5)).ok());
  EXPECT_FALSE(memsnap::snapshot_from_msgpack(std::string("\xdf\xff\xff\xff\xff", 5)).ok());
  EXPECT_FALSE(memsnap::snapshot_from_msgpack(std::string("\xdb\xff\xff\xff\xff", 5)).ok());
  // Nesting far deeper than the format has.
  EXPECT_FALSE(memsnap::snapshot_from_msgpack(std::string(100000, '\x91')).ok());
}

TEST(MsgpackFormat, RejectsIndicesOutsideTheTables) {
  RecordedProgram program;
  run_training_step(program);
  memsnap::Snapshot snapshot = memsnap::take_snapshot(program.allocator, &program.recorder);
  memsnap::TraceEntry first = snapshot.device_traces.at(0).at(0);
  first.stack = static_cast<int32_t>(snapshot.stacks.size());
  snapshot.device_traces.at(0).set(0, first);
  const auto read = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(snapshot));
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.error().find("device_traces[0][0]: stack index"), std::string::npos) << read.error();
  snapshot = memsnap::take_snapshot(program.allocator, &program.recorder);
  snapshot.stacks.at(0).push_back(static_cast<uint32_t>(snapshot.frames.size()));
  EXPECT_NE(memsnap::snapshot_from_msgpack(memsnap::to_msgpack(snapshot)).error().find("frame index"),
            std::string::npos);
}

// A mutation fuzzer in miniature, run on every test pass: flipped bits, changed bytes and
// spliced lengths must give a snapshot or an error, never a crash (the sanitizer builds and
// tests/fuzz/snapshot_reader_fuzz.cpp take this further).
TEST(MsgpackFormat, SurvivesRandomDamage) {
  const std::string original = recorded_snapshot_bytes();
  std::mt19937_64 rng(2026);
  size_t rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string damaged = original;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % damaged.size();
      switch (rng() % 3) {
        case 0: damaged[at] = static_cast<char>(damaged[at] ^ (1 << (rng() % 8))); break;
        case 1: damaged[at] = static_cast<char>(rng()); break;
        default: damaged.insert(at, std::string("\xdd\x7f\xff\xff\xff", 5)); break;
      }
    }
    const auto read = memsnap::snapshot_from_msgpack(damaged);
    if (!read.ok()) {
      ++rejected;
      EXPECT_EQ(read.error().find('\n'), std::string::npos);  // one line
    }
  }
  EXPECT_GT(rejected, 1000u);
}

}  // namespace snapshot_test
