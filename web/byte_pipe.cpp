#include "web/byte_pipe.h"

#include <algorithm>
#include <cstring>

namespace memsnap::web {

void BytePipe::write(const char* data, size_t size) {
  std::unique_lock lock(mutex_);
  // A chunk bigger than the whole pipe still goes in once the pipe is empty.
  changed_.wait(lock, [&] { return reader_gone_ || held_ == 0 || held_ + size <= capacity_; });
  if (reader_gone_ || size == 0) return;
  chunks_.emplace_back(data, size);
  held_ += size;
  changed_.notify_all();
}

void BytePipe::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  changed_.notify_all();
}

size_t BytePipe::read(uint8_t* out, size_t capacity) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return held_ > 0 || closed_; });
  size_t copied = 0;
  while (copied < capacity && !chunks_.empty()) {
    const std::string& chunk = chunks_.front();
    const size_t n = std::min(capacity - copied, chunk.size() - front_offset_);
    std::memcpy(out + copied, chunk.data() + front_offset_, n);
    copied += n;
    front_offset_ += n;
    if (front_offset_ == chunk.size()) {
      chunks_.pop_front();
      front_offset_ = 0;
    }
  }
  held_ -= copied;
  changed_.notify_all();
  return copied;
}

void BytePipe::stop_reading() {
  std::lock_guard lock(mutex_);
  reader_gone_ = true;
  chunks_.clear();
  held_ = 0;
  front_offset_ = 0;
  changed_.notify_all();
}

}  // namespace memsnap::web
