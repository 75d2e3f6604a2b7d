// Loading a command's input snapshot: any format memsnap reads, a one-line error naming the
// file otherwise, and progress on stderr for big files when a person is watching.
#pragma once

#include <string>

#include "snapshot/snapshot_loader.h"

namespace memsnap::cli {

LoadedSnapshot load_input(const std::string& path);
// The file name without its folders, for titles.
std::string file_base_name(const std::string& path);

}  // namespace memsnap::cli
