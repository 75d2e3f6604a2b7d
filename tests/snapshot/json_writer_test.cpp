// The JSON export is written a piece at a time: a long trace never becomes one string, and
// the pieces make the document.
#include "snapshot/json_writer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "snapshot_test_support.h"

namespace snapshot_test {

TEST(JsonWriter, ALongTraceIsWrittenInPiecesThatMakeTheDocument) {
  RecordedProgram program;
  run_training_step(program);
  memsnap::Snapshot snapshot = memsnap::take_snapshot(program.allocator, &program.recorder);
  auto& trace = snapshot.device_traces.at(0);
  const size_t recorded = trace.size();
  while (trace.size() < 100000) trace.push_back(trace[trace.size() % recorded]);
  const size_t annotated = snapshot.external_annotations.size();
  for (int i = 0; i < 1000; ++i) snapshot.external_annotations.push_back({0, "START", "step " + std::to_string(i), i});
  std::vector<size_t> pieces;
  std::string document;
  memsnap::write_json(snapshot, [&](std::string_view piece) {
    pieces.push_back(piece.size());
    document += piece;
  });
  ASSERT_GT(pieces.size(), 4u);
  for (size_t size : pieces) EXPECT_LT(size, size_t{2} << 20);
  EXPECT_EQ(document, memsnap::to_json_text(snapshot));
  const nlohmann::json json = nlohmann::json::parse(document);
  ASSERT_EQ(json["device_traces"][0].size(), 100000u);
  EXPECT_EQ(json["external_annotations"].size(), annotated + 1000);
  EXPECT_EQ(json["external_annotations"][annotated + 999]["name"], "step 999");
  EXPECT_EQ(json["device_traces"][0][recorded]["addr"], trace[0].address);
  EXPECT_FALSE(json["device_traces"][0][0]["frames"].empty());
}

}  // namespace snapshot_test
