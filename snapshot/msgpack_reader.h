// Reads memsnap's msgpack snapshot format (FORMAT.md), trusting nothing: every type,
// length and table index is checked, and a damaged or hostile file gives one clear error
// naming where it went wrong. Memory stays proportional to the input: no length field can
// make the reader allocate more than the bytes behind it could fill.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "allocator/result.h"
#include "snapshot/snapshot.h"

namespace memsnap {

inline constexpr size_t kMaxSnapshotFileBytes = size_t{2} << 30;

// Lets the input's bytes in [begin, end) go: they will not be read again (a mapped file's pages).
using ReleaseBytes = std::function<void(uint64_t begin, uint64_t end)>;

Result<Snapshot> snapshot_from_msgpack(std::string_view bytes, const ReleaseBytes& release = {});
Result<Snapshot> read_msgpack_snapshot(const std::string& path);

}  // namespace memsnap
