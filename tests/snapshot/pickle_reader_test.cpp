// The PyTorch pickle reader against hostile input: every truncation of a real snapshot, bit
// flips, absurd lengths, deep nesting, code-calling opcodes and memo abuse each give one
// clear error (never a crash, hang or huge allocation); compression and layouts load.
#include "snapshot/snapshot_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include <random>
#include <string>

#include "snapshot/file_contents.h"
#include "snapshot/json_writer.h"
#include "snapshot/trace_history.h"
#include "tests/test_snapshots.h"

namespace {

using memsnap::load_snapshot_from_memory;

using memsnap::testing::load_error;

TEST(PickleReader, LoadsARealPyTorchSnapshot) {
  auto loaded = load_snapshot_from_memory(memsnap::testing::data_file_bytes("pytorch-2.11/mlp_train.pickle"));
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  EXPECT_EQ(loaded->format, memsnap::SnapshotFormat::kPickle);
  EXPECT_EQ(loaded->snapshot.source, "pytorch");
  EXPECT_FALSE(loaded->snapshot.segments.empty());
  ASSERT_EQ(loaded->snapshot.device_traces.size(), 1u);
  EXPECT_EQ(loaded->snapshot.device_traces[0].size(), 250u);
}

// A block state with a newline in it (found by snapshot_loader_fuzz): the error quotes it
// printable, on one line.
TEST(PickleReader, TextFromTheFileKeepsTheErrorOnOneLine) {
  std::ifstream in(MEMSNAP_TEST_DATA_DIR "/../fuzz/corpus-pickle/newline-in-block-state", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty());
  const std::string error = load_error(bytes);
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_NE(error.find("unknown block state 'a??ive_allocated'"), std::string::npos) << error;
}

TEST(PickleReader, GzipCompressedFilesLoadTheSame) {
  auto plain = load_snapshot_from_memory(memsnap::testing::data_file_bytes("pytorch-2.11/two_streams.pickle"));
  ASSERT_TRUE(plain.ok()) << plain.error();
  auto compressed = memsnap::load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) +
                                           "/pytorch-2.11-h100/transformer_s0.pickle.gz");
  ASSERT_TRUE(compressed.ok()) << compressed.error();
  EXPECT_TRUE(compressed->compressed);
  EXPECT_GT(compressed->snapshot.device_traces.at(0).size(), 10000u);
}

// An upload is parsed as it arrives: bytes handed out a few at a time (the first pull a single
// byte, before the gzip magic can be seen) load exactly what the whole file loads, for a plain
// pickle, a gzipped one and a memsnap msgpack; a stream that stops early fails with one line.
TEST(PickleReader, StreamedBytesLoadTheSameAsTheWholeFile) {
  for (const char* name : {"pytorch-2.11/two_streams.pickle", "pytorch-2.11-h100/transformer_s0.pickle.gz",
                           "pytorch-2.11-h100/transformer_expandable.msgpack.gz"}) {
    const std::string bytes = memsnap::testing::data_file_bytes(name);
    auto whole = load_snapshot_from_memory(bytes);
    ASSERT_TRUE(whole.ok()) << name << ": " << whole.error();
    size_t offset = 0, pulls = 0;
    auto streamed = memsnap::load_snapshot_streamed(
        [&](uint8_t* out, size_t capacity) {
          const size_t n = std::min({capacity, bytes.size() - offset, pulls++ == 0 ? size_t{1} : size_t{4093}});
          std::memcpy(out, bytes.data() + offset, n);
          offset += n;
          return n;
        },
        bytes.size());
    ASSERT_TRUE(streamed.ok()) << name << ": " << streamed.error();
    EXPECT_EQ(streamed->compressed, whole->compressed) << name;
    EXPECT_EQ(streamed->format, whole->format) << name;
    EXPECT_TRUE(streamed->snapshot == whole->snapshot) << name;
    EXPECT_GE(pulls, bytes.size() / 4093) << "read a few bytes at a time";

    offset = 0;
    const size_t cut = bytes.size() / 2;
    auto truncated = memsnap::load_snapshot_streamed(
        [&](uint8_t* out, size_t capacity) {
          const size_t n = std::min(capacity, cut - offset);
          std::memcpy(out, bytes.data() + offset, n);
          offset += n;
          return n;
        },
        bytes.size());
    ASSERT_FALSE(truncated.ok()) << name;
    EXPECT_EQ(truncated.error().find('\n'), std::string::npos) << truncated.error();
  }
}

// PyTorch's forward_frames (traceback lines of the forward call, recorded for backward
// allocations under anomaly mode) continue the event's stack past the joining frame,
// innermost first like every stack.
TEST(PickleReader, ForwardFramesContinueTheStackPastTheJoiningFrame) {
  auto loaded = load_snapshot_from_memory(memsnap::testing::data_file_bytes("pytorch-2.11-h100/forward_frames.pickle"));
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const memsnap::Snapshot& s = loaded->snapshot;
  size_t joined = 0;
  for (const memsnap::TraceEntry& entry : s.device_traces.at(0)) {
    if (entry.stack == memsnap::kNoStackIndex) continue;
    const std::vector<uint32_t>& frames = s.stacks.at(static_cast<size_t>(entry.stack));
    const auto marker = std::find_if(frames.begin(), frames.end(), [&](uint32_t f) {
      return memsnap::is_backward_of_forward(s.frames[f]);
    });
    if (marker == frames.end()) continue;
    ++joined;
    // Python-only stacks: the backward thread has no frames of its own.
    EXPECT_EQ(marker, frames.begin());
    ASSERT_GE(frames.end() - marker, 3);
    const memsnap::Frame& outermost = s.frames[frames.back()];
    EXPECT_EQ(outermost.function, "<module>");
    EXPECT_NE(outermost.file.find("make_pytorch_test_snapshots.py"), std::string::npos) << outermost.file;
    EXPECT_EQ(outermost.line, 72);
    for (auto it = marker + 1; it != frames.end(); ++it) {
      EXPECT_GT(s.frames[*it].line, 0);
      EXPECT_EQ(s.frames[*it].function.find('\n'), std::string::npos);
    }
  }
  EXPECT_EQ(joined, 30u);
  size_t joined_blocks = 0;
  for (const memsnap::SnapshotSegment& segment : s.segments)
    for (const memsnap::SnapshotBlock& block : segment.blocks)
      if (block.stack != memsnap::kNoStackIndex && !s.stacks[static_cast<size_t>(block.stack)].empty() &&
          memsnap::is_backward_of_forward(s.frames[s.stacks[static_cast<size_t>(block.stack)].front()]))
        ++joined_blocks;
  EXPECT_EQ(joined_blocks, 5u);
}

// A file whose entries each name their own stack and one long forward_frames list: joining
// them copies the list into every stack, so the reader stops joining past its budget instead
// of multiplying a few megabytes of input into gigabytes.
TEST(PickleReader, ForwardFramesJoinWithinABudget) {
  std::string p = "\x80\x04}(";
  uint32_t memo = 0;
  auto text = [&](const std::string& t) {
    p += '\x8c';
    p += static_cast<char>(t.size());
    p += t;
  };
  auto int4 = [&](uint32_t v) {
    p += 'J';
    for (int i = 0; i < 4; ++i) p += static_cast<char>(v >> (8 * i));
  };
  text("segments");
  p += ']';
  text("device_traces");
  p += "](](";
  constexpr uint32_t kEntries = 160000, kForward = 256;
  for (uint32_t i = 0; i < kEntries; ++i) {
    p += "}(";
    text("action"), text("alloc"), text("addr"), int4(i), text("size"), int4(512), text("frames");
    p += "](}(";  // a stack of one frame of its own
    text("filename"), text("f.py"), text("line"), int4(i), text("name"), text("g");
    p += "ue";
    text("forward_frames");
    if (i == 0) {
      p += "]\x94(";
      for (uint32_t f = 0; f < kForward; ++f) text("  File \"m.py\", line " + std::to_string(f + 1) + ", in h\n");
      p += 'e';
    } else {
      p += 'h';
      p += static_cast<char>(memo);
    }
    p += 'u';
  }
  p += "eeu.";
  auto loaded = load_snapshot_from_memory(p);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const memsnap::Snapshot& s = loaded->snapshot;
  ASSERT_EQ(s.device_traces.at(0).size(), kEntries);
  size_t joined = 0, frames = 0;
  for (const auto& stack : s.stacks) {
    frames += stack.size();
    joined += stack.size() > 1;
  }
  EXPECT_GT(joined, 1000u) << "joins until the budget";
  EXPECT_LT(joined, kEntries) << "but not past it";
  EXPECT_LT(frames, (size_t{1} << 25) + kEntries + kForward);
}

TEST(PickleReader, LegacyLayoutsLoad) {
  auto bare = load_snapshot_from_memory(memsnap::testing::data_file_bytes("legacy/bare_segment_list.pickle"));
  ASSERT_TRUE(bare.ok()) << bare.error();
  ASSERT_EQ(bare->snapshot.segments.size(), 2u);
  const auto& block = bare->snapshot.segments[0].blocks.at(1);
  EXPECT_EQ(block.address, 0x7f0000000400u) << "addresses follow from block sizes";
  ASSERT_EQ(block.history.size(), 1u);
  EXPECT_NE(block.stack, memsnap::kNoStackIndex) << "an active block's stack comes from its history";
  auto old = load_snapshot_from_memory(memsnap::testing::data_file_bytes("legacy/old_dict_layout.pickle"));
  ASSERT_TRUE(old.ok()) << old.error();
  EXPECT_EQ(old->snapshot.device_traces.at(0).at(2).action, memsnap::TraceAction::kFreeCompleted);
}

TEST(PickleReader, EveryTruncationFailsWithOneLine) {
  const std::string bytes = memsnap::testing::data_file_bytes("pytorch-2.11/expandable_segments.pickle");
  for (size_t length = 0; length < bytes.size(); ++length) {
    const std::string error = load_error(bytes.substr(0, length));
    ASSERT_FALSE(error.empty()) << "a snapshot cut to " << length << " bytes loaded";
    ASSERT_EQ(error.find('\n'), std::string::npos) << error;
  }
}

TEST(PickleReader, SurvivesBitFlips) {
  const std::string original = memsnap::testing::data_file_bytes("pytorch-2.11/mlp_train.pickle");
  std::mt19937 random(7);
  int rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = original;
    for (int flips = 0; flips < 3; ++flips)
      bytes[random() % bytes.size()] ^= static_cast<char>(1u << (random() % 8));
    auto loaded = load_snapshot_from_memory(bytes);  // must return, either way
    if (!loaded.ok()) {
      ++rejected;
      EXPECT_EQ(loaded.error().find('\n'), std::string::npos);
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(PickleReader, HostileLengthsDoNotAllocate) {
  // BINUNICODE8 claiming 2^60 bytes, then nothing.
  std::string bytes = "\x80\x04\x8d";
  bytes += std::string("\x00\x00\x00\x00\x00\x00\x00\x10", 8);
  EXPECT_NE(load_error(bytes).find("truncated"), std::string::npos);
  // LONG4 with a negative length.
  EXPECT_NE(load_error(std::string("\x80\x02\x8b\xff\xff\xff\xff", 7)).find("negative"), std::string::npos);
}

TEST(PickleReader, RefusesOpcodesThatRunCode) {
  const std::string error = load_error("\x80\x02" "cos\nsystem\n" "q\x00.");
  EXPECT_NE(error.find("GLOBAL"), std::string::npos) << error;
  EXPECT_NE(load_error("\x80\x04\x93.").find("STACK_GLOBAL"), std::string::npos);
}

TEST(PickleReader, BoundsNestingAndMemo) {
  std::string deep = "\x80\x02";
  deep += std::string(100000, '(');
  EXPECT_NE(load_error(deep).find("nested deeper"), std::string::npos);
  EXPECT_NE(load_error("\x80\x02h\x05.").find("memo index 5"), std::string::npos);
  // A far memo index is stored sparsely, not by growing a table to it: an empty list of
  // segments put at index 2^31-1 and read back loads as an empty snapshot.
  auto sparse = load_snapshot_from_memory(std::string("\x80\x02]r\xff\xff\xff\x7fj\xff\xff\xff\x7f.", 14));
  ASSERT_TRUE(sparse.ok()) << sparse.error();
  EXPECT_TRUE(sparse->snapshot.segments.empty());
}

// The text opcodes of pickle protocols 0 and 1 (INT, LONG, FLOAT, PUT, GET), as older
// picklers write them, among binary ones: each read as Python reads it.
TEST(PickleReader, TextOpcodesReadAsPythonReadsThem) {
  const auto text = [](const std::string& s) { return "\x8c" + std::string(1, static_cast<char>(s.size())) + s; };
  const auto entry = [&](const std::string& action, const std::string& time, const std::string& frames) {
    return "}(" + text("action") + text(action) + text("addr") + "I4096\n" + text("size") + "L512L\n" + text("stream") +
           "I0\n" + text("time_us") + "I" + time + "\n" + text("frames") + frames + "u";
  };
  const std::string bytes = "\x80\x02}(" + text("segments") + "]" + text("device_traces") + "](](" +
                            entry("alloc", "1000", "]p7\n") + entry("free_completed", "1001", "g7\n") + "ee" +
                            text("allocator_settings") + "}(" + text("x") + "F1.5\n" + text("flag") + "I01\n" +
                            text("off") + "I00\n" + "u" + "u.";
  const auto loaded = load_snapshot_from_memory(bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const memsnap::Snapshot& s = loaded->snapshot;
  ASSERT_EQ(s.device_traces.size(), 1u);
  ASSERT_EQ(s.device_traces[0].size(), 2u);
  EXPECT_EQ(s.device_traces[0][0].address, 4096u);
  EXPECT_EQ(s.device_traces[0][0].size, 512u);
  EXPECT_EQ(s.device_traces[0][1].time_us, 1001);
  EXPECT_EQ(s.device_traces[0][1].action, memsnap::TraceAction::kFreeCompleted);
  const std::vector<std::pair<std::string, std::string>> settings = {{"x", "1.5"}, {"flag", "true"}, {"off", "false"}};
  EXPECT_EQ(s.allocator_settings, settings);
  EXPECT_NE(load_error("\x80\x02I12x\n.").find("bad integer text"), std::string::npos);
  EXPECT_NE(load_error("\x80\x02" "F1.5x\n.").find("bad float text"), std::string::npos);
  EXPECT_NE(load_error("\x80\x02]pX\n.").find("bad memo index text"), std::string::npos);
}

TEST(PickleReader, NamesTheFieldThatIsWrong) {
  // {"segments": [{"address": "x"}]}
  // (The length is counted from the literal: a hand count once read past its end.)
  static constexpr char kPickle[] = "\x80\x02}q\x00X\x08\x00\x00\x00" "segments]q\x01}q\x02X\x07\x00\x00\x00"
                                    "addressX\x01\x00\x00\x00" "xsas.";
  const std::string bytes(kPickle, sizeof(kPickle) - 1);
  const std::string error = load_error(bytes);
  EXPECT_NE(error.find("segments[0].address"), std::string::npos) << error;
}

TEST(SnapshotLoader, JsonExportLoadsBackToTheSameView) {
  auto loaded = load_snapshot_from_memory(memsnap::testing::data_file_bytes("pytorch-2.11/two_streams.pickle"));
  ASSERT_TRUE(loaded.ok());
  const std::string json = memsnap::to_json_text(loaded->snapshot);
  auto again = load_snapshot_from_memory(json);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->format, memsnap::SnapshotFormat::kJson);
  EXPECT_EQ(memsnap::to_json_text(again->snapshot), memsnap::to_json_text(loaded->snapshot));
}

// PyTorch 2.x pickles carry no per-block history; the trace gives it: a free block names the
// allocations that last lived in it, oldest first, each one an alloc of the trace inside it.
TEST(SnapshotLoader, PyTorchBlocksGetTheirHistoryFromTheTrace) {
  auto loaded = load_snapshot_from_memory(memsnap::testing::data_file_bytes("pytorch-2.11/two_streams.pickle"));
  ASSERT_TRUE(loaded.ok()) << loaded.error();
  const memsnap::Snapshot& s = loaded->snapshot;
  size_t free_with_history = 0;
  for (const memsnap::SnapshotSegment& segment : s.segments)
    for (const memsnap::SnapshotBlock& block : segment.blocks) {
      if (block.state != memsnap::BlockState::kInactive || block.history.empty()) continue;
      ++free_with_history;
      EXPECT_LE(block.history.size(), memsnap::kTraceHistoryPerBlock);
      size_t previous = 0;
      for (const memsnap::HistoryItem& item : block.history) {
        EXPECT_GE(item.address, block.address);
        EXPECT_LT(item.address, block.address + block.size);
        // The item is an alloc of the trace, later than the one before it.
        const auto& trace = s.device_traces.at(static_cast<size_t>(segment.device));
        size_t found = trace.size();
        for (size_t i = previous; i < trace.size(); ++i)
          if (trace[i].action == memsnap::TraceAction::kAlloc && trace[i].address == item.address &&
              trace[i].stack == item.stack) {
            found = i;
            break;
          }
        ASSERT_LT(found, trace.size()) << "history item not found in order in the trace";
        previous = found + 1;
      }
    }
  EXPECT_GT(free_with_history, 0u);
}

// Exactly the last kTraceHistoryPerBlock allocations of the trace inside each block, oldest
// first: checked against a scan of the whole trace for every block, on every PyTorch pickle.
TEST(SnapshotLoader, TraceHistoryIsTheLastAllocationsInsideEachBlock) {
  for (const char* file : {"pytorch-2.11/two_streams.pickle", "pytorch-2.11/mlp_train.pickle",
                           "pytorch-2.11/expandable_segments.pickle"}) {
    auto loaded = load_snapshot_from_memory(memsnap::testing::data_file_bytes(file));
    ASSERT_TRUE(loaded.ok()) << file << ": " << loaded.error();
    const memsnap::Snapshot& s = loaded->snapshot;
    for (const memsnap::SnapshotSegment& segment : s.segments)
      for (const memsnap::SnapshotBlock& block : segment.blocks) {
        std::vector<memsnap::HistoryItem> expected;
        for (const memsnap::TraceEntry& e : s.device_traces.at(static_cast<size_t>(segment.device)))
          if (e.action == memsnap::TraceAction::kAlloc && e.address >= block.address &&
              e.address < block.address + block.size)
            expected.push_back({e.address, e.size, e.stack});
        if (expected.size() > memsnap::kTraceHistoryPerBlock)
          expected.erase(expected.begin(), expected.end() - memsnap::kTraceHistoryPerBlock);
        EXPECT_EQ(block.history, expected) << file << " block " << block.address;
      }
  }
}

TEST(SnapshotLoader, RejectsWhatIsNotASnapshot) {
  EXPECT_NE(load_error("").find("empty"), std::string::npos);
  EXPECT_NE(load_error("hello").find("not a snapshot"), std::string::npos);
  EXPECT_NE(load_error(std::string(1000, '[')).find("nested deeper"), std::string::npos);
  EXPECT_NE(load_error("\x1f\x8b\x08\x00garbage").find("gzip"), std::string::npos);
}

}  // namespace
