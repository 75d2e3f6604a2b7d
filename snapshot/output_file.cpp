#include "snapshot/output_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

namespace memsnap {
namespace {

std::string reason(int error) { return std::strerror(error); }

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The permissions a new file gets (0666 less the umask), read without changing the umask,
// which another thread may be relying on.
mode_t new_file_mode() {
  static const mode_t mode = [] {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(0666 & ~std::strtoul(line.c_str() + 6, nullptr, 8));
    return static_cast<mode_t>(0644);
  }();
  return mode;
}

// This host's name as it goes into temporary file names: letters, digits, '.', '-' and '_'.
const std::string& host_tag() {
  static const std::string tag = [] {
    char name[HOST_NAME_MAX + 1] = {};
    if (gethostname(name, sizeof name - 1) != 0) return std::string("host");
    std::string out;
    for (const char* c = name; *c != '\0' && out.size() < 64; ++c)
      out += (std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '-') ? *c : '_';
    return out.empty() ? std::string("host") : out;
  }();
  return tag;
}

// ".NAME.memsnap-HOST-": the start of the temporary files of writers of `base` on this host (the
// name cut so that the whole stays within a file name's 255 bytes).
std::string temporary_prefix(const std::string& base) {
  return "." + base.substr(0, 120) + ".memsnap-" + host_tag() + "-";
}

// Removes the temporary files that writers of `base` killed on this host left in `folder`: those
// whose process is gone, owned by this user, and regular files (a link is never followed).
void remove_abandoned_temporaries(const std::string& folder, const std::string& base) {
  DIR* dir = opendir(folder.c_str());
  if (dir == nullptr) return;
  const std::string prefix = temporary_prefix(base);
  while (const dirent* entry = readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (!name.starts_with(prefix)) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.data() + prefix.size(), &end, 10);
    if (pid <= 0 || pid == getpid() || end == nullptr || *end != '-') continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    struct stat info {};
    if (fstatat(dirfd(dir), entry->d_name, &info, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(info.st_mode) || info.st_uid != geteuid()) continue;
    unlinkat(dirfd(dir), entry->d_name, 0);
  }
  closedir(dir);
}

// Where a file asked for at `path` goes: the path itself, or the regular file a link leads to
// (`through` when it is a FIFO, device, terminal or socket, written through); or why not.
struct Destination {
  std::string path;
  bool through = false;
};

Result<Destination> destination_of(const std::string& path) {
  using Failure = Result<Destination>;
  if (path.empty()) return Failure::failure("no file name given");
  struct stat link {};
  if (lstat(path.c_str(), &link) != 0) {
    if (errno == ENOENT) return Destination{path, false};
    return Failure::failure(path + ": " + reason(errno));
  }
  if (S_ISDIR(link.st_mode)) return Failure::failure(path + ": is a folder");
  if (S_ISREG(link.st_mode)) return Destination{path, false};
  struct stat target {};
  if (stat(path.c_str(), &target) != 0) {
    if (errno == ENOENT) return Failure::failure(path + ": is a link to nothing");
    return Failure::failure(path + ": " + reason(errno));
  }
  if (S_ISDIR(target.st_mode)) return Failure::failure(path + ": is a link to a folder");
  if (!S_ISREG(target.st_mode)) return Destination{path, true};
  // A link to a regular file: the kernel must let us open that file for writing through the
  // link (permissions, fs.protected_symlinks); nothing is truncated or created by this open.
  const int fd = open(path.c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Failure::failure(path + ": " + reason(errno));
  close(fd);
  char* resolved = realpath(path.c_str(), nullptr);
  if (resolved == nullptr) return Failure::failure(path + ": " + reason(errno));
  Destination out{resolved, false};
  std::free(resolved);
  return out;
}

std::optional<std::string> folder_problem(const std::string& asked, const std::string& destination) {
  const std::string folder = folder_of(destination);
  struct stat info {};
  if (stat(folder.c_str(), &info) != 0) {
    if (errno == ENOENT) return asked + ": folder " + folder + " does not exist";
    return asked + ": folder " + folder + ": " + reason(errno);
  }
  if (!S_ISDIR(info.st_mode)) return asked + ": " + folder + " is not a folder";
  if (access(folder.c_str(), W_OK | X_OK) != 0) return asked + ": cannot write in folder " + folder + ": " + reason(errno);
  return std::nullopt;
}

}  // namespace

Result<OutputFile> OutputFile::create(const std::string& path) {
  using Failure = Result<OutputFile>;
  Result<Destination> destination = destination_of(path);
  if (!destination) return Failure::failure("cannot write " + destination.error());
  OutputFile out;
  out.path_ = path;
  out.destination_ = destination->path;
  if (destination->through) {
    out.fd_ = open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (out.fd_ < 0) return Failure::failure("cannot write " + path + ": " + reason(errno));
    return out;
  }
  if (auto problem = folder_problem(path, out.destination_)) return Failure::failure("cannot write " + *problem);
  const std::string folder = folder_of(out.destination_);
  const std::string base = base_of(out.destination_);
  remove_abandoned_temporaries(folder, base);
  std::string name = (folder == "/" ? "" : folder) + "/" + temporary_prefix(base) + std::to_string(getpid()) + "-XXXXXX";
  out.fd_ = mkostemp(name.data(), O_CLOEXEC);  // O_CREAT|O_EXCL: a planted link makes it fail, not follow
  if (out.fd_ < 0) return Failure::failure("cannot write " + path + ": cannot create a file in " + folder + ": " + reason(errno));
  out.temporary_ = name;
  struct stat existing {};
  if (stat(out.destination_.c_str(), &existing) == 0 && S_ISREG(existing.st_mode)) {
    (void)!fchown(out.fd_, existing.st_uid, existing.st_gid);  // as far as this user may
    fchmod(out.fd_, existing.st_mode & 07777);
  } else {
    fchmod(out.fd_, new_file_mode());
  }
  return out;
}

OutputFile::OutputFile(OutputFile&& other) noexcept
    : path_(std::move(other.path_)),
      destination_(std::move(other.destination_)),
      temporary_(std::exchange(other.temporary_, std::string())),
      fd_(std::exchange(other.fd_, -1)),
      error_(std::move(other.error_)) {}

OutputFile::~OutputFile() {
  if (fd_ >= 0) close(fd_);
  if (fd_ >= 0 && !temporary_.empty()) unlink(temporary_.c_str());
}

void OutputFile::write(std::string_view piece) {
  size_t written = 0;
  while (!error_ && fd_ >= 0 && written < piece.size()) {
    const ssize_t n = ::write(fd_, piece.data() + written, piece.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error_ = "cannot write " + path_ + ": " + reason(errno);
    else if (n == 0) error_ = "cannot write " + path_ + ": the write wrote nothing";
    else written += static_cast<size_t>(n);
  }
}

std::optional<std::string> OutputFile::finish() {
  if (fd_ < 0) return error_ ? error_ : std::optional<std::string>("cannot write " + path_ + ": already finished");
  const int fd = std::exchange(fd_, -1);
  if (close(fd) != 0 && !error_) error_ = "cannot write " + path_ + ": " + reason(errno);
  if (temporary_.empty()) return error_;
  if (!error_ && rename(temporary_.c_str(), destination_.c_str()) != 0)
    error_ = "cannot write " + path_ + ": cannot rename the finished file into place: " + reason(errno);
  if (error_) unlink(temporary_.c_str());
  temporary_.clear();
  return error_;
}

std::optional<std::string> output_path_problem(const std::string& path) {
  Result<Destination> destination = destination_of(path);
  if (!destination) return "cannot write " + destination.error();
  if (destination->through) {
    if (access(path.c_str(), W_OK) != 0) return "cannot write " + path + ": " + reason(errno);
    return std::nullopt;
  }
  if (auto problem = folder_problem(path, destination->path)) return "cannot write " + *problem;
  return std::nullopt;
}

}  // namespace memsnap
