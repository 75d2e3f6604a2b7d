// Renders snapshot replays: recorded vs replayed side by side for people, one JSON object
// for programs, and a table when several settings were replayed (--compare-configs).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replay/snapshot_replay.h"

namespace memsnap {

nlohmann::json snapshot_replay_to_json(const SnapshotReplay& replay);
std::string snapshot_replay_to_text(const SnapshotReplay& replay, const std::string& source_name);

// `labels[i]` names `replays[i]` in the table's first column.
nlohmann::json replay_comparison_to_json(const std::vector<SnapshotReplay>& replays,
                                         const std::vector<std::string>& labels);
std::string replay_comparison_to_text(const std::vector<SnapshotReplay>& replays,
                                      const std::vector<std::string>& labels,
                                      const std::string& source_name);

}  // namespace memsnap
