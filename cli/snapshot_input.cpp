#include "cli/snapshot_input.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/command.h"

namespace memsnap::cli {
namespace {

constexpr off_t kProgressFromBytes = off_t{8} << 20;

}  // namespace

std::function<void(size_t, size_t)> files_progress(size_t total) {
  if (total < 20 || ::isatty(STDERR_FILENO) != 1) return {};
  return [step = std::max<size_t>(1, total / 100)](size_t done, size_t all) {
    if (done % step != 0 && done != all) return;
    std::fprintf(stderr, "\rmemsnap: reading snapshots %zu/%zu", done, all);
    if (done == all) std::fprintf(stderr, "\n");
  };
}

std::string file_base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

LoadedSnapshot load_input(const std::string& path) {
  struct stat info {};
  const bool show_progress = ::isatty(STDERR_FILENO) == 1 && ::stat(path.c_str(), &info) == 0 &&
                             info.st_size >= kProgressFromBytes;
  const auto start = std::chrono::steady_clock::now();
  if (show_progress)
    std::fprintf(stderr, "memsnap: loading %s (%.1f MiB)...", path.c_str(),
                 static_cast<double>(info.st_size) / (1 << 20));
  Result<LoadedSnapshot> loaded = load_snapshot(path);
  if (show_progress) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, loaded ? " %.2f s\n" : " failed\n", seconds);
  }
  if (!loaded) throw CommandError(loaded.error());
  return std::move(loaded).value();
}

void require_device(const LoadedSnapshot& input, const std::string& path, std::optional<int64_t> device) {
  if (!device) return;
  const std::string error = missing_device_error(input.snapshot, *device);
  if (!error.empty()) throw CommandError(path + ": " + error);
}

}  // namespace memsnap::cli
