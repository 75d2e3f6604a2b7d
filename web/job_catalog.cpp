#include "web/job_catalog.h"

#include "web/cached_views.h"

namespace memsnap::web {

JobCatalog::JobCatalog(SnapshotStore& store, JobRanks job)
    : store_(store), job_(std::move(job)), table_json_(std::make_shared<const RenderedBody>(json_body(job_ranks_to_json(job_)))) {}

std::string JobCatalog::rank_json(size_t row) const {
  nlohmann::json out = rank_summary_to_json(job_.ranks.at(row));
  out["row"] = row;
  out["id"] = nullptr;
  std::lock_guard lock(mutex_);
  for (const auto& [opened_row, id] : opened_)
    if (opened_row == row && store_.find(id)) out["id"] = id;
  return json_body(out);
}

void JobCatalog::note_open(const std::string& file, const std::string& id) {
  std::lock_guard lock(mutex_);
  for (size_t row = 0; row < job_.ranks.size(); ++row)
    if (job_.ranks[row].file == file) opened_.emplace_back(row, id);
}

Result<std::shared_ptr<const StoredSnapshot>> JobCatalog::open(size_t row) {
  using R = Result<std::shared_ptr<const StoredSnapshot>>;
  if (row >= job_.ranks.size()) return R::failure("no rank row " + std::to_string(row));
  std::lock_guard lock(mutex_);
  // Already open (and not closed from the page since)?
  for (auto it = opened_.begin(); it != opened_.end(); ++it) {
    if (it->first != row) continue;
    if (auto stored = store_.find(it->second)) {
      auto entry = *it;
      opened_.erase(it);
      opened_.push_back(entry);  // most recently used last
      return stored;
    }
    opened_.erase(it);
    break;
  }
  // Make room by closing the ranks this catalog opened, oldest first.
  while (store_.full() && !opened_.empty()) {
    store_.remove(opened_.front().second);
    opened_.pop_front();
  }
  const RankSummary& rank = job_.ranks[row];
  std::string name = rank.file.substr(rank.file.find_last_of('/') == std::string::npos ? 0 : rank.file.find_last_of('/') + 1);
  if (rank.rank) name = "rank " + std::to_string(*rank.rank) + " · " + name;
  R added = store_.add_file(rank.file, name);
  if (!added) return added;
  opened_.emplace_back(row, added.value()->id);
  return added;
}

}  // namespace memsnap::web
