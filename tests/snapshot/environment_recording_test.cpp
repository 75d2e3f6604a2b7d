// The MEMSNAP_* recording variables applied to a C++ program's allocator.
#include "snapshot/environment_recording.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "snapshot/msgpack_reader.h"
#include "snapshot_test_support.h"

namespace snapshot_test {
namespace {

namespace fs = std::filesystem;
using Variables = std::map<std::string, std::string>;

struct Folder {
  fs::path path = fs::temp_directory_path() / ("memsnap-env-test-" + std::to_string(getpid()) + "-" +
                                               std::to_string(reinterpret_cast<uintptr_t>(this)));
  Folder() { fs::create_directories(path); }
  ~Folder() { fs::remove_all(path); }
};

std::function<const char*(const char*)> from(const Variables& variables) {
  return [&variables](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  };
}

TEST(EnvironmentRecording, RecordsWhatTheVariablesAskAndWritesTheSnapshotWhenItGoesAway) {
  Folder folder;
  const std::string at_exit = (folder.path / "at-exit.msgpack").string();
  const Variables variables = {{"MEMSNAP_HISTORY", "all"},
                               {"MEMSNAP_MAX_ENTRIES", "3"},
                               {"MEMSNAP_SNAPSHOT_AT_EXIT", at_exit}};
  memsnap::CachingAllocator allocator(small_device());
  {
    auto recording = memsnap::record_from_environment(allocator, from(variables));
    ASSERT_TRUE(recording) << recording.error();
    const memsnap::HistorySettings settings = recording.value()->recorder().settings(0);
    EXPECT_EQ(settings.level, memsnap::HistoryLevel::kAll);
    EXPECT_EQ(settings.max_entries, 3u);
    EXPECT_TRUE(settings.cpp_stacks);
    for (int i = 0; i < 4; ++i) allocator.deallocate(allocator.allocate(1u << 20));
    EXPECT_FALSE(fs::exists(at_exit));
  }
  const auto read = memsnap::read_msgpack_snapshot(at_exit);
  ASSERT_TRUE(read.ok()) << read.error();
  const auto& trace = read.value().device_traces.at(0);
  EXPECT_EQ(trace.size(), 3u);  // the newest MEMSNAP_MAX_ENTRIES
  for (const auto& event : trace) {  // allocations with their C++ stacks (MEMSNAP_STACKS: cpp)
    if (event.action != memsnap::TraceAction::kAlloc) continue;
    ASSERT_LT(event.stack, read.value().stacks.size());
    EXPECT_FALSE(read.value().stacks[event.stack].empty());
  }
}

TEST(EnvironmentRecording, AnOutOfMemoryErrorWritesTheSnapshotThePatternNames) {
  Folder folder;
  const Variables variables = {{"MEMSNAP_HISTORY", "state"}, {"MEMSNAP_STACKS", "none"},
                               {"MEMSNAP_OOM_SNAPSHOT", (folder.path / "oom-{n}.msgpack").string()}};
  memsnap::CachingAllocator allocator(small_device(/*capacity=*/32u << 20));
  auto recording = memsnap::record_from_environment(allocator, from(variables));
  ASSERT_TRUE(recording) << recording.error();
  EXPECT_FALSE(recording.value()->recorder().settings(0).cpp_stacks);
  void* kept = allocator.allocate(20u << 20);
  EXPECT_THROW(allocator.allocate(20u << 20), memsnap::OutOfMemoryError);
  EXPECT_TRUE(fs::exists(folder.path / "oom-1.msgpack"));
  allocator.deallocate(kept);
}

TEST(EnvironmentRecording, NothingSetRecordsNothingAndWritesNothing) {
  memsnap::CachingAllocator allocator(small_device());
  const Variables none;
  auto recording = memsnap::record_from_environment(allocator, from(none));
  ASSERT_TRUE(recording) << recording.error();
  EXPECT_EQ(recording.value()->recorder().settings(0).level, memsnap::HistoryLevel::kOff);
  EXPECT_EQ(recording.value()->write_at_exit(), std::nullopt);
}

TEST(EnvironmentRecording, PythonStacksOrABadValueAreOneLineAndNothingIsApplied) {
  memsnap::CachingAllocator allocator(small_device());
  for (const Variables& variables : {Variables{{"MEMSNAP_HISTORY", "all"}, {"MEMSNAP_STACKS", "python"}},
                                     Variables{{"MEMSNAP_HISTORY", "sometimes"}}}) {
    auto recording = memsnap::record_from_environment(allocator, from(variables));
    ASSERT_FALSE(recording);
    EXPECT_EQ(recording.error().rfind("MEMSNAP_", 0), 0u) << recording.error();
    EXPECT_EQ(recording.error().find('\n'), std::string::npos);
  }
}

TEST(EnvironmentRecording, OutputsThatCannotBeWrittenAreRefusedWhenTheVariablesAreRead) {
  Folder folder;
  memsnap::CachingAllocator allocator(small_device());
  const std::string missing = (folder.path / "no-such-folder").string();
  for (const Variables& variables : {Variables{{"MEMSNAP_OOM_SNAPSHOT", missing + "/oom-{n}.msgpack"}},
                                     Variables{{"MEMSNAP_SNAPSHOT_AT_EXIT", missing + "/end.msgpack"}},
                                     Variables{{"MEMSNAP_SNAPSHOT_AT_EXIT", folder.path.string()}}}) {
    auto recording = memsnap::record_from_environment(allocator, from(variables));
    ASSERT_FALSE(recording);
    EXPECT_EQ(recording.error().rfind(variables.begin()->first + ": cannot write", 0), 0u) << recording.error();
    EXPECT_EQ(recording.error().find('\n'), std::string::npos);
  }
  EXPECT_FALSE(fs::exists(missing));
}

}  // namespace
}  // namespace snapshot_test
