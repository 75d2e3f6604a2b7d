// Reading a PyTorch pickle on several threads (pytorch_parallel_read.h) gives exactly what
// one thread gives: for every real snapshot in tests/data, cut into parts of every size, and
// for damaged copies of them (the same snapshot or the same one-line error). Also the layout
// scan on its own, and frames that one stack names twice.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "snapshot/byte_source.h"
#include "snapshot/file_contents.h"
#include "snapshot/pickle_layout.h"
#include "snapshot/pytorch_parallel_read.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "snapshot/pytorch_snapshot_reader.h"
#include "snapshot/snapshot_loader.h"
#include "tests/snapshot/cut_short_file.h"
#include "tests/test_scale.h"

namespace {

using memsnap::PickleReadOptions;
using memsnap::PickleReadStats;

// The plain pickle bytes of a test file (gzipped ones inflated).
std::string pickle_file(const std::string& name) {
  auto contents = memsnap::read_file_contents(std::string(MEMSNAP_TEST_DATA_DIR) + "/" + name, 64 << 20);
  EXPECT_TRUE(contents.ok()) << contents.error();
  if (!contents.ok()) return {};
  auto source = memsnap::ByteSource::over_memory(contents.value(), 64 << 20);
  return std::string(source->read_rest().view());
}

memsnap::Result<memsnap::Snapshot> read(const std::string& bytes, const PickleReadOptions& options) {
  auto source = memsnap::ByteSource::over_memory(bytes, 64 << 20);
  return memsnap::snapshot_from_pickle(*source, options);
}

PickleReadOptions one_thread() {
  PickleReadOptions options;
  options.threads = 1;
  return options;
}

PickleReadOptions in_parts(unsigned threads, uint64_t max_part_bytes, PickleReadStats* stats, unsigned scanners = 1) {
  PickleReadOptions options;
  options.threads = threads;
  options.min_bytes = 0;
  options.layout = {64, max_part_bytes, scanners};
  options.stats = stats;
  return options;
}

const char* const kRealPickles[] = {
    "pytorch-2.11/mlp_train.pickle",           "pytorch-2.11/two_streams.pickle",
    "pytorch-2.11/expandable_segments.pickle", "pytorch-2.11-h100/expandable_frag.pickle",
    "pytorch-2.11-h100/expandable_streams.pickle", "pytorch-2.11-h100/forward_frames.pickle",
    "pytorch-2.11-h100/frag_oom.pickle",       "pytorch-2.11-h100/oom_all_stacks.pickle",
    "pytorch-2.11-h100/streams_wrapped.pickle", "pytorch-2.11-h100/transformer_s0.pickle.gz",
};

TEST(PickleParallel, RealSnapshotsReadTheSameInParts) {
  size_t decoded_alone = 0;
  unsigned scans_ahead_kept = 0;
  for (const char* name : kRealPickles) {
    const std::string bytes = pickle_file(name);
    auto alone = read(bytes, one_thread());
    ASSERT_TRUE(alone.ok()) << name << ": " << alone.error();
    for (const unsigned threads : {2u, 3u, 5u}) {
      for (const uint64_t part_bytes : {uint64_t{256}, uint64_t{4096}, uint64_t{1} << 20}) {
        const unsigned scanners = threads - 1;  // one scan, or more starting further on
        PickleReadStats stats;
        auto parted = read(bytes, in_parts(threads, part_bytes, &stats, scanners));
        ASSERT_TRUE(parted.ok()) << name << ": " << parted.error();
        EXPECT_TRUE(parted.value() == alone.value()) << name << " with " << threads << " threads, " << scanners
                                                     << " scanning, parts of " << part_bytes << " bytes";
        decoded_alone += stats.parts_decoded_alone;
        scans_ahead_kept += stats.scans_ahead_kept;
      }
    }
  }
  EXPECT_GT(decoded_alone, 100u) << "the parts were decoded on their own, not read in order";
  EXPECT_GT(scans_ahead_kept, 20u) << "the scans that started further on were taken";
}

// A long trace, as the viewer gets it: its batches are decoded in parts and taken as they
// were; lists of other things (segments' blocks, annotations) are read in order.
TEST(PickleParallel, ALongTraceIsDecodedInParts) {
  const std::string bytes = pickle_file("pytorch-2.11-h100/transformer_s0.pickle.gz");
  PickleReadStats stats;
  PickleReadOptions options = in_parts(4, 16 << 10, &stats);
  options.layout.min_part_bytes = 8 << 10;
  auto parted = read(bytes, options);
  ASSERT_TRUE(parted.ok()) << parted.error();
  // Python pickles 1,000 items to a batch: about 85 KB of this trace, which parts never split.
  EXPECT_GE(stats.parts_decoded_alone, bytes.size() / (90 << 10));
  EXPECT_LE(stats.parts_read_in_order, 2u);
  EXPECT_GT(parted->device_traces.at(0).size(), 10000u);
}

// A pickle as memsnap writes it (memsnap convert): every stack is written once and named by
// its memo ever after, so most parts name stacks (and strings) pickled before them.
std::string memsnap_written_pickle() {
  memsnap::Snapshot s;
  for (int f = 0; f < 40; ++f) s.frames.push_back({"function_" + std::to_string(f), "model.py", f + 1});
  for (uint32_t k = 0; k < 25; ++k) s.stacks.push_back({k, k + 5, k + 10, 39});
  s.device_traces.resize(1);
  for (int i = 0; i < 20000; ++i) {
    const auto action = i % 2 == 0 ? memsnap::TraceAction::kAlloc : memsnap::TraceAction::kFreeCompleted;
    s.device_traces[0].push_back({action, (uint64_t{1} << 40) + 512 * static_cast<uint64_t>(i / 2 % 300),
                                  512 * static_cast<uint64_t>(1 + i % 7), 0, 1000 + i,
                                  i % 11 == 0 ? memsnap::kNoStackIndex : (i * 7) % 25});
    if (i % 50 == 0) s.external_annotations.push_back({0, i % 100 == 0 ? "START" : "END", "step " + std::to_string(i / 100), 1000 + i});
  }
  return memsnap::to_pytorch_pickle(s);
}

TEST(PickleParallel, AMemsnapWrittenPickleReadsTheSameInParts) {
  const std::string bytes = memsnap_written_pickle();
  auto alone = read(bytes, one_thread());
  ASSERT_TRUE(alone.ok()) << alone.error();
  ASSERT_EQ(alone->device_traces.at(0).size(), 20000u);
  for (const unsigned threads : {2u, 4u}) {
    for (const uint64_t part_bytes : {uint64_t{4096}, uint64_t{64} << 10}) {
      PickleReadStats stats;
      auto parted = read(bytes, in_parts(threads, part_bytes, &stats, threads));
      ASSERT_TRUE(parted.ok()) << parted.error();
      EXPECT_TRUE(parted.value() == alone.value()) << threads << " threads, parts of " << part_bytes << " bytes";
      EXPECT_GT(stats.parts_decoded_alone, 0u) << threads << " threads, parts of " << part_bytes << " bytes";
    }
  }
}

// A trace entry (decoded in a part) that fetches the device_traces list, which is still on
// the stack and takes its device's trace only afterwards (found by pickle_parallel_fuzz): one
// thread must not treat that list as complete when it is fetched, so both read one trace.
TEST(PickleParallel, AListFetchedWhileStillOnTheStackIsNotTakenAsComplete) {
  const std::string bytes = pickle_file("../fuzz/corpus-pickle/list-fetched-inside-its-own-items.pickle");
  auto alone = read(bytes, one_thread());
  ASSERT_TRUE(alone.ok()) << alone.error();
  EXPECT_EQ(alone->device_traces.size(), 1u);
  for (const uint64_t part_bytes : {uint64_t{64}, uint64_t{512}}) {
    auto parted = read(bytes, in_parts(3, part_bytes, nullptr));
    ASSERT_TRUE(parted.ok()) << parted.error();
    EXPECT_TRUE(parted.value() == alone.value()) << "parts of " << part_bytes << " bytes";
  }
}

// A trace entry pickled before the trace, finished by one SETITEMS of 1,000 pairs (so not
// lowered when finished) and dropped, then named twice by a batch of the trace: one thread
// takes it as an entry where the batch names it. A part naming an outer object that is not
// yet a record is read in order, so both reads give the same eight entries.
TEST(PickleParallel, AnOuterObjectNamedByAPartReadsAsOneThreadReadsIt) {
  const std::string bytes = pickle_file("../fuzz/corpus-pickle/outer-entry-named-twice-in-a-part.pickle");
  auto alone = read(bytes, one_thread());
  ASSERT_TRUE(alone.ok()) << alone.error();
  ASSERT_EQ(alone->device_traces.size(), 1u);
  EXPECT_EQ(alone->device_traces[0].size(), 8u);
  for (const uint64_t part_bytes : {uint64_t{64}, uint64_t{512}}) {
    auto parted = read(bytes, in_parts(3, part_bytes, nullptr));
    ASSERT_TRUE(parted.ok()) << parted.error();
    EXPECT_TRUE(parted.value() == alone.value()) << "parts of " << part_bytes << " bytes";
  }
}

// Cores left to other work are not read on: with all of them spared, one thread reads; a
// thread count given outright stands.
TEST(PickleParallel, SparedCoresAreNotReadOn) {
  PickleReadOptions options;
  options.spare_cores = 1u << 20;
  EXPECT_FALSE(memsnap::reads_in_parallel(uint64_t{1} << 30, options));
  options.threads = 3;
  EXPECT_TRUE(memsnap::reads_in_parallel(uint64_t{1} << 30, options));
}

// Bytes that arrive in turn (an upload) are worth gathering whole only where they are a plain
// pickle that would then be read on several threads.
TEST(PickleParallel, OnlyPlainPicklesReadOnSeveralThreadsAreWorthHoldingWhole) {
  PickleReadOptions threads;
  threads.threads = 3;
  const uint64_t big = uint64_t{64} << 20;
  EXPECT_TRUE(memsnap::reads_faster_whole(0x80, big, threads));   // PROTO: a pickle
  EXPECT_FALSE(memsnap::reads_faster_whole(0x1f, big, threads));  // gzip: read as it comes
  EXPECT_FALSE(memsnap::reads_faster_whole(0x83, big, threads));  // a msgpack map
  EXPECT_FALSE(memsnap::reads_faster_whole('{', big, threads));   // JSON
  EXPECT_FALSE(memsnap::reads_faster_whole(0x80, threads.min_bytes - 1, threads)) << "too small for threads";
  EXPECT_FALSE(memsnap::reads_faster_whole(0x80, uint64_t{3} << 30, threads)) << "over the size limit";
  PickleReadOptions one = threads;
  one.threads = 1;
  EXPECT_FALSE(memsnap::reads_faster_whole(0x80, big, one));
}

// Damaged copies: whatever one thread makes of them (a snapshot or an error), so do several.
TEST(PickleParallel, DamagedSnapshotsGiveWhatOneThreadGives) {
  std::mt19937 random(11);
  int failed = 0, loaded = 0;
  for (const char* name : {"pytorch-2.11/mlp_train.pickle", "pytorch-2.11-h100/streams_wrapped.pickle"}) {
    const std::string original = pickle_file(name);
    for (int round = 0; round < 400 / memsnap::testing::kWorkDivisor; ++round) {
      std::string bytes = original;
      if (round % 4 == 3) {
        bytes.resize(random() % bytes.size());
      } else {
        for (int flips = 0; flips <= round % 3; ++flips)
          bytes[random() % bytes.size()] ^= static_cast<char>(1u << (random() % 8));
      }
      auto alone = read(bytes, one_thread());
      auto parted = read(bytes, in_parts(2 + round % 3, 256 << (round % 4), nullptr, 1 + round % 5));
      ASSERT_EQ(alone.ok(), parted.ok()) << name << " round " << round << ": "
                                         << (alone.ok() ? parted.error() : alone.error());
      if (alone.ok()) {
        ++loaded;
        EXPECT_TRUE(alone.value() == parted.value()) << name << " round " << round;
      } else {
        ++failed;
        EXPECT_EQ(alone.error(), parted.error()) << name << " round " << round;
      }
    }
  }
  EXPECT_GT(failed, 100 / memsnap::testing::kWorkDivisor);
  EXPECT_GT(loaded, 10 / memsnap::testing::kWorkDivisor);
}

// A file cut short after it was opened, read in parts: one line that says so.
TEST(PickleParallel, AFileCutShortWhileReadFailsWithOneLine) {
  memsnap::testing_support::expect_reads_of_a_file_cut_short_fail(
      pickle_file("pytorch-2.11-h100/transformer_s0.pickle.gz"), testing::TempDir() + "memsnap_cut_short.pickle",
      [](memsnap::ByteSource& source) { return memsnap::snapshot_from_pickle(source, in_parts(3, 64 << 10, nullptr)); });
}

TEST(PickleLayout, PartsAreWholeBatchesInFileOrder) {
  const std::string bytes = pickle_file("pytorch-2.11-h100/transformer_s0.pickle.gz");
  memsnap::pickle::LayoutScanner scan(bytes, {1024, 64 << 10});
  std::vector<memsnap::pickle::PicklePart> parts;
  const bool whole = scan.scan([&](const memsnap::pickle::PicklePart& part) {
    parts.push_back(part);
    return true;
  }, [](uint64_t, uint64_t) { return true; });
  EXPECT_TRUE(whole) << "the scan follows a PyTorch pickle to its STOP";
  ASSERT_GT(parts.size(), 10u);
  uint64_t after = 0;
  for (const auto& part : parts) {
    EXPECT_GE(part.mark, after);
    EXPECT_EQ(bytes[part.mark], '(') << "a part starts after a MARK";
    EXPECT_EQ(bytes[part.end], 'e') << "and ends at an APPENDS";
    EXPECT_GE(part.bytes(), 1024u);
    EXPECT_LT(part.bytes(), (64u << 10) + (90u << 10)) << "cut after the batch that passes the size asked for";
    after = part.end;
  }
  // The memo entries before the last part include the trace entries' keys, as strings.
  bool found_action = false;
  for (uint64_t index = 0; index < parts.back().memo_base; ++index) {
    const uint32_t offset = scan.string_offset(index);
    if (offset == memsnap::pickle::LayoutScanner::kNotAString) continue;
    const auto text = memsnap::pickle::pickled_string_at(bytes, offset);
    ASSERT_TRUE(text.has_value());
    found_action = found_action || *text == "action";
  }
  EXPECT_TRUE(found_action);
}

TEST(PickleLayout, StopsAtWhatItDoesNotFollow) {
  // Explicit memo indices (protocol 2), a truncated string, a MARK closer with no MARK.
  for (const std::string& bytes : {std::string("\x80\x02]q\x00.", 5), std::string("\x80\x04\x8c\x09" "abc", 7),
                                  std::string("\x80\x04" "e.", 4)}) {
    memsnap::pickle::LayoutScanner scan(bytes, {1, 1024});
    int parts = 0;
    EXPECT_FALSE(scan.scan([&](const memsnap::pickle::PicklePart&) { return ++parts, true; },
                           [](uint64_t, uint64_t) { return true; }));
    EXPECT_EQ(parts, 0);
  }
  EXPECT_FALSE(memsnap::pickle::pickled_string_at("\x8c\x05" "ab", 0).has_value());
  EXPECT_EQ(memsnap::pickle::pickled_string_at("\x8c\x02" "ab", 0).value_or(""), "ab");
}

// Pickle bytes written by hand (protocol 4).
struct Pickle {
  std::string bytes = "\x80\x04";
  uint64_t memo = 0;
  Pickle& op(char c) { return bytes.push_back(c), *this; }
  Pickle& str(const std::string& s) {
    bytes.push_back('\x8c');
    bytes.push_back(static_cast<char>(s.size()));
    bytes += s;
    return *this;
  }
  Pickle& int1(uint8_t v) { return op('K').op(static_cast<char>(v)); }
  uint64_t memoize() { return op('\x94'), memo++; }
  Pickle& get(uint64_t index) { return op('h').op(static_cast<char>(index)); }
};

// A frame that one stack names twice (a recursive call): the frames list refers to the frame
// dict a second time before the list is complete, and the stack still holds it twice.
TEST(PickleReader, AFrameNamedTwiceInOneStack) {
  Pickle p;
  p.op('}').memoize();
  p.op('(').str("segments").op(']').str("device_traces").op(']').op('(').op(']').op('(');
  for (int entry = 0; entry < 2; ++entry) {
    p.op('}').op('(').str("action").str("alloc").str("addr").int1(static_cast<uint8_t>(16 + entry));
    p.str("size").int1(8).str("frames").op(']').op('(');
    p.op('}');
    const uint64_t frame = p.memoize();
    p.op('(').str("name").str("f").str("filename").str("a.py").str("line").int1(3).op('u');
    p.get(frame).op('e').op('u');
  }
  p.op('e').op('e').op('u').op('.');
  for (const PickleReadOptions& options : {one_thread(), in_parts(3, 16, nullptr)}) {
    auto snapshot = read(p.bytes, options);
    ASSERT_TRUE(snapshot.ok()) << snapshot.error();
    ASSERT_EQ(snapshot->device_traces.at(0).size(), 2u);
    for (const memsnap::TraceEntry& entry : snapshot->device_traces[0]) {
      ASSERT_GE(entry.stack, 0);
      const auto& frames = snapshot->stacks.at(static_cast<size_t>(entry.stack));
      ASSERT_EQ(frames.size(), 2u);
      EXPECT_EQ(frames[0], frames[1]);
      EXPECT_EQ(snapshot->frames.at(frames[0]).file, "a.py");
    }
  }
}


// What a scan of the whole pickle finds: its parts, and where each memo entry's string was
// pickled (up to the last part's end).
struct Layout {
  bool whole = false;
  std::vector<memsnap::pickle::PicklePart> parts;
  std::vector<uint32_t> strings;
  unsigned scans_ahead_kept = 0;
};

Layout layout_of(const std::string& bytes, memsnap::pickle::LayoutOptions options) {
  memsnap::pickle::LayoutScanner scan(bytes, options);
  Layout out;
  out.whole = scan.scan([&](const memsnap::pickle::PicklePart& part) { return out.parts.push_back(part), true; },
                        [](uint64_t, uint64_t) { return true; });
  const uint64_t memo = out.parts.empty() ? 0 : out.parts.back().memo_base + out.parts.back().memo_count;
  for (uint64_t index = 0; index < memo; ++index) out.strings.push_back(scan.string_offset(index));
  out.scans_ahead_kept = scan.scans_ahead_kept();
  return out;
}

// Scans that start further on, each from what looks like a boundary between two batches:
// with every batch of 1 KiB or more a part of its own, they find exactly the parts and strings
// one scan does; with longer parts, each part is a run of those batches, its memo entries
// counted alike.
void expect_scans_ahead_find_what_one_finds(const std::string& bytes, const char* what, unsigned* kept) {
  const Layout one = layout_of(bytes, {1024, 1, 1});
  ASSERT_GE(one.parts.size(), 4u) << what;
  std::map<uint64_t, size_t> batch_at_mark, batch_at_end;
  for (size_t i = 0; i < one.parts.size(); ++i) {
    batch_at_mark[one.parts[i].mark] = i;
    batch_at_end[one.parts[i].end] = i;
  }
  for (const unsigned scanners : {2u, 3u, 4u, 7u, 16u}) {
    const Layout many = layout_of(bytes, {1024, 1, scanners});
    EXPECT_EQ(many.whole, one.whole) << what << ", " << scanners << " scanning";
    EXPECT_TRUE(many.parts == one.parts) << what << ", " << scanners << " scanning";
    EXPECT_TRUE(many.strings == one.strings) << what << ", " << scanners << " scanning";
    *kept += many.scans_ahead_kept;

    const Layout longer = layout_of(bytes, {1024, 64 << 10, scanners});
    EXPECT_LE(longer.parts.size(), one.parts.size()) << what;
    for (const auto& part : longer.parts) {
      if (!batch_at_mark.count(part.mark) || !batch_at_end.count(part.end)) {
        ADD_FAILURE() << what << ", " << scanners << " scanning: the part at " << part.mark << " is not a run of batches";
        break;
      }
      const auto& first = one.parts[batch_at_mark[part.mark]];
      const auto& last = one.parts[batch_at_end[part.end]];
      EXPECT_EQ(part.memo_base, first.memo_base) << what << ", part at " << part.mark;
      EXPECT_EQ(part.memo_base + part.memo_count, last.memo_base + last.memo_count) << what << ", part at " << part.mark;
    }
  }
}

TEST(PickleLayout, ScansAheadFindWhatOneScanFinds) {
  unsigned kept = 0;
  expect_scans_ahead_find_what_one_finds(pickle_file("pytorch-2.11-h100/transformer_s0.pickle.gz"), "PyTorch's pickle", &kept);
  expect_scans_ahead_find_what_one_finds(pickle_file("pytorch-2.11-h100/expandable_streams.pickle"), "PyTorch's pickle, two streams", &kept);
  expect_scans_ahead_find_what_one_finds(memsnap_written_pickle(), "memsnap's pickle", &kept);
  EXPECT_GT(kept, 20u) << "the scans ahead were taken, not walked again";
}

// Lists of lists whose items hold "e(" (an APPENDS then a MARK, by their bytes) inside
// strings, and a string ending in 'e' before a MARK: scans ahead that start inside a string
// are thrown away, and those that start at a real MARK stop at the first APPENDS whose MARK
// they did not see, where the scan before goes on.
TEST(PickleLayout, ScansAheadStartingAnywhereChangeNothing) {
  Pickle p;
  p.op(']').memoize();
  p.op('(');
  for (int list = 0; list < 6; ++list) {
    p.op(']').memoize();
    for (int batch = 0; batch < 4; ++batch) {
      p.op('(');
      for (int item = 0; item < 1000; ++item) {
        switch (item % 3) {
          case 0: p.str("xe(e(y" + std::to_string(item)).memoize(); break;
          case 1:  // [ "abce", ("a", "b", "c", "d") ]
            p.op(']').memoize();
            p.op('(').str("abce").memoize();
            p.op('(').str("a").str("b").str("c").str("d").op('t').op('e');
            break;
          default: p.int1(static_cast<uint8_t>(item)); break;
        }
      }
      p.op('e');
    }
  }
  p.op('e').op('.');
  unsigned kept = 0;
  expect_scans_ahead_find_what_one_finds(p.bytes, "lists of lists", &kept);
  EXPECT_GT(kept, 0u);
}

}  // namespace
