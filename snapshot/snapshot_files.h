// Which files a command line names: files as given, and folders searched for snapshots (a job
// writes one file per rank, often one folder per host or rank).
#pragma once

#include <string>
#include <vector>

#include "allocator/result.h"

namespace memsnap {

// Whether a file name looks like a snapshot: .msgpack, .json, .pickle or .pkl, each possibly
// with .gz after it (not .pt: a folder of rank snapshots often holds checkpoints too).
bool has_snapshot_extension(const std::string& name);

// Files stay as they are; a folder gives the snapshot files in it and in its subfolders down
// to kSnapshotSearchMaxDepth levels (symbolic links to folders not followed), sorted. Fails on a path that does not exist, a
// folder that holds no snapshot, or more than kMaxFiles files in all.
Result<std::vector<std::string>> expand_snapshot_paths(const std::vector<std::string>& paths);

inline constexpr int kSnapshotSearchMaxDepth = 4;
inline constexpr size_t kSnapshotSearchMaxFiles = 200000;

}  // namespace memsnap
