// The public C++ API (include/memsnap/) as a program uses it: on the simulated device, every
// failure a memsnap::Error with one line, out of memory an OutOfMemoryError with its figures,
// recordings that outlive their allocator, snapshots read back by memsnap's own reader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "memsnap/allocator.h"
#include "memsnap/errors.h"
#include "memsnap/recording.h"
#include "snapshot/msgpack_reader.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

memsnap::Allocator simulated(size_t capacity = size_t{1} << 30, std::string settings = "") {
  memsnap::AllocatorOptions options;
  options.backend = memsnap::Backend::kSimulated;
  options.simulated_capacity_bytes = capacity;
  options.settings = settings;
  return memsnap::Allocator(options);
}

std::map<std::string, int64_t> stats(const memsnap::Allocator& allocator) {
  auto listed = allocator.memory_stats(0);
  return {listed.begin(), listed.end()};
}

// The one-line message of the memsnap::Error `fn` throws ("" when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const memsnap::Error& error) {
    return error.what();
  }
  return "";
}

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string name = (std::filesystem::temp_directory_path() / "memsnap-api-XXXXXX").string();
    path = mkdtemp(name.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

memsnap::Snapshot read_back(const std::filesystem::path& path) {
  auto snapshot = memsnap::read_msgpack_snapshot(path.string());
  EXPECT_TRUE(snapshot.ok()) << snapshot.error();
  return snapshot.ok() ? snapshot.value() : memsnap::Snapshot{};
}

TEST(PublicAllocator, AllocatesAndCountsAsPyTorch) {
  memsnap::Allocator allocator = simulated();
  EXPECT_EQ(allocator.backend_name(), "simulated");
  EXPECT_EQ(allocator.device_count(), 1);
  EXPECT_EQ(allocator.allocate(0), nullptr);
  void* small = allocator.allocate(1000);
  void* large = allocator.allocate(3 * kMiB);
  EXPECT_EQ(allocator.allocated_size(small), 1024u);  // 512-byte multiples
  EXPECT_EQ(allocator.allocated_size(large), 3 * kMiB);
  auto before = stats(allocator);
  EXPECT_EQ(before["allocated_bytes.all.current"], int64_t(1024 + 3 * kMiB));
  EXPECT_EQ(before["reserved_bytes.all.current"], int64_t(2 * kMiB + 20 * kMiB));  // a small and a large segment
  allocator.deallocate(small);
  allocator.deallocate(large);
  allocator.deallocate(nullptr);
  EXPECT_EQ(stats(allocator)["allocated_bytes.all.current"], 0);
  EXPECT_EQ(stats(allocator)["allocated_bytes.all.peak"], int64_t(1024 + 3 * kMiB));
  allocator.empty_cache();
  EXPECT_EQ(stats(allocator)["reserved_bytes.all.current"], 0);
  allocator.reset_peak_stats();
  EXPECT_EQ(stats(allocator)["allocated_bytes.all.peak"], 0);
  EXPECT_NE(allocator.memory_summary().find("Allocated memory"), std::string::npos);
  EXPECT_TRUE(allocator.check_invariants().empty());
}

TEST(PublicAllocator, EveryFailureIsAnErrorOfOneLine) {
  memsnap::Allocator allocator = simulated();
  int on_stack = 0;
  void* p = allocator.allocate(kMiB);
  allocator.deallocate(p);
  const std::vector<std::string> messages = {
      error_of([&] { allocator.deallocate(&on_stack); }),  // not the allocator's
      error_of([&] { allocator.deallocate(p); }),          // freed twice
      error_of([&] { allocator.allocate(kMiB, /*device=*/3); }),
      error_of([&] { allocator.memory_stats(-1); }),
      error_of([&] { allocator.set_memory_fraction(1.5, 0); }),
      error_of([&] { allocator.set_settings("max_split_size_mb:lots"); }),
      error_of([&] { allocator.begin_allocate_to_pool({0, 0}, [](memsnap::StreamId) { return true; }); }),
      error_of([] { simulated(kMiB << 10, "no_such_key:1"); }),
      error_of([] {
        memsnap::AllocatorOptions options;
        options.backend = memsnap::Backend::kSimulated;
        options.simulated_devices = 0;
        memsnap::Allocator bad(options);
      }),
  };
  for (const std::string& message : messages) {
    EXPECT_FALSE(message.empty());
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_NE(messages[5].find("max_split_size_mb"), std::string::npos) << messages[5];
  EXPECT_NE(messages[7].find("no_such_key"), std::string::npos) << messages[7];
  EXPECT_TRUE(allocator.check_invariants().empty());
}

TEST(PublicAllocator, SettingsChangeWhileRunningAsPyTorchsAndABadChangeChangesNothing) {
  memsnap::Allocator allocator = simulated(size_t{1} << 30, "max_split_size_mb:128,release_lock_on_cudamalloc:True");
  EXPECT_NE(allocator.settings().find("max_split_size_mb:128"), std::string::npos) << allocator.settings();
  allocator.set_settings("garbage_collection_threshold:0.8");
  const std::string changed = allocator.settings();
  EXPECT_NE(changed.find("garbage_collection_threshold:0.8"), std::string::npos) << changed;
  EXPECT_NE(changed.find("release_lock_on_cudamalloc:True"), std::string::npos) << changed;  // kept
  EXPECT_EQ(changed.find("max_split_size_mb"), std::string::npos) << changed;  // back to its default, as PyTorch's
  EXPECT_FALSE(error_of([&] { allocator.set_settings("roundup_power2_divisions:3"); }).empty());
  EXPECT_EQ(allocator.settings(), changed);
}

TEST(PublicAllocator, OutOfMemoryIsAnErrorWithItsFiguresAndTheProgramGoesOn) {
  memsnap::Allocator allocator = simulated(size_t{1} << 30);
  std::vector<memsnap::OutOfMemoryInfo> heard;
  allocator.on_out_of_memory([&](const memsnap::OutOfMemoryInfo& info) { heard.push_back(info); });
  void* kept = allocator.allocate(600 * kMiB);
  try {
    allocator.allocate(600 * kMiB);
    FAIL() << "no out-of-memory error";
  } catch (const memsnap::OutOfMemoryError& error) {
    EXPECT_EQ(error.info().requested_bytes, 600 * kMiB);
    EXPECT_EQ(error.info().allocated_bytes, 600 * kMiB);
    EXPECT_EQ(error.info().device_total_bytes, size_t{1} << 30);
    EXPECT_NE(std::string(error.what()).find("Tried to allocate 600.00 MiB"), std::string::npos) << error.what();
  }
  ASSERT_EQ(heard.size(), 1u);
  EXPECT_EQ(heard[0].requested_bytes, 600 * kMiB);
  void* smaller = allocator.allocate(300 * kMiB);  // what the program does next
  allocator.deallocate(smaller);
  allocator.deallocate(kept);

  allocator.empty_cache();  // the cap limits what is reserved: cached blocks would still serve
  allocator.set_memory_fraction(0.25, 0);
  try {
    allocator.allocate(300 * kMiB);
    FAIL() << "no out-of-memory error under the cap";
  } catch (const memsnap::Error& error) {  // an OutOfMemoryError is an Error
    auto* oom = dynamic_cast<const memsnap::OutOfMemoryError*>(&error);
    ASSERT_NE(oom, nullptr);
    ASSERT_TRUE(oom->info().allowed_bytes.has_value());
    EXPECT_EQ(*oom->info().allowed_bytes, size_t{256} * kMiB);
  }
  EXPECT_TRUE(allocator.check_invariants().empty());
}

TEST(PublicAllocator, PrivatePoolsServeTheirStreams) {
  memsnap::Allocator allocator = simulated();
  memsnap::StreamId capture = 7;  // (a constant would need no capture, and clang says so)
  allocator.begin_allocate_to_pool({1, 0}, [capture](memsnap::StreamId s) { return s == capture; });
  void* in_pool = allocator.allocate(64 * kMiB, 0, capture);
  void* outside = allocator.allocate(64 * kMiB, 0, 0);
  allocator.end_allocate_to_pool({1, 0});
  allocator.deallocate(in_pool);
  allocator.deallocate(outside);
  allocator.empty_cache();  // the pool keeps its segment until released
  EXPECT_EQ(stats(allocator)["reserved_bytes.all.current"], int64_t(64 * kMiB));
  allocator.release_pool({1, 0});
  allocator.empty_cache();
  EXPECT_EQ(stats(allocator)["reserved_bytes.all.current"], 0);
}

TEST(PublicAllocator, AMovedFromAllocatorSaysSo) {
  memsnap::Allocator first = simulated();
  memsnap::Allocator second = std::move(first);
  EXPECT_NE(error_of([&] { first.allocate(kMiB); }).find("moved from"), std::string::npos);  // NOLINT(bugprone-use-after-move)
  void* p = second.allocate(kMiB);
  second.deallocate(p);
}

TEST(PublicRecording, SnapshotsHoldTheHistoryAndPhases) {
  TempDir dir;
  memsnap::Allocator allocator = simulated();
  memsnap::Recording recording(allocator);
  void* weights = allocator.allocate(3 * kMiB);
  {
    memsnap::Recording::Phase step(recording, "step 1");
    void* activations = allocator.allocate(24 * kMiB);
    allocator.deallocate(activations);
  }
  recording.write_snapshot((dir.path / "run.msgpack").string());
  allocator.write_snapshot((dir.path / "state.msgpack").string());
  allocator.deallocate(weights);

  memsnap::Snapshot run = read_back(dir.path / "run.msgpack");
  ASSERT_EQ(run.device_traces.size(), 1u);
  size_t allocs = 0;
  bool stacks = false;
  for (const auto& entry : run.device_traces[0]) {
    allocs += entry.action == memsnap::TraceAction::kAlloc;
    stacks = stacks || entry.stack != memsnap::kNoStackIndex;
  }
  EXPECT_EQ(allocs, 2u);
  EXPECT_TRUE(stacks);
  ASSERT_EQ(run.external_annotations.size(), 2u);
  EXPECT_EQ(run.external_annotations.name(0), "step 1");
  EXPECT_EQ(run.external_annotations.stage(0), "START");
  EXPECT_EQ(run.external_annotations.stage(1), "END");
  EXPECT_EQ(run.segments.size(), 2u);

  memsnap::Snapshot state = read_back(dir.path / "state.msgpack");
  EXPECT_EQ(state.segments.size(), 2u);
}

TEST(PublicRecording, WritesASnapshotAtOutOfMemoryAndRefusesAFolderThatIsNotThere) {
  TempDir dir;
  memsnap::Allocator allocator = simulated(size_t{1} << 30);
  memsnap::Recording recording(allocator, {.trace = true, .max_entries = 1000,
                                           .stacks = memsnap::RecordingOptions::Stacks::kNone});
  const std::string missing = error_of([&] {
    recording.write_snapshot_on_out_of_memory((dir.path / "no-such-folder" / "oom-{n}.msgpack").string());
  });
  EXPECT_NE(missing.find("no-such-folder"), std::string::npos) << missing;
  recording.write_snapshot_on_out_of_memory((dir.path / "oom-{n}.msgpack").string());
  EXPECT_THROW(allocator.allocate(size_t{2} << 30), memsnap::OutOfMemoryError);
  memsnap::Snapshot oom = read_back(dir.path / "oom-1.msgpack");
  ASSERT_EQ(oom.device_traces.size(), 1u);
  bool has_oom = false;
  for (const auto& entry : oom.device_traces[0]) has_oom = has_oom || entry.action == memsnap::TraceAction::kOom;
  EXPECT_TRUE(has_oom);
  EXPECT_NE(error_of([&] { recording.write_snapshot((dir.path / "absent" / "x.msgpack").string()); }), "");
}

TEST(PublicRecording, OneRecordingPerAllocatorAndEitherMayGoFirst) {
  TempDir dir;
  std::optional<memsnap::Allocator> allocator(simulated());
  std::optional<memsnap::Recording> recording(std::in_place, *allocator);
  EXPECT_NE(error_of([&] { memsnap::Recording second(*allocator); }).find("already has a Recording"), std::string::npos);
  void* p = allocator->allocate(kMiB);
  allocator.reset();  // the recording keeps the allocator's state
  recording->write_snapshot((dir.path / "after.msgpack").string());
  EXPECT_EQ(read_back(dir.path / "after.msgpack").segments.size(), 1u);
  recording.reset();
  (void)p;

  memsnap::Allocator again = simulated();
  { memsnap::Recording first(again); }
  memsnap::Recording next(again);  // the first one is gone
  memsnap::Recording moved = std::move(next);
  moved.annotate("phase", true);
  EXPECT_NE(error_of([&] { next.annotate("x", true); }).find("moved from"), std::string::npos);  // NOLINT(bugprone-use-after-move)
}

TEST(PublicRecording, FromTheEnvironmentANamedVariableOrNothing) {
  TempDir dir;
  memsnap::Allocator allocator = simulated();
  ::setenv("MEMSNAP_HISTORY", "sometimes", 1);
  const std::string bad = error_of([&] { memsnap::Recording::from_environment(allocator); });
  EXPECT_NE(bad.find("MEMSNAP_HISTORY"), std::string::npos) << bad;
  const std::string at_exit = (dir.path / "exit.msgpack").string();
  ::setenv("MEMSNAP_HISTORY", "all", 1);
  ::setenv("MEMSNAP_SNAPSHOT_AT_EXIT", at_exit.c_str(), 1);
  {
    memsnap::Recording recording = memsnap::Recording::from_environment(allocator);
    void* p = allocator.allocate(kMiB);
    allocator.deallocate(p);
  }
  ::unsetenv("MEMSNAP_HISTORY");
  ::unsetenv("MEMSNAP_SNAPSHOT_AT_EXIT");
  memsnap::Snapshot written = read_back(at_exit);
  ASSERT_EQ(written.device_traces.size(), 1u);
  size_t allocs = 0, frees = 0;
  for (const auto& entry : written.device_traces[0]) {
    allocs += entry.action == memsnap::TraceAction::kAlloc;
    frees += entry.action == memsnap::TraceAction::kFreeCompleted;
  }
  EXPECT_EQ(allocs, 1u);
  EXPECT_EQ(frees, 1u);
}

TEST(PublicRecording, ThreadsAllocateWhileSnapshotsAreWritten) {
  TempDir dir;
  memsnap::Allocator allocator = simulated(size_t{8} << 30);
  memsnap::Recording recording(allocator, {.trace = true, .max_entries = 5000,
                                           .stacks = memsnap::RecordingOptions::Stacks::kFramePointers});
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 2000; ++i) {
          void* p = allocator.allocate(size_t(1 + (i * 7 + t) % 64) * 4096, 0, memsnap::StreamId(t));
          allocator.deallocate(p);
        }
      } catch (const memsnap::Error&) {
        failed = true;
      }
    });
  for (int i = 0; i < 5; ++i) recording.write_snapshot((dir.path / ("s" + std::to_string(i) + ".msgpack")).string());
  for (auto& thread : threads) thread.join();
  EXPECT_FALSE(failed);
  EXPECT_TRUE(allocator.check_invariants().empty());
  EXPECT_EQ(stats(allocator)["allocated_bytes.all.current"], 0);
}

}  // namespace
