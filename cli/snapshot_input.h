// Loading a command's input snapshot: any format memsnap reads, a one-line error naming the
// file otherwise, and progress on stderr for big files when a person is watching.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "snapshot/snapshot_loader.h"

namespace memsnap::cli {

LoadedSnapshot load_input(const std::string& path);
// Throws CommandError naming the file when `device` is given and the snapshot has no such device.
void require_device(const LoadedSnapshot& input, const std::string& path, std::optional<int64_t> device);
// A progress line on stderr ("memsnap: reading snapshots 450/1000") for commands that read many
// files, when a person is watching and there are enough files to wait for; else nothing.
std::function<void(size_t done, size_t total)> files_progress(size_t total);
// The file name without its folders, for titles.
std::string file_base_name(const std::string& path);

}  // namespace memsnap::cli
