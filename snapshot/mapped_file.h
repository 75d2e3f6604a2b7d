// A file mapped read-only into memory, safe against the file being cut short meanwhile.
// torch's _dump_snapshot rewrites a file in place (truncate, then write), so a snapshot can
// shrink under a reader; touching a mapped page past the new end raises SIGBUS, which
// would end the process. Here a process-wide SIGBUS handler (installed on the first
// mapping, passing every other SIGBUS on) maps zero pages over the rest of the mapping and
// marks it changed: the reader sees zeros, fails, and changed() says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace memsnap {

class MappedFile {
 public:
  // `bytes` of the open file `fd` (kept open by the caller while this lives) from its start;
  // null when it cannot be mapped (the caller reads the file instead).
  static std::unique_ptr<MappedFile> map(int fd, size_t bytes);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }
  // Whether the file is shorter now than when it was mapped: the pages past its end read as
  // zeros (and the rest of the last page always did).
  bool changed() const;
  // Lets the pages wholly within [begin, end) go: read again, they come back from the page
  // cache. Thread-safe.
  void release(uint64_t begin, uint64_t end) const;

 private:
  MappedFile(int fd, void* data, size_t size, size_t slot) : fd_(fd), data_(data), size_(size), slot_(slot) {}
  int fd_;
  void* data_;
  size_t size_;
  size_t slot_;  // in the table the SIGBUS handler reads
};

}  // namespace memsnap
