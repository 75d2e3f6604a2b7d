#include "snapshot/snapshot_files.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace memsnap {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool has_snapshot_extension(const std::string& name) {
  std::string base = name;
  std::transform(base.begin(), base.end(), base.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ends_with(base, ".gz")) base.resize(base.size() - 3);
  for (const char* extension : {".msgpack", ".json", ".pickle", ".pkl"})
    if (ends_with(base, extension) && base.size() > std::char_traits<char>::length(extension)) return true;
  return false;
}

Result<std::vector<std::string>> expand_snapshot_paths(const std::vector<std::string>& paths) {
  using R = Result<std::vector<std::string>>;
  std::vector<std::string> files;
  for (const std::string& path : paths) {
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (error || !fs::exists(status)) return R::failure(path + ": no such file or folder");
    if (!fs::is_directory(status)) {
      files.push_back(path);
    } else {
      std::vector<std::string> found;
      fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, error);
      if (error) return R::failure(path + ": cannot list (" + error.message() + ")");
      for (; it != fs::recursive_directory_iterator(); it.increment(error)) {
        if (error) return R::failure(path + ": cannot list (" + error.message() + ")");
        if (it.depth() >= kSnapshotSearchMaxDepth) it.disable_recursion_pending();
        std::error_code entry_error;
        if (!it->is_regular_file(entry_error) || !has_snapshot_extension(it->path().filename().string())) continue;
        found.push_back(it->path().string());
        if (files.size() + found.size() > kSnapshotSearchMaxFiles)
          return R::failure(path + ": more than " + std::to_string(kSnapshotSearchMaxFiles) + " snapshot files");
      }
      if (found.empty())
        return R::failure(path + ": no snapshot files in this folder (.msgpack, .json, .pickle, .pkl, or .gz of them)");
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    }
    if (files.size() > kSnapshotSearchMaxFiles)
      return R::failure("more than " + std::to_string(kSnapshotSearchMaxFiles) + " snapshot files");
  }
  return files;
}

}  // namespace memsnap
