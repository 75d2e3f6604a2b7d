#include "snapshot/snapshot_file.h"

#include <cstdio>
#include <functional>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string_view>

#include "snapshot/msgpack_writer.h"
#include "snapshot/output_file.h"
#include "snapshot/pytorch_pickle_writer.h"

namespace memsnap {
namespace {

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

}  // namespace

std::optional<std::string> write_file_atomically(const std::string& path,
                                                 const std::function<void(const ByteSink&)>& write) {
  Result<OutputFile> file = OutputFile::create(path);
  if (!file) return file.error();
  write([&](std::string_view piece) { file.value().write(piece); });  // a throw removes the temporary
  return file.value().finish();
}

std::optional<std::string> write_file_atomically(const std::string& path, const std::string& bytes) {
  return write_file_atomically(path, [&](const ByteSink& sink) { sink(bytes); });
}

namespace {

// Writes the snapshot's file a piece at a time: the file is never held whole.
void write_as(const Snapshot& snapshot, OutputFile& file, bool pickle) {
  const ByteSink sink = [&](std::string_view piece) { file.write(piece); };
  if (pickle) write_pytorch_pickle(snapshot, sink);
  else write_msgpack(snapshot, sink);
}

}  // namespace

std::optional<std::string> write_snapshot_file(const Snapshot& snapshot, const std::string& path) {
  Result<OutputFile> file = OutputFile::create(path);
  if (!file) return file.error();
  try {
    write_as(snapshot, file.value(), path.ends_with(".pickle"));
  } catch (const std::exception& error) {
    return "cannot write a snapshot to " + path + ": " + error.what();
  }
  return file.value().finish();
}

namespace {

// The file is made first: a path that cannot be written fails before the snapshot is taken.
std::optional<std::string> dump_as(CachingAllocator& allocator, HistoryRecorder* recorder,
                                   const std::string& path, const SnapshotOptions& options, bool pickle) {
  Result<OutputFile> file = OutputFile::create(path);
  if (!file) return file.error();
  try {
    const Snapshot snapshot = take_snapshot(allocator, recorder, options);
    write_as(snapshot, file.value(), pickle);
  } catch (const std::exception& error) {
    return "cannot take a snapshot for " + path + ": " + error.what();
  }
  return file.value().finish();
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

std::optional<std::string> dump_pattern_problem(const std::string& pattern, const SnapshotOptions& options) {
  if (pattern.empty()) return "no file name given for the snapshot";
  return output_path_problem(expand_dump_path(pattern, 0, 1, options));
}

std::string oom_dump_written_line(const std::string& path, bool replaced) {
  std::string line = "memsnap: out of memory; snapshot written to " + path;
  if (replaced)
    line += " (replacing the snapshot of an earlier out-of-memory error: put {n} in the pattern to keep each)";
  return line;
}

std::optional<std::string> dump_snapshot_on_oom(CachingAllocator& allocator, HistoryRecorder* recorder,
                                                std::string pattern, SnapshotOptions options) {
  if (auto problem = dump_pattern_problem(pattern, options)) return problem;
  struct Dumps {
    std::mutex mutex;
    uint64_t count = 0;
    std::set<std::string> written;  // one name per error at most: bounded by the errors
  };
  auto dumps = std::make_shared<Dumps>();
  std::shared_ptr<HistoryRecorder::Lifetime> life = recorder != nullptr ? recorder->lifetime() : nullptr;
  allocator.add_oom_observer([&allocator, recorder, life, pattern = std::move(pattern),
                              options = std::move(options), dumps](const OomInfo& info) {
    // A recorder destroyed before the allocator is left out (the snapshot has no history).
    std::shared_lock<std::shared_mutex> using_recorder;
    if (life) using_recorder = std::shared_lock(life->mutex);
    HistoryRecorder* live = life && life->alive ? recorder : nullptr;
    std::string path;
    {
      std::lock_guard lock(dumps->mutex);
      path = expand_dump_path(pattern, info.device, ++dumps->count, options);
    }
    SnapshotOptions at_error = options;
    at_error.oom = info;
    if (auto error = dump_snapshot(allocator, live, path, at_error)) {
      std::fprintf(stderr, "memsnap: out of memory; snapshot not written: %s\n", error->c_str());
      return;
    }
    bool replaced = false;
    {
      std::lock_guard lock(dumps->mutex);
      replaced = !dumps->written.insert(path).second;
    }
    std::fprintf(stderr, "%s\n", oom_dump_written_line(path, replaced).c_str());
  });
  return std::nullopt;
}

}  // namespace memsnap
