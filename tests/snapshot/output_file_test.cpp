// Every writer's file appears whole or not at all, never through a link planted where it makes
// its temporary file, and never by replacing what is not a regular file.
#include "snapshot/output_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>
#include <sstream>
#include <thread>

namespace snapshot_test {
namespace {

namespace fs = std::filesystem;

struct Folder {
  fs::path path = fs::temp_directory_path() / ("memsnap-output-" + std::to_string(getpid()) + "-" +
                                               std::to_string(reinterpret_cast<uintptr_t>(this)));
  Folder() { fs::create_directories(path); }
  ~Folder() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(path), fs::directory_iterator())); }
};

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::optional<std::string> write(const std::string& path, const std::string& text) {
  memsnap::Result<memsnap::OutputFile> file = memsnap::OutputFile::create(path);
  if (!file) return file.error();
  file.value().write(text);
  return file.value().finish();
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string out;
  for (const char* c = name; *c != '\0' && out.size() < 64; ++c)
    out += (std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '-') ? *c : '_';
  return out;
}

pid_t finished_process() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST(OutputFile, ReplacesAFileWholeAndLeavesNothingElse) {
  Folder folder;
  put(folder / "out.svg", "old");
  memsnap::Result<memsnap::OutputFile> file = memsnap::OutputFile::create(folder / "out.svg");
  ASSERT_TRUE(file.ok()) << file.error();
  file.value().write("new ");
  EXPECT_EQ(contents(folder / "out.svg"), "old");  // nothing shows until finish()
  file.value().write("text");
  EXPECT_EQ(file.value().finish(), std::nullopt);
  EXPECT_EQ(contents(folder / "out.svg"), "new text");
  EXPECT_EQ(folder.entries(), 1u);
}

TEST(OutputFile, AnUnfinishedFileLeavesTheOldOneAndNoTemporary) {
  Folder folder;
  put(folder / "out.svg", "old");
  {
    memsnap::Result<memsnap::OutputFile> file = memsnap::OutputFile::create(folder / "out.svg");
    ASSERT_TRUE(file.ok());
    file.value().write("half");
    EXPECT_EQ(folder.entries(), 2u);  // the temporary file, made before any work
  }
  EXPECT_EQ(contents(folder / "out.svg"), "old");
  EXPECT_EQ(folder.entries(), 1u);
}

TEST(OutputFile, NewFilesFollowTheUmaskAndReplacedFilesKeepTheirPermissions) {
  Folder folder;
  const mode_t mask = umask(022);
  ASSERT_EQ(write(folder / "new", "x"), std::nullopt);
  put(folder / "private", "x");
  chmod((folder / "private").c_str(), 0600);
  ASSERT_EQ(write(folder / "private", "y"), std::nullopt);
  umask(mask);
  struct stat info {};
  ASSERT_EQ(stat((folder / "new").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0644u);
  ASSERT_EQ(stat((folder / "private").c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 07777, 0600u);
}

TEST(OutputFile, MissingFoldersFoldersAndLinksToNothingAreRefusedBeforeAnyWork) {
  Folder folder;
  fs::create_directory(folder.path / "sub");
  fs::create_symlink(folder.path / "nowhere", folder.path / "dangling");
  fs::create_directory_symlink(folder.path / "sub", folder.path / "to-sub");
  const auto refused = [](const std::string& path, const std::string& why) {
    memsnap::Result<memsnap::OutputFile> file = memsnap::OutputFile::create(path);
    ASSERT_FALSE(file.ok()) << path;
    EXPECT_NE(file.error().find(why), std::string::npos) << file.error();
    EXPECT_EQ(file.error().find('\n'), std::string::npos);
    ASSERT_TRUE(memsnap::output_path_problem(path).has_value()) << path;
    EXPECT_NE(memsnap::output_path_problem(path)->find(why), std::string::npos);
  };
  refused(folder / "missing/x.msgpack", "folder " + (folder / "missing") + " does not exist");
  refused(folder / "sub", "is a folder");
  refused(folder / "dangling", "is a link to nothing");
  refused(folder / "to-sub", "is a link to a folder");
  EXPECT_FALSE(fs::exists(folder.path / "nowhere"));
  EXPECT_EQ(memsnap::output_path_problem(folder / "fine.msgpack"), std::nullopt);
  EXPECT_FALSE(fs::exists(folder.path / "fine.msgpack"));
  if (geteuid() != 0) {  // root writes anywhere
    fs::create_directory(folder.path / "locked");
    chmod((folder / "locked").c_str(), 0500);
    refused(folder / "locked/x", "cannot write in folder");
  }
}

TEST(OutputFile, ALinkToAFileStaysALinkAndTheFileIsReplaced) {
  Folder folder;
  fs::create_directory(folder.path / "real");
  put(folder / "real/data.json", "old");
  fs::create_symlink(folder.path / "real" / "data.json", folder.path / "link.json");
  ASSERT_EQ(write(folder / "link.json", "new"), std::nullopt);
  EXPECT_TRUE(fs::is_symlink(folder.path / "link.json"));
  EXPECT_EQ(contents(folder / "real/data.json"), "new");
  EXPECT_EQ(folder.entries(), 2u);
  EXPECT_EQ(std::distance(fs::directory_iterator(folder.path / "real"), fs::directory_iterator()), 1);
}

TEST(OutputFile, DevicesAndPipesAreWrittenThroughNotReplaced) {
  Folder folder;
  // /dev/null stays the device: a writer run as root once replaced /dev/full with a file.
  memsnap::Result<memsnap::OutputFile> null = memsnap::OutputFile::create("/dev/null");
  ASSERT_TRUE(null.ok()) << null.error();
  ASSERT_TRUE(null.value().writes_through());  // else finishing would replace the device
  null.value().write("gone");
  EXPECT_EQ(null.value().finish(), std::nullopt);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  if (fs::is_character_file("/dev/full")) {
    memsnap::Result<memsnap::OutputFile> file = memsnap::OutputFile::create("/dev/full");
    ASSERT_TRUE(file.ok()) << file.error();
    ASSERT_TRUE(file.value().writes_through());
    file.value().write("x");
    const std::optional<std::string> full = file.value().finish();
    ASSERT_TRUE(full.has_value());
    EXPECT_NE(full->find("No space left on device"), std::string::npos) << *full;
    EXPECT_TRUE(fs::is_character_file("/dev/full"));
  }
  // A FIFO, named directly and through a link, delivers the bytes and stays a FIFO.
  ASSERT_EQ(mkfifo((folder / "pipe").c_str(), 0600), 0);
  fs::create_symlink(folder.path / "pipe", folder.path / "to-pipe");
  for (const std::string name : {"pipe", "to-pipe"}) {
    std::string read;
    std::thread reader([&] { read = contents(folder / "pipe"); });
    EXPECT_EQ(write(folder / name, "through " + name), std::nullopt);
    reader.join();
    EXPECT_EQ(read, "through " + name);
    EXPECT_TRUE(fs::is_fifo(folder.path / "pipe"));
  }
  EXPECT_TRUE(fs::is_symlink(folder.path / "to-pipe"));
}

TEST(OutputFile, LinksPlantedAtTemporaryNamesAreNeverFollowed) {
  Folder folder;
  put(folder / "victim", "precious");
  // The names an earlier writer used (OUT.tmp.<pid>, OUT.tmp.<pid>.<n>), and this one's prefix
  // with many endings: none is opened, whatever is there.
  const std::string pid = std::to_string(getpid());
  const std::string prefix = ".out.svg.memsnap-" + host_name() + "-" + pid + "-";
  std::vector<std::string> planted = {"out.svg.tmp." + pid, "out.svg.tmp." + pid + ".1"};
  for (int i = 0; i < 200; ++i) planted.push_back(prefix + std::to_string(i));
  for (const std::string& name : planted) fs::create_symlink(folder.path / "victim", folder.path / name);
  for (int round = 0; round < 20; ++round) ASSERT_EQ(write(folder / "out.svg", "output"), std::nullopt);
  EXPECT_EQ(contents(folder / "victim"), "precious");
  EXPECT_EQ(contents(folder / "out.svg"), "output");
  for (const std::string& name : planted) EXPECT_TRUE(fs::is_symlink(folder.path / name)) << name;
  // Two writers of one name at once get two temporary files.
  memsnap::Result<memsnap::OutputFile> first = memsnap::OutputFile::create(folder / "out.svg");
  memsnap::Result<memsnap::OutputFile> second = memsnap::OutputFile::create(folder / "out.svg");
  ASSERT_TRUE(first.ok() && second.ok());
  first.value().write("1");
  second.value().write("2");
  EXPECT_EQ(first.value().finish(), std::nullopt);
  EXPECT_EQ(second.value().finish(), std::nullopt);
  EXPECT_EQ(contents(folder / "out.svg"), "2");
}

TEST(OutputFile, TemporaryFilesOfKilledWritersAreRemovedByTheNextWrite) {
  Folder folder;
  const std::string prefix = ".out.msgpack.memsnap-" + host_name() + "-";
  const std::string dead = prefix + std::to_string(finished_process()) + "-abc123";
  const std::string alive = prefix + std::to_string(getppid()) + "-abc123";  // a running writer
  const std::string other_name = ".other.msgpack.memsnap-" + host_name() + "-" + std::to_string(finished_process()) + "-x";
  const std::string dead_link = prefix + std::to_string(finished_process()) + "-link";
  put(folder / dead, "left by kill -9");
  put(folder / alive, "being written");
  put(folder / other_name, "another file's");
  put(folder / "kept", "kept");
  fs::create_symlink(folder.path / "kept", folder.path / dead_link);
  ASSERT_EQ(write(folder / "out.msgpack", "x"), std::nullopt);
  EXPECT_FALSE(fs::exists(folder.path / dead));
  EXPECT_TRUE(fs::exists(folder.path / alive));
  EXPECT_TRUE(fs::exists(folder.path / other_name));
  EXPECT_TRUE(fs::is_symlink(folder.path / dead_link));  // not a regular file: left alone
  EXPECT_EQ(contents(folder / "kept"), "kept");
}

TEST(OutputFile, AFailedFinishSaysWhyAndAFinishedFileCannotBeFinishedTwice) {
  Folder folder;
  EXPECT_FALSE(memsnap::OutputFile::create(folder / "sub/out").ok());
  fs::create_directory(folder.path / "sub");
  memsnap::Result<memsnap::OutputFile> file = memsnap::OutputFile::create(folder / "sub/out");
  ASSERT_TRUE(file.ok());
  fs::remove_all(folder.path / "sub");  // the folder went away during the work
  file.value().write("x");
  const std::optional<std::string> error = file.value().finish();
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("cannot write " + (folder / "sub/out")), std::string::npos) << *error;
  EXPECT_TRUE(file.value().finish().has_value());
}

}  // namespace
}  // namespace snapshot_test
