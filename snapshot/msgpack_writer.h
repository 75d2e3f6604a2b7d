// Writes a Snapshot in memsnap's msgpack format (FORMAT.md beside this file).
#pragma once

#include <string>

#include "snapshot/byte_sink.h"
#include "snapshot/snapshot.h"

namespace memsnap {

// Writes the file a piece at a time to `sink`.
void write_msgpack(const Snapshot& snapshot, const ByteSink& sink);
std::string to_msgpack(const Snapshot& snapshot);

}  // namespace memsnap
