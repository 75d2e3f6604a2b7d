// memsnap-demo's snapshots (normal and out-of-memory) are readable and tell its story: the
// stacks name the demo's functions and files, the trace holds its phases.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "snapshot/msgpack_reader.h"

namespace snapshot_test {

namespace fs = std::filesystem;

memsnap::Snapshot run_demo(const std::string& arguments) {
  const fs::path out = fs::temp_directory_path() /
                       ("memsnap-demo-test-" + std::to_string(getpid()) + ".msgpack");
  const std::string command = std::string(MEMSNAP_DEMO_BINARY) + " --steps 3 --out " +
                              out.string() + " " + arguments + " > /dev/null 2>&1";
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  auto read = memsnap::read_msgpack_snapshot(out.string());
  fs::remove(out);
  EXPECT_TRUE(read.ok()) << read.error();
  return read.ok() ? read.value() : memsnap::Snapshot{};
}

bool mentions(const memsnap::Snapshot& s, const std::string& function, const std::string& file) {
  for (const auto& frame : s.frames)
    if (frame.function.find(function) != std::string::npos &&
        frame.file.find(file) != std::string::npos && frame.line > 0)
      return true;
  return false;
}

TEST(DemoOutput, SnapshotNamesTheDemosFunctionsAndPhases) {
  const memsnap::Snapshot s = run_demo("");
  EXPECT_TRUE(mentions(s, "demo::forward", "demo/model.cpp"));
  EXPECT_TRUE(mentions(s, "demo::optimizer_step", "demo/optimizer.cpp"));
  EXPECT_TRUE(mentions(s, "demo::build_model", "demo/model.cpp"));
  bool step = false;
  for (const auto& annotation : s.external_annotations) step |= annotation.name == "step 2";
  EXPECT_TRUE(step);
  EXPECT_FALSE(s.segments.empty());
}

TEST(DemoOutput, OutOfMemoryRunLeavesTheOomSnapshot) {
  const memsnap::Snapshot s = run_demo("--oom");
  ASSERT_FALSE(s.device_traces.empty());
  bool oom = false;
  for (const auto& event : s.device_traces[0]) oom |= event.action == memsnap::TraceAction::kOom;
  EXPECT_TRUE(oom);
  EXPECT_TRUE(mentions(s, "forward_with_a_huge_batch", "demo/main.cpp"));
}

}  // namespace snapshot_test
