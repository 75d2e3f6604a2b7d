// A snapshot whose parts disagree is refused on load with a line naming the segment, instead
// of views that print figures contradicting each other.
#include "snapshot/snapshot_checks.h"

#include <gtest/gtest.h>

#include <functional>

#include "snapshot/msgpack_writer.h"
#include "snapshot/snapshot_loader.h"

namespace snapshot_checks_test {

using memsnap::BlockState;
using memsnap::Snapshot;
using memsnap::SnapshotSegment;

constexpr uint64_t kBase = 0x7f0000000000;

// One 2 MiB segment: 1 MiB allocated, 1 MiB free; and a second segment right after it.
Snapshot consistent() {
  Snapshot s;
  SnapshotSegment a;
  a.address = kBase;
  a.total_size = 2 << 20;
  a.allocated_size = a.active_size = a.requested_size = 1 << 20;
  a.segment_type = "small";
  a.blocks = {{kBase, 1 << 20, 1 << 20, BlockState::kActiveAllocated, memsnap::kNoStackIndex, {}},
              {kBase + (1 << 20), 1 << 20, 0, BlockState::kInactive, memsnap::kNoStackIndex, {}}};
  SnapshotSegment b = a;
  b.address = kBase + (2 << 20);
  for (auto& block : b.blocks) block.address += 2 << 20;
  s.segments = {a, b};
  s.device_traces.resize(1);
  return s;
}

std::string refusal(const std::function<void(Snapshot&)>& damage) {
  Snapshot s = consistent();
  damage(s);
  const auto loaded = memsnap::load_snapshot_from_memory(memsnap::to_msgpack(s));
  return loaded ? std::string("accepted") : loaded.error();
}

TEST(SnapshotChecks, AConsistentSnapshotPasses) {
  EXPECT_FALSE(memsnap::check_snapshot(consistent()));
  EXPECT_EQ(refusal([](Snapshot&) {}), "accepted");
}

TEST(SnapshotChecks, ABlockOutsideItsSegmentIsRefusedNamingTheSegment) {
  EXPECT_EQ(refusal([](Snapshot& s) { s.segments[0].blocks[1].size = 3 << 20; }),
            "inconsistent snapshot: segment 0x7f0000000000 (device 0, 2097152 bytes): block "
            "0x7f0000100000 of 3145728 bytes lies outside the segment");
}

TEST(SnapshotChecks, GapsOverlapsAndSizesThatDisagreeAreRefused) {
  EXPECT_NE(refusal([](Snapshot& s) { s.segments[0].blocks[1].address += 4096; }).find("(a gap precedes it)"),
            std::string::npos);
  EXPECT_NE(refusal([](Snapshot& s) { s.segments[0].blocks[1].address -= 4096; }).find("(it overlaps the block before it)"),
            std::string::npos);
  EXPECT_NE(refusal([](Snapshot& s) { s.segments[0].total_size = 3 << 20; }).find("its blocks cover 2097152 bytes, not 3145728"),
            std::string::npos);
  EXPECT_NE(refusal([](Snapshot& s) { s.segments[0].allocated_size = 5; }).find("allocated_size says 5 bytes"),
            std::string::npos);
  EXPECT_NE(refusal([](Snapshot& s) { s.segments[0].active_size = 0; }).find("active_size says 0 bytes"),
            std::string::npos);
  EXPECT_NE(refusal([](Snapshot& s) { s.segments[0].blocks[0].requested_size = 5 << 20; }).find("was asked 5242880 bytes"),
            std::string::npos);
  EXPECT_NE(refusal([](Snapshot& s) { s.segments[1].address -= 4096; for (auto& b : s.segments[1].blocks) b.address -= 4096; })
                .find("overlaps segment 0x7f0000000000"),
            std::string::npos);
}

TEST(SnapshotChecks, SegmentsOfDifferentDevicesMayShareAddresses) {
  EXPECT_EQ(refusal([](Snapshot& s) {
              s.segments[1] = s.segments[0];
              s.segments[1].device = 1;
              s.device_traces.resize(2);
            }),
            "accepted");
}

}  // namespace snapshot_checks_test

namespace snapshot_checks_test {

// Bytes that merely begin like a msgpack map are not called a damaged memsnap file.
TEST(SnapshotChecks, BytesThatAreNoSnapshotAreSaidToBeNone) {
  for (const std::string& bytes : {std::string("\x85\xa3" "abc\x01", 6), std::string("\xde\x00\x02\xa1x\x01", 6),
                                   std::string("\x81\xa6" "formax", 8)}) {
    const auto loaded = memsnap::load_snapshot_from_memory(bytes);
    ASSERT_FALSE(loaded);
    EXPECT_EQ(loaded.error().rfind("not a memsnap snapshot (nor any other snapshot memsnap reads)", 0), 0u)
        << loaded.error();
  }
  // A memsnap file cut short is still called damaged, not foreign.
  const std::string whole = memsnap::to_msgpack(consistent());
  const auto cut = memsnap::load_snapshot_from_memory(whole.substr(0, 5));
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().find("not a memsnap snapshot"), std::string::npos) << cut.error();
}

}  // namespace snapshot_checks_test
