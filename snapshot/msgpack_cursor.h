// Reading msgpack straight from its bytes, one value at a time: what memsnap's snapshot reader
// parses with, so a file becomes a Snapshot without an intermediate tree of every value (the
// tree cost about 170 bytes per trace entry on top of the Snapshot itself).
//
// Each read checks the type and that the bytes are there; a failure throws MsgpackError whose
// message names the place in the document (Where) and what was wrong. Counts are checked
// against the bytes left (every element needs at least one byte), so a damaged length cannot
// make a caller reserve more than the file could hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace memsnap {

struct MsgpackError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A place in the document, built on the stack as the reader descends and spelled out only for
// an error: "segments[3].blocks[1].history" (names from the file printable and cut short).
struct Where {
  const Where* parent = nullptr;
  std::string_view name;  // a field, or empty for an element of the parent
  int64_t index = -1;     // an element's index, or -1
  std::string str() const;
  Where field(std::string_view child) const { return {this, child, -1}; }
  Where element(size_t i) const { return {this, {}, static_cast<int64_t>(i)}; }
};

class MsgpackCursor {
 public:
  explicit MsgpackCursor(std::string_view bytes, size_t offset = 0) : bytes_(bytes), at_(offset) {}

  size_t offset() const { return at_; }
  size_t left() const { return at_ < bytes_.size() ? bytes_.size() - at_ : 0; }
  bool at_end() const { return at_ >= bytes_.size(); }

  // An array's or map's header: its element (or entry) count.
  size_t array(const Where& where);
  size_t array(const Where& where, size_t expected);
  size_t map(const Where& where);
  uint64_t uint(const Where& where);
  int64_t integer(const Where& where);
  std::string_view str(const Where& where);
  bool boolean(const Where& where);
  // A nil, consumed: true; anything else is left for the next read.
  bool nil();
  bool next_is_array() const;
  bool next_is_map() const;
  bool next_is_uint() const;
  // Steps over one value of any kind, nested at most `max_depth` deep.
  void skip(const Where& where, int max_depth = 16);

 private:
  [[noreturn]] static void fail(const Where& where, const std::string& what);
  uint8_t peek(const Where& where) const;
  uint64_t big_endian(size_t bytes, const Where& where);
  void need(size_t bytes, const Where& where) const;
  size_t checked_count(uint64_t count, size_t bytes_each, const Where& where) const;
  size_t header(const Where& where, uint8_t fix, uint8_t tag16, size_t bytes_each, const char* expected);

  std::string_view bytes_;
  size_t at_;
};

}  // namespace memsnap
