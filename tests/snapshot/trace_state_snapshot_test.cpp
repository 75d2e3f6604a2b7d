// What a trace's events were recorded under, in a snapshot: taken from a live allocator (labels
// and settings changes), kept by the msgpack format, checked on load, and written on every entry
// of PyTorch's layout as PyTorch writes "user_metadata" and "compile_context".
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

#include "history/trace_labels.h"
#include "snapshot/msgpack_reader.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "snapshot/snapshot_checks.h"
#include "snapshot_test_support.h"

namespace trace_state_snapshot_test {

using memsnap::TraceStateChange;
using memsnap::TraceStateKind;

// Two allocations under metadata "warm-up", one compiled region, then a settings change.
memsnap::Snapshot recorded_with_changes() {
  snapshot_test::RecordedProgram program;
  memsnap::trace_labels::set_user_metadata("warm-up");
  program.held.push_back(program.allocator.allocate(1 << 20));
  memsnap::trace_labels::push_compile_context("Torch-Compiled Region: 0/0");
  program.held.push_back(program.allocator.allocate(1 << 20));
  memsnap::trace_labels::pop_compile_context();
  memsnap::trace_labels::set_user_metadata("");
  program.allocator.set_config(memsnap::parse_allocator_config("max_split_size_mb:64").value(),
                               "max_split_size_mb:64");
  program.held.push_back(program.allocator.allocate(40 << 20));
  memsnap::SnapshotOptions options;
  options.mark_in_trace = false;
  return memsnap::take_snapshot(program.allocator, &program.recorder, options);
}

TEST(TraceStateSnapshot, TakenFromLabelsAndSettingsChanges) {
  const memsnap::Snapshot s = recorded_with_changes();
  const auto& trace = s.device_traces.at(0);
  // segment_alloc, alloc | alloc | segment_alloc, alloc: no snapshot entry (mark_in_trace off).
  ASSERT_EQ(trace.size(), 5u);
  EXPECT_NE(trace.back().action, memsnap::TraceAction::kSnapshot);
  ASSERT_EQ(s.trace_state_changes.size(), 1u);
  const std::vector<TraceStateChange> want = {
      {0, TraceStateKind::kSettings, "", ""},
      {0, TraceStateKind::kMemoryCap, "none", ""},
      {0, TraceStateKind::kUserMetadata, "warm-up", ""},
      {2, TraceStateKind::kCompileContext, "Torch-Compiled Region: 0/0", ""},
      {3, TraceStateKind::kSettings, "max_split_size_mb:64", "max_split_size_mb:64"},
      {3, TraceStateKind::kUserMetadata, "", ""},
      {3, TraceStateKind::kCompileContext, "", ""},
  };
  EXPECT_EQ(s.trace_state_changes[0], want);
  EXPECT_FALSE(memsnap::check_snapshot(s).has_value());
}

TEST(TraceStateSnapshot, TheMsgpackFormatKeepsThem) {
  const memsnap::Snapshot s = recorded_with_changes();
  const auto read = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(s));
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_EQ(read.value().trace_state_changes, s.trace_state_changes);
  EXPECT_TRUE(read.value() == s);
}

TEST(TraceStateSnapshot, ChangesNamingNoEventOrOutOfOrderAreRefused) {
  memsnap::Snapshot s = recorded_with_changes();
  s.trace_state_changes[0].push_back({99, TraceStateKind::kUserMetadata, "late", ""});
  EXPECT_NE(memsnap::check_snapshot(s).value_or("").find("names event 99 of 5"), std::string::npos);
  s = recorded_with_changes();
  std::swap(s.trace_state_changes[0][2], s.trace_state_changes[0][3]);
  EXPECT_NE(memsnap::check_snapshot(s).value_or("").find("out of event order"), std::string::npos);
  s = recorded_with_changes();
  s.trace_state_changes.resize(3);
  EXPECT_NE(memsnap::check_snapshot(s).value_or("").find("names 3 devices"), std::string::npos);
}

// PyTorch's layout, read by Python's own pickle module: each entry's user_metadata and
// compile_context ("N/A" for none), as torch.cuda.memory._snapshot() gives them.
TEST(TraceStateSnapshot, PyTorchsLayoutCarriesThemOnEveryEntry) {
  if (std::system("python3 -c 'import pickle' > /dev/null 2>&1") != 0) GTEST_SKIP() << "no python3 here";
  const std::string path = ::testing::TempDir() + "trace_state_" + std::to_string(getpid()) + ".pickle";
  {
    std::ofstream out(path, std::ios::binary);
    out << memsnap::to_pytorch_pickle(recorded_with_changes());
  }
  const std::string command =
      "python3 -c \"import pickle,sys; s=pickle.load(open(sys.argv[1],'rb')); "
      "print(';'.join(e['user_metadata'] + '|' + e['compile_context'] for e in s['device_traces'][0]))\" " + path;
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char line[4096] = {};
  const bool read = std::fgets(line, sizeof line, pipe) != nullptr;
  pclose(pipe);
  std::remove(path.c_str());
  ASSERT_TRUE(read);
  EXPECT_EQ(std::string(line),
            "warm-up|N/A;warm-up|N/A;warm-up|Torch-Compiled Region: 0/0;|N/A;|N/A\n");
}

}  // namespace trace_state_snapshot_test
