// Snapshots reach the disk whole or not at all, and out-of-memory leaves one behind even
// when the device is full and several threads fail at once.
#include "snapshot/snapshot_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <new>
#include <filesystem>
#include <thread>

#include "snapshot/msgpack_reader.h"
#include "snapshot_test_support.h"

namespace snapshot_test {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("memsnap-test-" + std::to_string(getpid()) + "-" +
                                               std::to_string(reinterpret_cast<uintptr_t>(this)));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

TEST(SnapshotFile, DumpWritesAReadableFileAndNothingElse) {
  TempDir dir;
  RecordedProgram program;
  run_training_step(program);
  const std::string path = (dir.path / "run.msgpack").string();
  ASSERT_FALSE(memsnap::dump_snapshot(program.allocator, &program.recorder, path).has_value());
  const auto read = memsnap::read_msgpack_snapshot(path);
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_FALSE(read.value().segments.empty());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST(SnapshotFile, FailedWriteLeavesNoFileAndSaysWhy) {
  TempDir dir;
  const std::string path = (dir.path / "missing-folder" / "x.msgpack").string();
  const auto error = memsnap::write_file_atomically(path, "data");
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("missing-folder does not exist"), std::string::npos) << *error;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(memsnap::read_msgpack_snapshot(path).ok());
  EXPECT_NE(memsnap::read_msgpack_snapshot(dir.path.string()).error().find(dir.path.string()),
            std::string::npos);
}

// A producer that fails half way (out of memory while it writes) leaves no file behind, not
// even the temporary one, and its error reaches the caller.
TEST(SnapshotFile, AProducerThatThrowsLeavesNothingBehind) {
  TempDir dir;
  const std::string path = (dir.path / "x.pickle").string();
  EXPECT_THROW(memsnap::write_file_atomically(path,
                                              [](const memsnap::ByteSink& sink) {
                                                sink("the first piece");
                                                throw std::bad_alloc();
                                              }),
               std::bad_alloc);
  EXPECT_TRUE(fs::is_empty(dir.path));
}

TEST(SnapshotFile, PatternPlaceholdersAreFilledIn) {
  EXPECT_EQ(memsnap::expand_dump_path("oom-{device}-{n}.msgpack", 2, 7), "oom-2-7.msgpack");
  EXPECT_EQ(memsnap::expand_dump_path("{pid}", 0, 1), std::to_string(getpid()));
}

TEST(SnapshotFile, OutOfMemoryOnAFullDeviceWritesSnapshotsFromEveryThread) {
  TempDir dir;
  auto backend = small_device(/*capacity=*/64u << 20);
  memsnap::CachingAllocator allocator(backend);
  memsnap::HistoryRecorder recorder(allocator);
  recorder.configure({memsnap::HistoryLevel::kAll, 1000, true});
  ASSERT_EQ(memsnap::dump_snapshot_on_oom(allocator, &recorder, (dir.path / "oom-{n}.msgpack").string()), std::nullopt);

  std::atomic<int> ooms{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<void*> held;
      try {
        for (;;) held.push_back(allocator.allocate(6u << 20));
      } catch (const memsnap::OutOfMemoryError&) {
        ++ooms;
      }
      for (void* p : held) allocator.deallocate(p);
    });
  }
  for (auto& thread : threads) thread.join();
  ASSERT_EQ(ooms.load(), 4);
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path)) {
    ++files;
    const auto read = memsnap::read_msgpack_snapshot(entry.path().string());
    ASSERT_TRUE(read.ok()) << read.error();
    bool has_oom = false;
    for (const auto& event : read.value().device_traces.at(0))
      has_oom |= event.action == memsnap::TraceAction::kOom;
    EXPECT_TRUE(has_oom);
  }
  EXPECT_EQ(files, 4u);
  EXPECT_TRUE(allocator.check_invariants().empty());
}

}  // namespace snapshot_test

namespace snapshot_test {

TEST(SnapshotFile, AnOutOfMemorySnapshotWithoutHistoryStillHoldsTheFailedRequest) {
  TempDir dir;
  auto backend = small_device(/*capacity=*/64u << 20);
  memsnap::CachingAllocator allocator(backend);
  ASSERT_EQ(memsnap::dump_snapshot_on_oom(allocator, nullptr, (dir.path / "oom-{n}.msgpack").string()), std::nullopt);
  void* kept = allocator.allocate(40u << 20);
  testing::internal::CaptureStderr();
  EXPECT_THROW(allocator.allocate(30u << 20), memsnap::OutOfMemoryError);
  testing::internal::GetCapturedStderr();
  const auto read = memsnap::read_msgpack_snapshot((dir.path / "oom-1.msgpack").string());
  ASSERT_TRUE(read.ok()) << read.error();
  const auto& trace = read.value().device_traces.at(0);
  ASSERT_EQ(trace.size(), 1u);
  EXPECT_EQ(trace[0].action, memsnap::TraceAction::kOom);
  EXPECT_EQ(trace[0].size, 30u << 20);
  EXPECT_GT(trace[0].address, 0u);  // the device's free bytes
  allocator.deallocate(kept);
}

TEST(SnapshotFile, ThreadsDumpingToOnePathNeverMixTheirFiles) {
  TempDir dir;
  RecordedProgram program;
  run_training_step(program);
  const std::string path = (dir.path / "same.msgpack").string();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 5; ++i)
        if (memsnap::dump_snapshot(program.allocator, &program.recorder, path)) ++failures;
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(memsnap::read_msgpack_snapshot(path).ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 1);
}

TEST(SnapshotFile, AnOutOfMemoryHookIsRefusedWhereItCouldNotWriteAndSaysWhenItReplacesASnapshot) {
  TempDir dir;
  auto backend = small_device(/*capacity=*/64u << 20);
  memsnap::CachingAllocator allocator(backend);
  const std::optional<std::string> refused =
      memsnap::dump_snapshot_on_oom(allocator, nullptr, (dir.path / "missing" / "oom-{n}.msgpack").string());
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find("missing does not exist"), std::string::npos) << *refused;
  // A pattern without {n}: every error writes the same file, and says so from the second on.
  ASSERT_EQ(memsnap::dump_snapshot_on_oom(allocator, nullptr, (dir.path / "oom.msgpack").string()), std::nullopt);
  void* kept = allocator.allocate(40u << 20);
  std::vector<std::string> lines;
  for (int error = 0; error < 2; ++error) {
    testing::internal::CaptureStderr();
    EXPECT_THROW(allocator.allocate(30u << 20), memsnap::OutOfMemoryError);
    lines.push_back(testing::internal::GetCapturedStderr());
  }
  EXPECT_NE(lines[0].find("snapshot written to"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find("replacing"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("replacing the snapshot of an earlier out-of-memory error: put {n} in the pattern"),
            std::string::npos) << lines[1];
  EXPECT_TRUE(fs::exists(dir.path / "oom.msgpack"));
  EXPECT_FALSE(fs::exists(dir.path / "missing"));
  allocator.deallocate(kept);
}

TEST(SnapshotFile, AnOutOfMemoryHookOutlivesItsRecorder) {
  TempDir dir;
  auto backend = small_device(/*capacity=*/64u << 20);
  memsnap::CachingAllocator allocator(backend);
  auto recorder = std::make_unique<memsnap::HistoryRecorder>(allocator);
  recorder->configure({memsnap::HistoryLevel::kAll, 1000, false});
  ASSERT_EQ(memsnap::dump_snapshot_on_oom(allocator, recorder.get(), (dir.path / "oom-{n}.msgpack").string()),
            std::nullopt);
  void* kept = allocator.allocate(40u << 20);
  testing::internal::CaptureStderr();
  EXPECT_THROW(allocator.allocate(30u << 20), memsnap::OutOfMemoryError);  // with the recorder's trace
  recorder.reset();  // the hook stays with the allocator
  EXPECT_THROW(allocator.allocate(30u << 20), memsnap::OutOfMemoryError);
  testing::internal::GetCapturedStderr();
  const auto with = memsnap::read_msgpack_snapshot((dir.path / "oom-1.msgpack").string());
  const auto without = memsnap::read_msgpack_snapshot((dir.path / "oom-2.msgpack").string());
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_GE(with.value().device_traces.at(0).size(), 2u);   // the allocation and the error
  EXPECT_EQ(without.value().segments.size(), with.value().segments.size());
  allocator.deallocate(kept);
}

}  // namespace snapshot_test
