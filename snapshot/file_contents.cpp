#include "snapshot/file_contents.h"

#include <fstream>

#include "allocator/device_stats.h"

namespace memsnap {

Result<std::string> read_file_contents(const std::string& path, size_t max_bytes) {
  using R = Result<std::string>;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return R::failure(path + ": cannot open file");
  const std::streamoff size = in.tellg();
  if (size < 0) return R::failure(path + ": cannot read file (not a regular file?)");
  if (static_cast<uint64_t>(size) > max_bytes)
    return R::failure(path + ": larger than " + format_bytes(static_cast<int64_t>(max_bytes)) +
                      ", the most this reader accepts");
  std::string contents(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(contents.data(), size)) return R::failure(path + ": read error");
  return contents;
}

}  // namespace memsnap
