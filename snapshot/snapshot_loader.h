// Loads a snapshot in any format memsnap reads, told apart by content rather than by file
// name: memsnap's msgpack, memsnap's (or PyTorch-shaped) JSON, and PyTorch's pickles, each
// possibly gzip-compressed.
#pragma once

#include <string>
#include <string_view>

#include "allocator/result.h"
#include "snapshot/byte_source.h"
#include "snapshot/pytorch_snapshot_reader.h"
#include "snapshot/snapshot.h"

namespace memsnap {

enum class SnapshotFormat { kMsgpack, kJson, kPickle };
std::string_view snapshot_format_name(SnapshotFormat format);

// The most (decompressed) bytes read of each format. msgpack is parsed where it lies, and a
// pickle is read on threads from a mapping of its file: 2 GiB (kMaxSnapshotFileBytes). JSON is
// parsed as it is read, in memory bounded by what it describes (read_budget.h), so its limit
// only bounds the time a read takes: `memsnap convert` writes JSON of several times a
// snapshot's msgpack size, and memsnap reads it back.
inline constexpr uint64_t kMaxJsonSnapshotBytes = uint64_t{16} << 30;
uint64_t max_snapshot_bytes(SnapshotFormat format);

struct LoadedSnapshot {
  Snapshot snapshot;
  SnapshotFormat format = SnapshotFormat::kMsgpack;
  bool compressed = false;
};

// `pickle`: how a PyTorch pickle is read (its threads).
Result<LoadedSnapshot> load_snapshot(const std::string& path, const PickleReadOptions& pickle = {});
// From a source already opened; `name` (a path, or empty) begins each error.
Result<LoadedSnapshot> load_snapshot_from(ByteSource& source, const std::string& name,
                                          const PickleReadOptions& pickle = {});
Result<LoadedSnapshot> load_snapshot_from_memory(std::string_view bytes, const PickleReadOptions& pickle = {});
// From bytes handed out in turn (ByteSource::over_pull), parsed as they come: an upload is read
// while it arrives and never held whole. `size_hint`: the total when known, else 0.
Result<LoadedSnapshot> load_snapshot_streamed(ByteSource::Pull pull, uint64_t size_hint);
// Whether `bytes` bytes that begin with `first_byte` would be read on several threads if they
// were held whole (a plain pickle, large enough, on a machine with the cores): bytes that
// arrive in turn (an upload) are read faster gathered first than parsed on one thread as
// they come.
bool reads_faster_whole(int first_byte, uint64_t bytes, const PickleReadOptions& pickle);

}  // namespace memsnap
