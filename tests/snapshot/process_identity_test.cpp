// Every snapshot says which host, process and rank it comes from, read from the variables
// launchers set (bad values ignored, never trusted) and kept through every format.
#include "snapshot/process_identity.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

#include "snapshot/json_writer.h"
#include "snapshot/msgpack_reader.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_file.h"
#include "snapshot/snapshot_loader.h"
#include "snapshot_test_support.h"

namespace snapshot_test {
namespace {

// Sets the job variables for one test and restores what was there.
class JobEnvironment {
 public:
  JobEnvironment(const char* rank, const char* local_rank, const char* world_size) {
    for (const char* name : kNames) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
    }
    set("RANK", rank);
    set("LOCAL_RANK", local_rank);
    set("WORLD_SIZE", world_size);
  }
  ~JobEnvironment() {
    for (const auto& [name, value] : saved_) set(name.c_str(), value ? value->c_str() : nullptr);
  }

 private:
  static constexpr const char* kNames[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE"};
  static void set(const char* name, const char* value) {
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

TEST(ProcessIdentity, PlaceComesFromTheLauncherVariables) {
  JobEnvironment env("5", "1", "8");
  const memsnap::JobPlace place = memsnap::job_place();
  EXPECT_EQ(place.rank, 5);
  EXPECT_EQ(place.local_rank, 1);
  EXPECT_EQ(place.world_size, 8);

  memsnap::JobPlace given;
  given.rank = 2;
  given.world_size = 4;
  const memsnap::JobPlace told = memsnap::job_place(given);
  EXPECT_EQ(told.rank, 2);
  EXPECT_EQ(told.local_rank, 1);  // not given: from the environment
  EXPECT_EQ(told.world_size, 4);
}

TEST(ProcessIdentity, OutsideAJobNothingIsKnown) {
  JobEnvironment env(nullptr, nullptr, nullptr);
  const memsnap::ProcessInfo process = memsnap::current_process();
  EXPECT_EQ(process.host, host_name());
  EXPECT_EQ(process.pid, getpid());
  EXPECT_FALSE(process.rank.has_value());
  EXPECT_FALSE(process.local_rank.has_value());
  EXPECT_FALSE(process.world_size.has_value());
}

TEST(ProcessIdentity, BadVariablesAreIgnoredWithOneLine) {
  {
    JobEnvironment env("three", "-1", "0");
    testing::internal::CaptureStderr();
    const memsnap::JobPlace place = memsnap::job_place();
    const memsnap::JobPlace again = memsnap::job_place();
    const std::string said = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(place.rank || place.local_rank || place.world_size);
    EXPECT_FALSE(again.rank || again.local_rank || again.world_size);
    // Each variable is named once, however often it is read.
    for (const char* name : {"RANK='three'", "LOCAL_RANK='-1'", "WORLD_SIZE='0'"}) {
      const size_t at = said.find(name);
      EXPECT_NE(at, std::string::npos) << said;
      EXPECT_EQ(said.find(name, at + 1), std::string::npos) << said;
    }
  }
  for (const char* rank : {"", "7x", "99999999999999999999999"}) {
    JobEnvironment env(rank, nullptr, nullptr);
    EXPECT_FALSE(memsnap::job_place().rank.has_value()) << "'" << rank << "'";
  }
  {
    // A rank outside the world: the world size is the one in doubt (the rank names the file).
    JobEnvironment env("4", nullptr, "4");
    const memsnap::JobPlace place = memsnap::job_place();
    EXPECT_EQ(place.rank, 4);
    EXPECT_FALSE(place.world_size.has_value());
  }
}

TEST(ProcessIdentity, DumpPatternsNameTheHostAndRank) {
  JobEnvironment env("12", "4", "16");
  const std::string host = host_name();
  EXPECT_EQ(memsnap::expand_dump_path("oom-{host}-r{rank}-l{local_rank}-d{device}-{n}-{pid}", 1, 2),
            "oom-" + host + "-r12-l4-d1-2-" + std::to_string(getpid()));
  memsnap::SnapshotOptions options;
  options.job.rank = 3;
  EXPECT_EQ(memsnap::expand_dump_path("rank{rank}/{rank}.msgpack", 0, 1, options), "rank3/3.msgpack");

  JobEnvironment none(nullptr, nullptr, nullptr);
  EXPECT_EQ(memsnap::expand_dump_path("r{rank}-{local_rank}", 0, 1), "r0-0");
}

TEST(ProcessIdentity, EveryFormatKeepsThePlace) {
  JobEnvironment env(nullptr, "1", nullptr);
  RecordedProgram program;
  run_training_step(program);
  memsnap::SnapshotOptions options;
  options.job.rank = 9;
  options.job.world_size = 16;
  const memsnap::Snapshot original = memsnap::take_snapshot(program.allocator, &program.recorder, options);
  EXPECT_EQ(original.process.host, host_name());
  EXPECT_EQ(original.process.rank, 9);
  EXPECT_EQ(original.process.local_rank, 1);
  EXPECT_EQ(original.process.world_size, 16);
  ASSERT_FALSE(original.devices.empty());
  EXPECT_FALSE(original.devices[0].name.empty());
  EXPECT_GT(original.devices[0].total_memory, 0u);

  const auto from_msgpack = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(original));
  ASSERT_TRUE(from_msgpack.ok()) << from_msgpack.error();
  EXPECT_EQ(from_msgpack.value().process, original.process);

  const auto from_json = memsnap::load_snapshot_from_memory(memsnap::to_json_text(original));
  ASSERT_TRUE(from_json.ok()) << from_json.error();
  EXPECT_EQ(from_json.value().snapshot.process.rank, 9);
  EXPECT_EQ(from_json.value().snapshot.process.local_rank, 1);
  EXPECT_EQ(from_json.value().snapshot.process.world_size, 16);

  // Unknown stays unknown, not 0.
  JobEnvironment none(nullptr, nullptr, nullptr);
  const memsnap::Snapshot anonymous = memsnap::take_snapshot(program.allocator, &program.recorder);
  const auto read = memsnap::snapshot_from_msgpack(memsnap::to_msgpack(anonymous));
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_FALSE(read.value().process.rank || read.value().process.local_rank || read.value().process.world_size);
}

}  // namespace snapshot_test
