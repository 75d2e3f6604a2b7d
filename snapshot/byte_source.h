// Sequential bytes of an input, for readers that stream: a file is read in chunks (never
// held whole, so a 26 MB snapshot does not cost 26 MB before parsing starts), and content
// that begins with the gzip magic is inflated on the fly. The total is capped, so neither a
// huge file nor a small compressed bomb can run a reader past its limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/result.h"
#include "snapshot/mapped_file.h"

namespace memsnap {

// Bytes gathered in one place as they arrive (an input that is parsed whole), in an anonymous
// mapping that grows in place or moves without a copy (mremap): gathering N bytes holds about
// N bytes at every moment, where a doubling std::string holds up to twice that, and three
// times while it copies.
class HeldBytes {
 public:
  HeldBytes() = default;
  ~HeldBytes();
  HeldBytes(HeldBytes&& other) noexcept;
  HeldBytes& operator=(HeldBytes&& other) noexcept;
  HeldBytes(const HeldBytes&) = delete;
  HeldBytes& operator=(const HeldBytes&) = delete;
  // Throws std::bad_alloc when the mapping cannot grow.
  void append(const void* data, size_t n);
  std::string_view view() const { return {static_cast<const char*>(data_), size_}; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

class ByteSource {
 public:
  static Result<std::unique_ptr<ByteSource>> open_file(const std::string& path, uint64_t max_bytes);
  // Over bytes the caller keeps alive (tests, fuzzing).
  static std::unique_ptr<ByteSource> over_memory(std::string_view bytes, uint64_t max_bytes);
  // Over bytes handed out in turn (an upload still arriving): `pull` copies up to `capacity`
  // bytes into `out` and returns how many, 0 at the end (it may throw to abandon the read).
  // `size_hint`: the total when known, else 0.
  using Pull = std::function<size_t(uint8_t* out, size_t capacity)>;
  static std::unique_ptr<ByteSource> over_pull(Pull pull, uint64_t size_hint, uint64_t max_bytes);
  ~ByteSource();
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  // Copies exactly `n` bytes, or returns false when the input ends (or passes the cap)
  // first. Throws std::runtime_error for an unreadable file or damaged compression.
  bool read(void* out, size_t n) {
    if (static_cast<size_t>(end_ - next_) >= n) {
      std::memcpy(out, next_, n);
      next_ += n;
      return true;
    }
    return read_slow(static_cast<uint8_t*>(out), n);
  }
  // `n` bytes from the current chunk when they lie there (consumed), else nullptr: lets a
  // parser read small fields without a copy or a call.
  const uint8_t* take(size_t n) {
    if (static_cast<size_t>(end_ - next_) < n) return nullptr;
    const uint8_t* at = next_;
    next_ += n;
    return at;
  }
  // Consumes `n` bytes without copying them; false when the input ends first.
  bool skip(uint64_t n);
  // All of the input at once where it can be had without a copy: a plain file (mapped, see
  // mapped_file.h) or plain bytes in memory, before anything but a peek was consumed.
  // Nothing for compressed or streamed input, or input over the limit.
  std::optional<std::string_view> whole();
  // Whether whole()'s file was cut short while mapped (what was missing read as zeros);
  // kChangedWhileRead says so to the user.
  bool changed_while_read() const;
  static constexpr const char* kChangedWhileRead = "the file was cut short while it was read (rewritten meanwhile?)";
  // Lets a mapped file's pages that lie wholly within [begin, end) of whole() go (reading
  // them again maps them back from the page cache), so that a pass over a large file does
  // not hold all of it. Thread-safe.
  void release_whole(uint64_t begin, uint64_t end) const;
  // Bytes that take() can hand out now without a refill.
  size_t buffered() const { return static_cast<size_t>(end_ - next_); }
  // The next byte without consuming it, or -1 at the end.
  int peek() {
    if (next_ == end_ && !refill()) return -1;
    return *next_;
  }
  // Bytes consumed so far (after decompression): the offset errors name.
  uint64_t offset() const { return consumed_before_ + static_cast<uint64_t>(next_ - begin_); }
  bool compressed() const { return inflater_ != nullptr; }
  // The input's size in bytes where known before reading (a plain file or memory), else 0:
  // lets readers reserve their tables once instead of growing them.
  uint64_t size_hint() const { return size_hint_; }
  bool hit_limit() const { return hit_limit_; }
  // Lowers the limit on the bytes read (once a format is known, before more than a peek was
  // read): false when the input is known to be over it already (a plain file or memory).
  uint64_t max_bytes() const { return max_bytes_; }
  bool limit_to(uint64_t max_bytes) {
    if (max_bytes < max_bytes_) max_bytes_ = max_bytes;
    return size_hint_ <= max_bytes_;
  }
  // Everything that is left, for formats parsed whole (msgpack).
  HeldBytes read_rest();

 private:
  struct Inflater;
  ByteSource(uint64_t max_bytes);
  bool read_slow(uint8_t* out, size_t n);
  bool refill();           // false at the end of input
  bool next_gzip_member();  // after a gzip member's end: whether another one follows
  size_t fill_raw(uint8_t* out, size_t capacity);  // raw (possibly compressed) bytes

  uint64_t max_bytes_;
  int fd_ = -1;
  std::string_view memory_;  // when reading from memory
  Pull pull_;                // when reading what a function hands out
  size_t memory_offset_ = 0;
  std::unique_ptr<Inflater> inflater_;
  std::vector<uint8_t> buffer_;
  const uint8_t* begin_ = nullptr;
  const uint8_t* next_ = nullptr;
  const uint8_t* end_ = nullptr;
  uint64_t consumed_before_ = 0;  // bytes in buffers already used up
  bool hit_limit_ = false;
  uint64_t size_hint_ = 0;
  std::unique_ptr<MappedFile> mapped_;  // whole() of a file
};

}  // namespace memsnap
