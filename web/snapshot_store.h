// The snapshots a `memsnap serve` session holds: loaded once (from the command line or an
// upload), shared read-only by every request thread, with their rendered API responses kept in
// one cache bounded in bytes (response_cache.h) so a big snapshot's analyses run once, not per
// request.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "allocator/result.h"
#include "snapshot/snapshot_loader.h"
#include "web/rendered_body.h"
#include "web/response_cache.h"

namespace memsnap::web {

struct StoredSnapshot {
  StoredSnapshot() = default;
  ~StoredSnapshot();  // drops its responses from the cache
  StoredSnapshot(const StoredSnapshot&) = delete;
  StoredSnapshot& operator=(const StoredSnapshot&) = delete;

  std::string id;    // decimal, never reused in a session
  std::string name;  // file base name, or what the uploader called it
  uint64_t file_bytes = 0;
  LoadedSnapshot loaded;
  uint64_t trace_events = 0;
  bool has_oom = false;
  // Where its rendered responses are kept: the store's, shared by every snapshot it holds and
  // bounded in bytes; a snapshot made on its own has its own.
  std::shared_ptr<ResponseCache> response_cache = std::make_shared<ResponseCache>();

  // The response for `key`, made by `render` the first time (ResponseCache::get): odd query
  // strings cannot grow memory past the cache's budget.
  Body cached(const std::string& key, const std::function<std::string()>& render) const {
    return response_cache->get(this, key, render);
  }
};

// How the server reads a pickle it is given or sent: on as many threads as the cores and the
// file's size allow, less one core left to the browser, which usually runs beside it.
PickleReadOptions server_pickle_reads();

// A file the server was given that it could not open, and why.
struct UnopenedFile {
  std::string file;
  std::string error;  // one line, naming the file
};

class SnapshotStore {
 public:
  explicit SnapshotStore(size_t max_snapshots, uint64_t cache_budget_bytes = ResponseCache::kDefaultBudgetBytes)
      : max_snapshots_(max_snapshots), cache_(std::make_shared<ResponseCache>(cache_budget_bytes)) {}

  // Keeps a parsed snapshot; nothing (null) when the store already holds max_snapshots.
  std::shared_ptr<const StoredSnapshot> keep(std::string name, uint64_t file_bytes, LoadedSnapshot loaded);
  // Loads a file (any format memsnap reads) and keeps it, named `name` or else by the file's
  // base name; the error names the file.
  Result<std::shared_ptr<const StoredSnapshot>> add_file(const std::string& path, std::string name = "");

  std::shared_ptr<const StoredSnapshot> find(const std::string& id) const;
  bool remove(const std::string& id);
  std::vector<std::shared_ptr<const StoredSnapshot>> list() const;  // oldest first
  // The files given on the command line that could not be opened: listed, not fatal.
  void note_unopened(UnopenedFile file);
  std::vector<UnopenedFile> unopened() const;
  size_t max_snapshots() const { return max_snapshots_; }
  const ResponseCache& response_cache() const { return *cache_; }
  bool full() const;

 private:
  static std::optional<uint64_t> parse_id(const std::string& id);

  const size_t max_snapshots_;
  const std::shared_ptr<ResponseCache> cache_;
  mutable std::mutex mutex_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::shared_ptr<const StoredSnapshot>> snapshots_;
  std::vector<UnopenedFile> unopened_;
};

}  // namespace memsnap::web
