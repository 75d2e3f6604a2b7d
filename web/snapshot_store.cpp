#include "web/snapshot_store.h"

#include <sys/stat.h>

#include "web/memory_release.h"

namespace memsnap::web {

StoredSnapshot::~StoredSnapshot() {
  if (response_cache) response_cache->forget(this);
}

PickleReadOptions server_pickle_reads() {
  // On two cores, reading on one thread painted the first view 7-17% sooner than on two
  // (bench/README.md, web_first_view.sh). With more cores than the threads a file is worth
  // (four, or one per 3 MiB), the reading threads are as many as without the spare core.
  PickleReadOptions read;
  read.spare_cores = 1;
  return read;
}

Result<std::shared_ptr<const StoredSnapshot>> SnapshotStore::add_file(const std::string& path, std::string name) {
  Result<LoadedSnapshot> loaded = load_snapshot(path, server_pickle_reads());
  if (!loaded) return Result<std::shared_ptr<const StoredSnapshot>>::failure(loaded.error());
  struct stat info {};
  const uint64_t file_bytes = ::stat(path.c_str(), &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
  const size_t slash = path.rfind('/');
  if (name.empty()) name = slash == std::string::npos ? path : path.substr(slash + 1);
  auto kept = keep(std::move(name), file_bytes, std::move(loaded).value());
  if (!kept)
    return Result<std::shared_ptr<const StoredSnapshot>>::failure(
        path + ": already holding " + std::to_string(max_snapshots_) + " snapshots (the limit)");
  return kept;
}

std::shared_ptr<const StoredSnapshot> SnapshotStore::keep(std::string name, uint64_t file_bytes, LoadedSnapshot loaded) {
  auto stored = std::make_shared<StoredSnapshot>();
  stored->name = std::move(name);
  stored->file_bytes = file_bytes;
  stored->loaded = std::move(loaded);
  stored->response_cache = cache_;
  for (const auto& trace : stored->loaded.snapshot.device_traces) {
    stored->trace_events += trace.size();
    for (const TraceEntry& e : trace) stored->has_oom |= e.action == TraceAction::kOom;
  }
  std::lock_guard lock(mutex_);
  if (snapshots_.size() >= max_snapshots_) return nullptr;
  const uint64_t id = next_id_++;
  stored->id = std::to_string(id);
  snapshots_.emplace(id, stored);
  return stored;
}

std::optional<uint64_t> SnapshotStore::parse_id(const std::string& id) {
  if (id.empty() || id.size() > 18 || id.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoull(id);
}

std::shared_ptr<const StoredSnapshot> SnapshotStore::find(const std::string& id) const {
  const auto key = parse_id(id);
  if (!key) return nullptr;
  std::lock_guard lock(mutex_);
  auto it = snapshots_.find(*key);
  return it == snapshots_.end() ? nullptr : it->second;
}

bool SnapshotStore::remove(const std::string& id) {
  const auto key = parse_id(id);
  if (!key) return false;
  std::shared_ptr<const StoredSnapshot> removed;
  {
    std::lock_guard lock(mutex_);
    auto it = snapshots_.find(*key);
    if (it == snapshots_.end()) return false;
    removed = std::move(it->second);
    snapshots_.erase(it);
  }
  // A loaded snapshot is many small allocations spread over the server threads' malloc arenas;
  // give the pages back so a long-running viewer's footprint follows what it holds.
  removed.reset();
  release_free_memory();
  return true;
}

bool SnapshotStore::full() const {
  std::lock_guard lock(mutex_);
  return snapshots_.size() >= max_snapshots_;
}

std::vector<std::shared_ptr<const StoredSnapshot>> SnapshotStore::list() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<const StoredSnapshot>> out;
  for (const auto& [id, stored] : snapshots_) out.push_back(stored);
  return out;
}

void SnapshotStore::note_unopened(UnopenedFile file) {
  std::lock_guard lock(mutex_);
  unopened_.push_back(std::move(file));
}

std::vector<UnopenedFile> SnapshotStore::unopened() const {
  std::lock_guard lock(mutex_);
  return unopened_;
}

}  // namespace memsnap::web
