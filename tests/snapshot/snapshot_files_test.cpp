// Which files a command line names: files as given, folders searched for snapshots in order,
// and clear errors for what is not there.
#include "snapshot/snapshot_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace snapshot_test {
namespace {

namespace fs = std::filesystem;

struct Folder {
  fs::path path = fs::temp_directory_path() / ("memsnap-files-" + std::to_string(getpid()));
  Folder() { fs::create_directories(path); }
  ~Folder() { fs::remove_all(path); }
  std::string add(const std::string& name) {
    const fs::path file = path / name;
    fs::create_directories(file.parent_path());
    std::ofstream(file) << "x";
    return file.string();
  }
};

TEST(SnapshotFiles, ExtensionsThatNameSnapshots) {
  for (const char* name : {"a.msgpack", "a.json", "a.pickle", "a.pkl", "a.pickle.gz", "A.PICKLE", "rank3.msgpack.gz"})
    EXPECT_TRUE(memsnap::has_snapshot_extension(name)) << name;
  for (const char* name : {"a.pt", "model.ckpt", "a.gz", ".pickle", "notes.txt", "pickle", ""})
    EXPECT_FALSE(memsnap::has_snapshot_extension(name)) << name;
}

TEST(SnapshotFiles, FoldersGiveTheirSnapshotsSortedAndFilesStayAsGiven) {
  Folder job;
  const std::string b = job.add("rank1.msgpack");
  const std::string a = job.add("host0/rank0.pickle.gz");
  job.add("checkpoint.pt");
  job.add("README.md");
  job.add("a/b/c/d/e/too-deep.msgpack");  // five folders down: past the search depth
  const std::string deep = job.add("a/b/c/d/deep.msgpack");

  const std::string loose = job.add("../memsnap-files-loose.json");
  auto files = memsnap::expand_snapshot_paths({loose, job.path.string()});
  ASSERT_TRUE(files.ok()) << files.error();
  EXPECT_EQ(files.value(), (std::vector<std::string>{loose, deep, a, b}));
  fs::remove(loose);
}

TEST(SnapshotFiles, MissingPathsAndEmptyFoldersAreOneLine) {
  Folder empty;
  empty.add("notes.txt");
  auto none = memsnap::expand_snapshot_paths({empty.path.string()});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("no snapshot files in this folder"), std::string::npos) << none.error();
  auto missing = memsnap::expand_snapshot_paths({(empty.path / "nope").string()});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("no such file or folder"), std::string::npos) << missing.error();
}

}  // namespace
}  // namespace snapshot_test
