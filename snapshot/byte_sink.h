// Where a writer puts a document it writes a piece at a time (a file being written, a
// string): a large snapshot's file is never held whole in memory.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

namespace memsnap {

using ByteSink = std::function<void(std::string_view piece)>;

// Gathers small writes and hands them to a sink a MiB at a time; flush() hands over the rest.
class SinkBuffer {
 public:
  explicit SinkBuffer(const ByteSink& sink) : sink_(sink) {}
  void write(const char* data, size_t size) {
    buffer_.append(data, size);
    if (buffer_.size() >= kPiece) flush();
  }
  void write(std::string_view text) { write(text.data(), text.size()); }
  void flush() {
    if (buffer_.empty()) return;
    sink_(buffer_);
    buffer_.clear();
  }
  static constexpr size_t kPiece = size_t{1} << 20;

 private:
  const ByteSink& sink_;
  std::string buffer_;
};

}  // namespace memsnap
