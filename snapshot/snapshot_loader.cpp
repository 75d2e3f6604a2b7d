#include "snapshot/snapshot_loader.h"

#include <algorithm>

#include "snapshot/byte_source.h"
#include "snapshot/msgpack_reader.h"
#include "snapshot/pytorch_parallel_read.h"
#include "snapshot/pytorch_snapshot_reader.h"
#include "snapshot/read_budget.h"
#include "snapshot/snapshot_checks.h"
#include "snapshot/trace_history.h"

namespace memsnap {
namespace {

std::optional<SnapshotFormat> detect(int first_byte) {
  if (first_byte == 0x80) return SnapshotFormat::kPickle;  // PROTO: pickle protocol 2 or later
  if ((first_byte > 0x80 && first_byte <= 0x8f) || first_byte == 0xde || first_byte == 0xdf)
    return SnapshotFormat::kMsgpack;  // a map (memsnap files are maps)
  switch (first_byte) {
    case '{': case '[': case ' ': case '\t': case '\r': case '\n': return SnapshotFormat::kJson;
    case '(': case ']': case '}': return SnapshotFormat::kPickle;  // protocols 0 and 1
    default: return std::nullopt;
  }
}

// A plain file is read where it is mapped, its pages let go behind the reader (a 3M-event
// file is never held whole); compressed or streamed input is gathered first.
Result<Snapshot> msgpack_from(ByteSource& source) {
  const std::optional<std::string_view> whole = source.whole();
  if (!whole) {
    const HeldBytes bytes = source.read_rest();
    return snapshot_from_msgpack(bytes.view());
  }
  Result<Snapshot> read =
      snapshot_from_msgpack(*whole, [&](uint64_t begin, uint64_t end) { source.release_whole(begin, end); });
  if (source.changed_while_read())
    return Result<Snapshot>::failure(ByteSource::kChangedWhileRead);
  return read;
}

std::string gib(uint64_t bytes) { return std::to_string(bytes >> 30) + " GiB"; }

// What to do about input over the limit of its format.
std::string over_the_limit(SnapshotFormat format, uint64_t limit) {
  std::string message = "larger than memsnap reads (" + gib(limit) + " of " +
                        std::string(snapshot_format_name(format)) + ", after decompression)";
  if (format == SnapshotFormat::kJson)
    message += "; memsnap's msgpack holds the same snapshot in a fraction of the bytes: convert the "
               "snapshot this JSON was made from with `memsnap convert SNAPSHOT OUT.msgpack`";
  return message;
}

}  // namespace

uint64_t max_snapshot_bytes(SnapshotFormat format) {
  return format == SnapshotFormat::kJson ? kMaxJsonSnapshotBytes : kMaxSnapshotFileBytes;
}

Result<LoadedSnapshot> load_snapshot_from(ByteSource& source, const std::string& name,
                                          const PickleReadOptions& pickle) {
  auto failure = [&](const std::string& message) {
    return Result<LoadedSnapshot>::failure(name.empty() ? message : name + ": " + message);
  };
  try {
    const int first = source.peek();
    if (first < 0) return failure("empty file");
    const auto format = detect(first);
    if (!format)
      return failure("not a snapshot (neither memsnap msgpack or JSON nor a PyTorch pickle)");
    // Opened with the largest format's limit: the others get theirs now.
    const uint64_t limit = std::min(max_snapshot_bytes(*format), source.max_bytes());
    if (!source.limit_to(limit)) return failure(over_the_limit(*format, limit));
    Result<Snapshot> read = Result<Snapshot>::failure("");
    switch (*format) {
      case SnapshotFormat::kPickle: read = snapshot_from_pickle(source, pickle); break;
      case SnapshotFormat::kMsgpack: read = msgpack_from(source); break;
      case SnapshotFormat::kJson: read = snapshot_from_json(source); break;
    }
    if (source.hit_limit()) return failure(over_the_limit(*format, limit));
    if (!read) return failure(read.error());
    if (const std::optional<std::string> problem = check_snapshot(read.value()))
      return failure("inconsistent snapshot: " + *problem);
    // PyTorch's snapshots keep no per-block history: the trace has it.
    if (read.value().source == "pytorch") add_history_from_trace(read.value());
    return LoadedSnapshot{std::move(read).value(), *format, source.compressed()};
  } catch (const std::bad_alloc&) {
    return failure(kNotEnoughMemoryToRead);
  } catch (const std::exception& error) {  // unreadable file, damaged compression
    return failure(error.what());
  }
}

std::string_view snapshot_format_name(SnapshotFormat format) {
  switch (format) {
    case SnapshotFormat::kMsgpack: return "msgpack";
    case SnapshotFormat::kJson: return "json";
    case SnapshotFormat::kPickle: return "pickle";
  }
  return "?";
}

Result<LoadedSnapshot> load_snapshot(const std::string& path, const PickleReadOptions& pickle) {
  auto source = ByteSource::open_file(path, kMaxJsonSnapshotBytes);
  if (!source) return Result<LoadedSnapshot>::failure(source.error());
  return load_snapshot_from(*source.value(), path, pickle);
}

Result<LoadedSnapshot> load_snapshot_from_memory(std::string_view bytes, const PickleReadOptions& pickle) {
  auto source = ByteSource::over_memory(bytes, kMaxJsonSnapshotBytes);
  return load_snapshot_from(*source, "", pickle);
}

Result<LoadedSnapshot> load_snapshot_streamed(ByteSource::Pull pull, uint64_t size_hint) {
  // (An upload's JSON is held to the smaller limit: a server's thread is not to inflate 16 GiB.)
  auto source = ByteSource::over_pull(std::move(pull), size_hint, kMaxSnapshotFileBytes);
  return load_snapshot_from(*source, "");
}

bool reads_faster_whole(int first_byte, uint64_t bytes, const PickleReadOptions& pickle) {
  return detect(first_byte) == SnapshotFormat::kPickle && bytes <= kMaxSnapshotFileBytes && reads_in_parallel(bytes, pickle);
}

}  // namespace memsnap
