// Loading a command's input snapshot: any format memsnap reads, a one-line error naming the
// file otherwise, and progress on stderr for big files when a person is watching.
#pragma once

#include <string>

#include "snapshot/snapshot_loader.h"

namespace memsnap::cli {

LoadedSnapshot load_input(const std::string& path);

}  // namespace memsnap::cli
