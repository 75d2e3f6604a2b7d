#include "snapshot/snapshot_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string_view>

#include "snapshot/msgpack_writer.h"
#include "snapshot/pytorch_pickle_writer.h"

namespace memsnap {
namespace {

std::string system_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

}  // namespace

std::optional<std::string> write_file_atomically(const std::string& path,
                                                 const std::function<void(const ByteSink&)>& write) {
  // Unique per call, so threads dumping to the same path never share a temporary file.
  static std::atomic<uint64_t> writes{0};
  const std::string temporary =
      path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(++writes);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return system_error("cannot create", temporary);
  std::optional<std::string> error;  // the first failed write; later pieces are dropped
  try {
    write([&](std::string_view piece) {
      size_t written = 0;
      while (!error && written < piece.size()) {
        const ssize_t n = ::write(fd, piece.data() + written, piece.size() - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) error = system_error("cannot write", temporary);
        else written += static_cast<size_t>(n);
      }
    });
  } catch (...) {  // the producer failed (out of memory): no descriptor or half file left behind
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  if (::close(fd) != 0 && !error) error = system_error("cannot flush", temporary);
  if (!error && ::rename(temporary.c_str(), path.c_str()) != 0) error = system_error("cannot rename to", path);
  if (error) ::unlink(temporary.c_str());
  return error;
}

std::optional<std::string> write_file_atomically(const std::string& path, const std::string& bytes) {
  return write_file_atomically(path, [&](const ByteSink& sink) { sink(bytes); });
}

namespace {

// Writes the snapshot's file a piece at a time: the file is never held whole.
std::optional<std::string> write_as(const Snapshot& snapshot, const std::string& path, bool pickle) {
  return write_file_atomically(path, [&](const ByteSink& sink) {
    if (pickle) write_pytorch_pickle(snapshot, sink);
    else write_msgpack(snapshot, sink);
  });
}

}  // namespace

std::optional<std::string> write_snapshot_file(const Snapshot& snapshot, const std::string& path) {
  try {
    return write_as(snapshot, path, path.ends_with(".pickle"));
  } catch (const std::exception& error) {
    return "cannot write a snapshot to " + path + ": " + error.what();
  }
}

namespace {

std::optional<std::string> dump_as(CachingAllocator& allocator, HistoryRecorder* recorder,
                                   const std::string& path, const SnapshotOptions& options, bool pickle) {
  try {
    const Snapshot snapshot = take_snapshot(allocator, recorder, options);
    return write_as(snapshot, path, pickle);
  } catch (const std::exception& error) {
    return "cannot take a snapshot for " + path + ": " + error.what();
  }
}

}  // namespace

std::optional<std::string> dump_snapshot(CachingAllocator& allocator, HistoryRecorder* recorder,
                                         const std::string& path, const SnapshotOptions& options) {
  const bool pickle = path.ends_with(".pickle");
  return dump_as(allocator, recorder, path, options, pickle);
}

std::optional<std::string> dump_pytorch_pickle(CachingAllocator& allocator, HistoryRecorder* recorder,
                                               const std::string& path, const SnapshotOptions& options) {
  return dump_as(allocator, recorder, path, options, true);
}

std::string expand_dump_path(const std::string& pattern, int device, uint64_t count,
                             const SnapshotOptions& options) {
  std::string path = pattern;
  const ProcessInfo process = current_process(options.job);
  std::string host = process.host;
  for (char& c : host)
    if (c == '/') c = '_';
  replace_all(path, "{pid}", std::to_string(process.pid));
  replace_all(path, "{host}", host);
  replace_all(path, "{rank}", std::to_string(process.rank.value_or(0)));
  replace_all(path, "{local_rank}", std::to_string(process.local_rank.value_or(0)));
  replace_all(path, "{device}", std::to_string(device));
  replace_all(path, "{n}", std::to_string(count));
  return path;
}

void dump_snapshot_on_oom(CachingAllocator& allocator, HistoryRecorder* recorder,
                          std::string pattern, SnapshotOptions options) {
  auto dumps = std::make_shared<std::atomic<uint64_t>>(0);
  allocator.add_oom_observer([&allocator, recorder, pattern = std::move(pattern),
                              options = std::move(options), dumps](const OomInfo& info) {
    const std::string path = expand_dump_path(pattern, info.device, ++*dumps, options);
    SnapshotOptions at_error = options;
    at_error.oom = info;
    if (auto error = dump_snapshot(allocator, recorder, path, at_error))
      std::fprintf(stderr, "memsnap: out of memory; snapshot not written: %s\n", error->c_str());
    else
      std::fprintf(stderr, "memsnap: out of memory; snapshot written to %s\n", path.c_str());
  });
}

}  // namespace memsnap
