// Writing snapshots to disk, whole or not at all (snapshot/output_file.h: a temporary file
// made exclusively in the same folder, then renamed), so a crash or a full disk mid-write never
// leaves half a snapshot under the final name.
// And the one-call hook that writes a snapshot whenever the allocator runs out of memory.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "allocator/caching_allocator.h"
#include "history/history_recorder.h"
#include "snapshot/byte_sink.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_builder.h"

namespace memsnap {

// Writes `bytes` to `path` atomically (a temporary file renamed into place: a reader never
// sees part of a file); returns a one-line error on failure. The file is not forced to disk
// (no fsync), as PyTorch's _dump_snapshot and torch.save do not: on a cluster's network
// file system that wait can take seconds, and a snapshot is read back, not kept safe
// through a power cut.
std::optional<std::string> write_file_atomically(const std::string& path, const std::string& bytes);
// The same for a file written a piece at a time: `write` hands its pieces to the sink it is
// given (after a failed write the rest are dropped, and the error is returned).
std::optional<std::string> write_file_atomically(const std::string& path,
                                                 const std::function<void(const ByteSink&)>& write);

// Writes `snapshot` to `path` (atomically): as PyTorch's snapshot pickle when the path ends in
// ".pickle" (snapshot/pytorch_pickle_writer.h), else as memsnap's msgpack. Returns a one-line
// error on failure.
std::optional<std::string> write_snapshot_file(const Snapshot& snapshot, const std::string& path);

// Takes a snapshot and writes it to `path`: as PyTorch's snapshot pickle when the path ends in
// ".pickle" (snapshot/pytorch_pickle_writer.h), else as memsnap's msgpack. Returns a one-line
// error on failure.
std::optional<std::string> dump_snapshot(CachingAllocator& allocator, HistoryRecorder* recorder,
                                         const std::string& path,
                                         const SnapshotOptions& options = {});
// The same, always as PyTorch's snapshot pickle (torch.cuda.memory._dump_snapshot's file,
// whatever its name ends in).
std::optional<std::string> dump_pytorch_pickle(CachingAllocator& allocator, HistoryRecorder* recorder,
                                               const std::string& path,
                                               const SnapshotOptions& options = {});

// From now on, every out-of-memory error first writes a snapshot to a path made from
// `pattern`: its placeholders (expand_dump_path) are filled in. The snapshot is taken from the
// OOM observer, which runs without the allocator's lock and allocates no device memory.
// Where the files will go is checked now (the first file's name, with {n} = 1 and device 0:
// its folder must exist and be writable): a one-line error, and no hook, if it cannot be
// written. Later failures to write go to stderr as one line, and so does a snapshot that
// replaces an earlier error's (a pattern without {n}); the allocation still fails with its
// OutOfMemoryError. The hook stays for the allocator's lifetime; `recorder` (if given) may be
// destroyed before the allocator: snapshots taken after that have no history (and its
// destructor waits for a snapshot being taken).
[[nodiscard]] std::optional<std::string> dump_snapshot_on_oom(CachingAllocator& allocator, HistoryRecorder* recorder,
                                                              std::string pattern, SnapshotOptions options = {});

// Why snapshots could not be written where `pattern` says (its first file: {n} = 1, device 0),
// checked now without creating anything; nullopt if they could.
std::optional<std::string> dump_pattern_problem(const std::string& pattern, const SnapshotOptions& options = {});

// The line reporting an out-of-memory snapshot written to `path`, which says so when it
// replaced the snapshot of an earlier error (a pattern without {n}).
std::string oom_dump_written_line(const std::string& path, bool replaced);

// `pattern` with its placeholders filled in: "{pid}", "{device}", "{n}" (`count`: dumps by this
// process, from 1), "{host}" (the host name), "{rank}" and "{local_rank}" (the job place of
// `options`, completed from the environment; 0 in a process that is not part of a job).
std::string expand_dump_path(const std::string& pattern, int device, uint64_t count,
                             const SnapshotOptions& options = {});

}  // namespace memsnap
