// A bounded pipe of bytes between two threads: an upload's request thread writes the body as
// it arrives and a parser reads it (ByteSource::over_pull), so a snapshot is parsed while it is
// still coming and its bytes are never all held at once.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

namespace memsnap::web {

class BytePipe {
 public:
  explicit BytePipe(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Writer: waits while the pipe is full. Once the reader has stopped, the bytes are dropped.
  void write(const char* data, size_t size);
  // Writer: no more bytes; the reader sees the end once it has read what is in the pipe.
  void close();

  // Reader: waits for bytes; copies up to `capacity`, 0 at the end.
  size_t read(uint8_t* out, size_t capacity);
  // Reader: reads nothing more (the parse ended); the writer's bytes are dropped from now on.
  void stop_reading();

 private:
  const size_t capacity_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> chunks_;
  size_t front_offset_ = 0;  // bytes of chunks_.front() already read
  size_t held_ = 0;          // bytes in chunks_ not yet read
  bool closed_ = false;
  bool reader_gone_ = false;
};

}  // namespace memsnap::web
