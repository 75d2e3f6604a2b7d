// `memsnap record` end to end without a GPU: the real CLI runs fake_cuda_program, which loads
// the real libmemsnap_record.so as the CUDA driver would and makes its calls through a fake
// CUPTI. What is checked is what a user gets: the exit status, the snapshots written and what
// they hold, the lines on stderr.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "snapshot/snapshot_checks.h"
#include "snapshot/snapshot_loader.h"

namespace memsnap {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMiB = uint64_t{1} << 20;

// A folder of its own under /tmp for one run, removed with what the run wrote in it unless the
// test failed: then it is kept for a look, and its path is printed.
class TempFolder {
 public:
  TempFolder() {
    char name[] = "/tmp/memsnap-record-test-XXXXXX";
    if (mkdtemp(name) == nullptr) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
      return;
    }
    path_ = name;
  }
  TempFolder(TempFolder&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempFolder& operator=(TempFolder&&) = delete;
  ~TempFolder() {
    if (path_.empty()) return;
    if (::testing::Test::HasFailure()) {
      std::cerr << "the run's files are kept in " << path_.string() << "\n";
      return;
    }
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct RecordRun {
  int status = -1;
  std::string out;
  std::string err;
  TempFolder folder;

  std::vector<fs::path> files(const std::string& prefix) const {
    std::vector<fs::path> found;
    for (const auto& entry : fs::directory_iterator(folder.path()))
      if (entry.path().filename().string().starts_with(prefix)) found.push_back(entry.path());
    return found;
  }
  Snapshot only(const std::string& prefix) const {
    const std::vector<fs::path> found = files(prefix);
    EXPECT_EQ(found.size(), 1u) << prefix << " in " << folder.path() << "\n" << err;
    if (found.empty()) return {};
    Result<LoadedSnapshot> loaded = load_snapshot(found.front().string());
    EXPECT_TRUE(loaded) << loaded.error();
    if (!loaded) return {};
    EXPECT_EQ(check_snapshot(loaded.value().snapshot), std::nullopt);
    return loaded.value().snapshot;
  }
};

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

RecordRun record(const std::string& scenario, const std::string& options = "", const std::string& environment = "") {
  RecordRun run;
  const std::string command = environment + " " + MEMSNAP_CLI + std::string(" record --cupti ") + MEMSNAP_FAKE_CUPTI +
                              " -o " + (run.folder.path() / "run-{pid}.msgpack").string() + " --oom " +
                              (run.folder.path() / "oom-{n}.msgpack").string() + " " + options + " -- " +
                              MEMSNAP_FAKE_CUDA_PROGRAM + " " + scenario + " > " + (run.folder.path() / "stdout").string() +
                              " 2> " + (run.folder.path() / "stderr").string();
  const int status = std::system(command.c_str());
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = read(run.folder.path() / "stdout");
  run.err = read(run.folder.path() / "stderr");
  return run;
}

const SnapshotSegment* segment_at(const Snapshot& snapshot, uint64_t address) {
  for (const SnapshotSegment& segment : snapshot.segments)
    if (segment.address == address) return &segment;
  return nullptr;
}

bool stack_names(const Snapshot& snapshot, StackIndex stack, const std::string& function) {
  if (stack == kNoStackIndex) return false;
  for (uint32_t frame : snapshot.stacks.at(static_cast<size_t>(stack)))
    if (snapshot.frames[frame].function.find(function) != std::string::npos) return true;
  return false;
}

TEST(RecordInjection, TheSnapshotAtExitHoldsWhatTheProgramStillHeldWithItsStacks) {
  const RecordRun run = record("calls");
  ASSERT_EQ(run.status, 0) << run.err;
  const Snapshot snapshot = run.only("run-");
  // Live: 64 MiB and 3 MiB (device 1) by cudaMalloc, 8 MiB by cudaMallocAsync, 2 MiB by
  // cuMemAlloc, one 20 MiB mapped page of two; the 512 B block was freed.
  EXPECT_EQ(snapshot.segments.size(), 5u);
  const SnapshotSegment* weights = segment_at(snapshot, 0x7f0000000000);
  ASSERT_NE(weights, nullptr);
  EXPECT_EQ(weights->total_size, 64 * kMiB);
  EXPECT_TRUE(stack_names(snapshot, weights->blocks.at(0).stack, "allocate_weights"))
      << "the program's own function is on the allocation's stack";
  const SnapshotSegment* on_device_1 = segment_at(snapshot, 0x7f0004200000);
  ASSERT_NE(on_device_1, nullptr);
  EXPECT_EQ(on_device_1->device, 1);
  const SnapshotSegment* async = segment_at(snapshot, 0x7f0008000000);
  ASSERT_NE(async, nullptr);
  EXPECT_EQ(async->stream, 0x5000u);
  EXPECT_NE(segment_at(snapshot, 0x7f0010000000), nullptr);
  EXPECT_NE(segment_at(snapshot, 0x7f0020000000), nullptr);
  EXPECT_EQ(segment_at(snapshot, 0x7f0020000000 + 20 * kMiB), nullptr);
  ASSERT_EQ(snapshot.device_traces.size(), 2u);
  EXPECT_EQ(snapshot.device_traces[1].size(), 2u);  // one allocation: segment_alloc + alloc
  EXPECT_NE(run.err.find("at exit: snapshot written to"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("1 snapshot written; view with: memsnap serve"), std::string::npos) << run.err;
}

TEST(RecordInjection, AnOutOfMemoryErrorWritesASnapshotAndTheProgramGoesOn) {
  const RecordRun run = record("oom");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("goes on"), std::string::npos);
  const Snapshot oom = run.only("oom-");
  ASSERT_EQ(oom.segments.size(), 1u);
  ASSERT_FALSE(oom.device_traces.at(0).empty());
  EXPECT_EQ(oom.device_traces[0].back().action, TraceAction::kOom);
  EXPECT_EQ(oom.device_traces[0].back().size, uint64_t{1} << 40);
  EXPECT_TRUE(run.only("run-").segments.empty());
  EXPECT_NE(run.err.find("2 snapshots written"), std::string::npos) << run.err;
}

TEST(RecordInjection, OutOfMemorySnapshotsStopAtTheLimitAndTheTraceKeepsEveryError) {
  const RecordRun run = record("ooms", "--oom-limit 2");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.files("oom-").size(), 2u);
  EXPECT_NE(run.err.find("more than 2 out-of-memory errors"), std::string::npos) << run.err;
  const Snapshot snapshot = run.only("run-");
  ASSERT_EQ(snapshot.device_traces.size(), 1u);
  EXPECT_EQ(snapshot.device_traces[0].size(), 5u);
}

TEST(RecordInjection, TheSignalAskedForWritesASnapshotAndTheProgramGoesOn) {
  const RecordRun run = record("signal", "--signal USR1");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("on SIGUSR1: snapshot written"), std::string::npos) << run.err;
  EXPECT_EQ(run.only("run-").segments.size(), 2u);  // the exit's, written over the signal's
}

TEST(RecordInjection, ASignalThatEndsTheProgramEndsItAfterTheSnapshot) {
  const RecordRun run = record("term", "--signal TERM");
  EXPECT_EQ(run.status, 128 + 15) << run.err;
  EXPECT_NE(run.err.find("on SIGTERM: snapshot written"), std::string::npos) << run.err;
  EXPECT_EQ(run.only("run-").segments.size(), 1u);
}

TEST(RecordInjection, AForkedChildRecordsAndWritesNothing) {
  const RecordRun run = record("fork");
  ASSERT_EQ(run.status, 0) << run.err;
  const Snapshot snapshot = run.only("run-");
  ASSERT_EQ(snapshot.segments.size(), 1u);
  EXPECT_EQ(snapshot.segments[0].total_size, 10 * kMiB);
}

TEST(RecordInjection, AProgramExecdIsRecordedByItsOwnInjection) {
  const RecordRun run = record("exec");
  ASSERT_EQ(run.status, 0) << run.err;
  const Snapshot snapshot = run.only("run-");
  EXPECT_EQ(snapshot.segments.size(), 5u) << "the exec'd program's snapshot (the calls scenario)";
  EXPECT_EQ(segment_at(snapshot, 0x7f0002000000), nullptr);
}

TEST(RecordInjection, AProcessThatAllocatedNothingWritesNoSnapshot) {
  const RecordRun run = record("nothing");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(run.files("run-").empty());
  EXPECT_NE(run.err.find("no snapshot written"), std::string::npos) << run.err;
}

TEST(RecordInjection, APathWrittenByTwoProcessesIsSaid) {
  RecordRun run;
  const std::string program = std::string(MEMSNAP_FAKE_CUDA_PROGRAM) + " calls";
  const std::string command = std::string(MEMSNAP_CLI) + " record --cupti " + MEMSNAP_FAKE_CUPTI + " -o " +
                              (run.folder.path() / "same.msgpack").string() + " -- sh -c '" + program + "; " +
                              program + "' 2> " + (run.folder.path() / "stderr").string();
  ASSERT_EQ(std::system(command.c_str()), 0);
  run.err = read(run.folder.path() / "stderr");
  EXPECT_NE(run.err.find("same.msgpack was written more than once"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("2 snapshots written"), std::string::npos) << run.err;
}

TEST(RecordInjection, ThreadsCallingAtOnceLoseNothing) {
  const RecordRun run = record("threads", "--max-entries 100000");
  ASSERT_EQ(run.status, 0) << run.err;
  const Snapshot snapshot = run.only("run-");
  EXPECT_EQ(snapshot.segments.size(), 800u);  // 8 threads x 100 kept
  size_t entries = 0;
  for (const auto& trace : snapshot.device_traces) entries += trace.size();
  EXPECT_EQ(entries, 8u * (500 * 2 + 400 * 3));
}

TEST(RecordInjection, WhenCuptiRefusesTheProgramRunsUnrecordedAndSaysSoOnce) {
  const RecordRun run = record("calls", "", "FAKE_CUPTI_REFUSE=1");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("CUPTI refused the subscription"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("no snapshot written"), std::string::npos) << run.err;
  EXPECT_TRUE(run.files("run-").empty());
}

TEST(RecordInjection, AnOutputFolderThatDoesNotExistStopsItBeforeTheProgramRuns) {
  TempFolder folder;
  for (const std::string option : {"-o", "--oom"}) {
    const fs::path ran = folder.path() / "ran";
    const std::string command = std::string(MEMSNAP_CLI) + " record --cupti " + MEMSNAP_FAKE_CUPTI + " " + option +
                                " " + (folder.path() / "missing" / "x-{n}.msgpack").string() + " -- sh -c 'touch " +
                                ran.string() + "' 2> " + (folder.path() / "stderr").string();
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1);
    const std::string err = read(folder.path() / "stderr");
    EXPECT_NE(err.find("record: " + option + " cannot write"), std::string::npos) << err;
    EXPECT_NE(err.find("missing does not exist"), std::string::npos) << err;
    EXPECT_FALSE(fs::exists(ran)) << "the program ran";
  }
}

TEST(RecordInjection, ASnapshotThatCannotBeWrittenAtExitFailsTheRun) {
  TempFolder folder;
  const fs::path sub = folder.path() / "sub";
  fs::create_directory(sub);
  // The folder is there when memsnap record and the recorder check it, and gone when the program ends.
  const std::string command = "FAKE_REMOVE_FOLDER=" + sub.string() + " " + MEMSNAP_CLI + " record --cupti " +
                              MEMSNAP_FAKE_CUPTI + " -o " + (sub / "run.msgpack").string() + " -- " +
                              MEMSNAP_FAKE_CUDA_PROGRAM + " calls-folder-goes 2> " + (folder.path() / "stderr").string();
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  const std::string err = read(folder.path() / "stderr");
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_NE(err.find("at exit: snapshot not written"), std::string::npos) << err;
  EXPECT_NE(err.find("memsnap: error: 1 snapshot not written (the recorder said why above)"), std::string::npos) << err;
  EXPECT_EQ(err.find("no snapshot written"), std::string::npos) << err;
}

}  // namespace
}  // namespace memsnap
