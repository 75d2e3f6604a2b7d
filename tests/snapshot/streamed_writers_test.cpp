// The writers of each format write a piece at a time: a long trace never becomes one string,
// and the pieces make the document.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "snapshot/json_writer.h"
#include "snapshot/msgpack_reader.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "snapshot/snapshot_loader.h"
#include "snapshot_test_support.h"

namespace snapshot_test {

constexpr int kSteps = 1000;

// A recorded step's trace repeated to `events`, and kSteps more annotations.
memsnap::Snapshot long_recording(size_t events) {
  RecordedProgram program;
  run_training_step(program);
  memsnap::Snapshot snapshot = memsnap::take_snapshot(program.allocator, &program.recorder);
  auto& trace = snapshot.device_traces.at(0);
  const size_t recorded = trace.size();
  while (trace.size() < events) trace.push_back(trace[trace.size() % recorded]);
  for (int i = 0; i < kSteps; ++i) snapshot.external_annotations.push_back({0, "START", "step " + std::to_string(i), i});
  return snapshot;
}

// Writes `snapshot` with `write`, checking that it came in several pieces under 2 MiB.
template <typename Write>
std::string in_pieces(const memsnap::Snapshot& snapshot, Write write) {
  std::vector<size_t> pieces;
  std::string document;
  write(snapshot, [&](std::string_view piece) {
    pieces.push_back(piece.size());
    document += piece;
  });
  EXPECT_GT(pieces.size(), 2u);
  for (size_t size : pieces) EXPECT_LT(size, size_t{2} << 20);
  return document;
}

TEST(StreamedWriters, JsonInPiecesThatMakeTheDocument) {
  constexpr size_t kEvents = 10000;  // about 7 MB of JSON
  const memsnap::Snapshot snapshot = long_recording(kEvents);
  const std::string document = in_pieces(snapshot, memsnap::write_json);
  EXPECT_EQ(document, memsnap::to_json_text(snapshot));
  const nlohmann::json json = nlohmann::json::parse(document);
  ASSERT_EQ(json["device_traces"][0].size(), kEvents);
  const size_t annotations = snapshot.external_annotations.size();
  ASSERT_EQ(json["external_annotations"].size(), annotations);
  EXPECT_EQ(json["external_annotations"][annotations - 1]["name"], "step 999");
  EXPECT_EQ(json["device_traces"][0][kEvents - 1]["addr"], snapshot.device_traces[0][kEvents - 1].address);
  EXPECT_FALSE(json["device_traces"][0][0]["frames"].empty());
}

TEST(StreamedWriters, MsgpackAndPickleInPiecesThatReadBack) {
  constexpr size_t kEvents = 300000;  // about 4.5 MB of msgpack, 15 MB of pickle
  const memsnap::Snapshot snapshot = long_recording(kEvents);
  const std::string msgpack = in_pieces(snapshot, memsnap::write_msgpack);
  EXPECT_EQ(msgpack, memsnap::to_msgpack(snapshot));
  const auto from_msgpack = memsnap::snapshot_from_msgpack(msgpack);
  ASSERT_TRUE(from_msgpack.ok()) << from_msgpack.error();
  EXPECT_TRUE(from_msgpack.value() == snapshot);
  const std::string pickle = in_pieces(snapshot, memsnap::write_pytorch_pickle);
  EXPECT_EQ(pickle, memsnap::to_pytorch_pickle(snapshot));
  const auto from_pickle = memsnap::load_snapshot_from_memory(pickle);
  ASSERT_TRUE(from_pickle.ok()) << from_pickle.error();
  EXPECT_EQ(from_pickle.value().snapshot.device_traces.at(0).size(), kEvents);
}

// Names of every length the pickle's string opcodes distinguish, one longer than a piece:
// they cross the pieces' ends and read back whole.
TEST(StreamedWriters, PickleStringsOfAnyLengthReadBackWhole) {
  memsnap::Snapshot snapshot = long_recording(20000);
  const std::vector<size_t> lengths = {0, 255, 256, 70000, (size_t{1} << 20) - 3, (size_t{3} << 20) / 2};
  std::vector<uint32_t> stack;
  for (size_t i = 0; i < lengths.size(); ++i) {
    stack.push_back(static_cast<uint32_t>(snapshot.frames.size()));
    snapshot.frames.push_back({std::string(lengths[i], static_cast<char>('a' + i)), "long.py", static_cast<int64_t>(i)});
  }
  snapshot.stacks.push_back(stack);
  auto& trace = snapshot.device_traces.at(0);
  for (size_t i = 0; i < 3000; i += 7) {  // spread over the trace: the names come at several offsets
    memsnap::TraceEntry entry = trace[i];
    entry.stack = static_cast<int32_t>(snapshot.stacks.size() - 1);
    trace.set(i, entry);
  }
  std::vector<size_t> pieces;
  std::string pickle;
  memsnap::write_pytorch_pickle(snapshot, [&](std::string_view piece) {
    pieces.push_back(piece.size());
    pickle += piece;
  });
  EXPECT_GT(pieces.size(), 2u);
  EXPECT_EQ(pickle, memsnap::to_pytorch_pickle(snapshot));
  const auto read = memsnap::load_snapshot_from_memory(pickle);
  ASSERT_TRUE(read.ok()) << read.error();
  const memsnap::Snapshot& back = read.value().snapshot;
  const memsnap::TraceEntry first = back.device_traces.at(0)[0];
  ASSERT_GE(first.stack, 0);
  const std::vector<uint32_t>& frames = back.stacks.at(static_cast<size_t>(first.stack));
  ASSERT_EQ(frames.size(), lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    const memsnap::Frame& frame = back.frames.at(frames[i]);
    EXPECT_EQ(frame.function.size(), lengths[i]);
    EXPECT_EQ(frame.function, std::string(lengths[i], static_cast<char>('a' + i)));
    EXPECT_EQ(frame.line, static_cast<int64_t>(i));
  }
}

}  // namespace snapshot_test
