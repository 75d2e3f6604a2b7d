// The msgpack format: a round trip keeps the whole model; damaged and hostile files are
// refused with a clear error, never a crash or a huge allocation.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "snapshot/msgpack_reader.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot_test_support.h"

namespace snapshot_test {

std::string recorded_snapshot_bytes() {
  RecordedProgram program;
  run_training_step(program);
  return memsnap::to_msgpack(memsnap::take_snapshot(program.allocator, &program.recorder));
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
  snapshot.device_traces.at(0).at(0).stack = static_cast<memsnap::StackIndex>(snapshot.stacks.size());
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
