// Writes a Snapshot in memsnap's msgpack format (FORMAT.md beside this file).
#pragma once

#include <string>

#include "snapshot/snapshot.h"

namespace memsnap {

std::string to_msgpack(const Snapshot& snapshot);

}  // namespace memsnap
