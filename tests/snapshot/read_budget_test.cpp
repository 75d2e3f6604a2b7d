// Memory bounded by what an input describes (issue 53): small inputs that claim much are
// refused with one line at the first sign, counts stated in a file are never believed ahead
// of the bytes, device indexes are bounded before anything is sized by them, JSON is read as it
// streams, and gzip input of several members reads as one.
#include "snapshot/read_budget.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "snapshot/byte_source.h"
#include "snapshot/file_contents.h"
#include "snapshot/json_writer.h"
#include "snapshot/msgpack_reader.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "snapshot/snapshot_loader.h"
#include "tests/test_scale.h"
#include "tests/test_snapshots.h"

namespace {

using memsnap::load_snapshot_from_memory;
using namespace std::string_literals;  // (byte strings with NULs in them)

using memsnap::testing::load_error;

std::string repeated(const std::string& head, const std::string& unit, size_t count, const std::string& tail) {
  std::string out = head;
  out.reserve(head.size() + unit.size() * count + tail.size());
  for (size_t i = 0; i < count; ++i) out += unit;
  return out + tail;
}

std::string gzip(const std::string& bytes) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, bytes.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// A memsnap msgpack file: the format tag and version, then `fields` more entries (their bytes).
std::string msgpack_file(size_t fields, const std::string& rest) {
  std::string out = "\xdf";
  const uint32_t count = static_cast<uint32_t>(2 + fields);
  for (int shift = 24; shift >= 0; shift -= 8) out += static_cast<char>(count >> shift);
  return out + "\xa6" "format" "\xb0" "memsnap-snapshot" "\xa7" "version" "\x01" + rest;
}

// One segment on `device` as memsnap writes it (an array of 12), with one inactive block.
std::string msgpack_segment(const std::string& device) {
  return "\x9c"s + device + "\xcf\x00\x00\x7f\x00\x00\x00\x00\x00" "\xce\x00\x20\x00\x00" "\x00\x00\x00\x00" "\xa5large" "\x92\x00\x00" "\xc2\xff" "\x91" "\x96\xcf\x00\x00\x7f\x00\x00\x00\x00\x00" "\xce\x00\x20\x00\x00" "\x00\x02\xff\x90"s;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(ReadBudget, ChargesUpToItsLimitAndNamesItWhenPassed) {
  memsnap::ReadBudget budget(uint64_t{1000}, 100);  // 3 bytes a byte of 1,000, plus 100
  budget.charge(3000);
  budget.refund(1000);
  budget.charge(1100);
  EXPECT_EQ(budget.used(), 3100u);
  EXPECT_EQ(budget.peak(), 3100u);
  try {
    budget.charge(1);
    FAIL() << "charged past the limit";
  } catch (const memsnap::ReadBudgetExceeded& error) {
    EXPECT_NE(std::string(error.what()).find("3 bytes for each byte of input"), std::string::npos) << error.what();
  }
}

TEST(ReadBudget, AStreamedInputsLimitGrowsWithTheBytesRead) {
  uint64_t read = 0;
  memsnap::ReadBudget budget([&] { return read; }, 0);
  EXPECT_THROW(budget.charge(1), memsnap::ReadBudgetExceeded);
  read = 10;
  EXPECT_TRUE(budget.has_room(29));
  EXPECT_FALSE(budget.has_room(30));
  budget.charge(29);
  EXPECT_THROW(budget.charge(1), memsnap::ReadBudgetExceeded) << "the limit is 3 x 10";
  read = 20;
  budget.charge(1);
}

// The crash: 45 million empty objects in a 130 KB file. Each is an invalid segment;
// the first one fails, before the rest are built.
TEST(ReadBudget, JsonSegmentsAreCheckedAsTheyComeNotAfterAll) {
  const std::string json = repeated("{\"segments\":[", "{},", 3000000, "{}]}");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(load_error(json), "segments[0].address: missing");
  EXPECT_LT(seconds_since(start), 0.5) << "it read only the first segment";
  EXPECT_EQ(load_error(repeated("[", "{},", 1000, "{}]")), "segments[0].address: missing") << "a bare list too";
  EXPECT_EQ(load_error("{\"segments\":[{\"address\":0,\"total_size\":512,\"device\":-5}]}"),
            "segments[0].device: device -5 is out of range (0 to 1023)");
}

TEST(ReadBudget, JsonThatDescribesMoreThanItsBytesIsRefused) {
  // Distinct short strings: each costs its interning, some 90 bytes, for 8 of text.
  std::string json = "{\"pad\":[";
  for (int i = 0; i < 1500000; ++i) json += (i ? ",\"" : "\"") + std::to_string(i) + "\"";
  json += "]}";
  const std::string error = load_error(json);
  EXPECT_EQ(error.rfind("refused: what it describes from the first ", 0), 0u) << error;
  // Empty objects where a segment is not expected, three bytes each.
  EXPECT_EQ(load_error(repeated("{\"pad\":[", "{},", 3000000, "{}]}")).rfind("refused: ", 0), 0u);
}

TEST(ReadBudget, JsonErrorsAreOneLineWithTheirPlace) {
  EXPECT_EQ(load_error("{\"segments\":[{\"address\":1e400,\"total_size\":2}]}"),
            "bad JSON: a number out of range ('1e400') at byte 29");
  // nlohmann's lexer keeps what it reads of a token, whitespace before it included: a run of
  // whitespace reaches it as one character, and a token is held to 1 MiB.
  EXPECT_EQ(load_error(repeated("{", " ", 3000000, "")).rfind("bad JSON at byte 3000000: ", 0), 0u)
      << load_error(repeated("{", " ", 3000000, ""));
  EXPECT_EQ(load_error("{\"segments\":[{\"a\":\"" + std::string(2 << 20, 'x') + "\"}]}"),
            "bad JSON: a string or number longer than 1 MiB at byte 19");
  EXPECT_EQ(load_error("{\"segments\":[" + std::string(2 << 20, '1') + "]}"),
            "bad JSON: a string or number longer than 1 MiB at byte 13");
  EXPECT_NE(load_error(repeated("[", "[", 100, "")).find("JSON nested deeper than 64"), std::string::npos);
}

TEST(ReadBudget, JsonReadAsItStreamsLoadsWhatTheWriterWrites) {
  for (const char* file : {"pytorch-2.11/two_streams.pickle", "pytorch-2.11-h100/transformer_s0.pickle.gz",
                           "pytorch-2.11-h100/forward_frames.pickle"}) {
    auto loaded = load_snapshot_from_memory(memsnap::testing::data_file_bytes(file));
    ASSERT_TRUE(loaded.ok()) << file << ": " << loaded.error();
    const std::string json = memsnap::to_json_text(loaded->snapshot);
    auto again = load_snapshot_from_memory(json);
    ASSERT_TRUE(again.ok()) << file << ": " << again.error();
    EXPECT_EQ(memsnap::to_json_text(again->snapshot), json) << file;
    auto compressed = load_snapshot_from_memory(gzip(json));
    ASSERT_TRUE(compressed.ok()) << file << ": " << compressed.error();
    EXPECT_EQ(compressed->snapshot, again->snapshot) << file;
  }
  EXPECT_GT(memsnap::max_snapshot_bytes(memsnap::SnapshotFormat::kJson), memsnap::kMaxSnapshotFileBytes)
      << "JSON is parsed as it is read: its limit is not the one of formats held whole";
}

// `}a` repeated: an empty dict appended to a list, two bytes each, 64 bytes each in memory.
TEST(ReadBudget, APickleOfEmptyDictsIsRefusedEarly) {
  for (const bool compressed : {false, true}) {
    const std::string pickle = repeated("\x80\x04]", "}a", 8000000, ".");
    const std::string error = load_error(compressed ? gzip(pickle) : pickle);
    EXPECT_EQ(error.rfind("refused: what it describes from the first ", 0), 0u) << error;
  }
  // None, one byte an item, in APPENDS batches of 1,000.
  const std::string nones = repeated("\x80\x04]", "(" + std::string(1000, 'N') + "e", 20000, ".");
  EXPECT_EQ(load_error(nones).rfind("refused: ", 0), 0u) << load_error(nones);
}

TEST(ReadBudget, PickleSegmentsOnADeviceOutOfRangeAreRefused) {
  // {'segments': [{'device': D, 'address': 0, 'total_size': 512}]}
  for (const auto& [device, text] : {std::pair<std::string, std::string>{"J\xfb\xff\xff\xff"s, "-5"},
                                     {"J\x00\x00\x00\x08"s, "134217728"},
                                     {"J\xff\xff\xff\x7f"s, "2147483647"}}) {
    const std::string pickle = "\x80\x04}(\x8c\x08segments](}(\x8c\x06" "device"s + device +
                               "\x8c\x07" "addressK\x00\x8c\ntotal_sizeM\x00\x02ueu."s;
    EXPECT_EQ(load_error(pickle), "segments[0].device: device " + text + " is out of range (0 to 1023)");
  }
}

TEST(ReadBudget, MsgpackDeviceIndexesAreBoundedBeforeAnythingIsSizedByThem) {
  EXPECT_EQ(load_error(msgpack_file(1, "\xa8segments\x91" + msgpack_segment("\xce\x08\x00\x00\x00"s))),
            "segments[0].device: device 134217728 is out of range (0 to 1023)");
  EXPECT_EQ(load_error(msgpack_file(1, "\xa8segments\x91" + msgpack_segment("\xce\x7f\xff\xff\xff"))),
            "segments[0].device: device 2147483647 is out of range (0 to 1023)");
  EXPECT_EQ(load_error(msgpack_file(1, "\xa8segments\x91" + msgpack_segment("\xfb"))),
            "segments[0].device: device -5 is out of range (0 to 1023)");
  ASSERT_EQ(load_error(msgpack_file(1, "\xa8segments\x91" + msgpack_segment("\x03"))), "") << "device 3 is fine";
  // A million empty traces (the 5.7 KB msgpack.gz took 2.16 GB): refused at once.
  const std::string traces = msgpack_file(1, repeated("\xad" "device_traces\xdd\x00\x0f\x42\x40"s, "\x90", 1000000, ""));
  EXPECT_EQ(load_error(gzip(traces)), "device_traces: more than 1024 devices");
  // Nor past it by repeating the key.
  std::string keys;
  for (int i = 0; i < 3; ++i) keys += "\xad" "device_traces\xdd\x00\x00\x01\x90"s + std::string(400, '\x90');
  EXPECT_EQ(load_error(msgpack_file(3, keys)), "device_traces: more than 1024 devices");
}

TEST(ReadBudget, MsgpackCountsAreNotBelievedAheadOfTheBytes) {
  // A trace that claims 2^32 - 1 events and holds none.
  const std::string claim = msgpack_file(1, "\xad" "device_traces\x91\xdd\xff\xff\xff\xff");
  EXPECT_EQ(load_error(claim), "device_traces: the file is truncated or damaged: a length exceeds what is left of the file");
  // Blocks of 7 bytes each, 64 in memory: refused by the budget when their room is charged,
  // before it is reserved.
  const std::string blocks = msgpack_file(1, "\xa8segments\x91\x9c\x00\x00\xce\x00\x20\x00\x00\x00\x00\x00\x00"
                                          "\xa5large\x92\x00\x00\xc2\xff\xdd\x00\x20\x00\x00"s +
                                          repeated("", "\x96\x00\x01\x00\x02\xff\x90"s, 0x200000, ""));
  EXPECT_EQ(load_error(blocks).rfind("refused: what it describes would take more than ", 0), 0u) << load_error(blocks);
}

// gzip and Python read members one after another as one stream, zero bytes between them
// skipped: so does memsnap. Anything else after the data is ignored, as before.
TEST(ReadBudget, GzipOfSeveralMembersReadsAsOne) {
  const std::string plain = memsnap::testing::data_file_bytes("pytorch-2.11/two_streams.pickle");
  auto expected = load_snapshot_from_memory(plain);
  ASSERT_TRUE(expected.ok()) << expected.error();
  const size_t half = plain.size() / 2;
  for (const std::string& bytes :
       {gzip(plain.substr(0, half)) + gzip(plain.substr(half)),
        gzip(plain.substr(0, 100)) + std::string(9, '\0') + gzip("") + gzip(plain.substr(100)) + std::string(3, '\0'),
        gzip(plain) + "trailing garbage"}) {
    auto loaded = load_snapshot_from_memory(bytes);
    ASSERT_TRUE(loaded.ok()) << loaded.error();
    EXPECT_EQ(loaded->snapshot, expected->snapshot);
    EXPECT_TRUE(loaded->compressed);
  }
  // A member cut short is still an error.
  const std::string cut = gzip(plain.substr(0, half)) + gzip(plain.substr(half)).substr(0, 40);
  EXPECT_NE(load_error(cut).find("gzip data ends early"), std::string::npos) << load_error(cut);
}

TEST(ReadBudget, HeldBytesGrowWithoutLosingWhatTheyHold) {
  memsnap::HeldBytes held;
  std::string expected;
  for (int i = 0; i < 5000; ++i) {
    const std::string piece(static_cast<size_t>(i % 977) + 1, static_cast<char>('a' + i % 26));
    held.append(piece.data(), piece.size());
    expected += piece;
  }
  EXPECT_EQ(held.view(), expected);
  memsnap::HeldBytes moved = std::move(held);
  EXPECT_EQ(moved.view(), expected);
  EXPECT_EQ(held.size(), 0u);
}

// A snapshot that is mostly blocks (no trace): lowered as they stream, they stay within the
// budget and load as they were written, from a pickle and from JSON.
TEST(ReadBudget, ASnapshotOfManyBlocksLoadsTheSameFromEveryFormat) {
  memsnap::Snapshot snapshot;
  snapshot.source = "pytorch";
  uint64_t address = 0x7f0000000000;
  for (int s = 0; s < 400 / memsnap::testing::kWorkDivisor; ++s) {
    memsnap::SnapshotSegment segment;
    segment.address = address;
    segment.segment_type = "large";
    for (int b = 0; b < 500; ++b) {
      memsnap::SnapshotBlock block;
      block.address = address + segment.total_size;
      block.size = 512;
      block.state = b % 3 == 0 ? memsnap::BlockState::kInactive : memsnap::BlockState::kActiveAllocated;
      block.requested_size = block.state == memsnap::BlockState::kInactive ? 0 : 500;
      if (block.state != memsnap::BlockState::kInactive) {
        segment.allocated_size += 512;
        segment.active_size += 512;
        segment.requested_size += 500;
      }
      segment.total_size += 512;
      segment.blocks.push_back(block);
    }
    address += segment.total_size + (2 << 20);
    snapshot.segments.push_back(std::move(segment));
  }
  const std::string pickle = memsnap::to_pytorch_pickle(snapshot);
  auto from_pickle = load_snapshot_from_memory(pickle);
  ASSERT_TRUE(from_pickle.ok()) << from_pickle.error();
  EXPECT_EQ(from_pickle->snapshot.segments, snapshot.segments);
  auto from_json = load_snapshot_from_memory(memsnap::to_json_text(from_pickle->snapshot));
  ASSERT_TRUE(from_json.ok()) << from_json.error();
  EXPECT_EQ(from_json->snapshot.segments, snapshot.segments);
}

}  // namespace
