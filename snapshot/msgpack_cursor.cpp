#include "snapshot/msgpack_cursor.h"

#include <vector>

#include "snapshot/printable.h"

namespace memsnap {

std::string Where::str() const {
  std::vector<const Where*> chain;
  for (const Where* w = this; w != nullptr; w = w->parent) chain.push_back(w);
  std::string out;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Where& w = **it;
    if (!w.name.empty()) {
      if (!out.empty()) out += '.';
      out += printable(w.name);  // names may come from the file (map keys)
    }
    if (w.index >= 0) out += "[" + std::to_string(w.index) + "]";
  }
  return out.empty() ? "file" : out;
}

void MsgpackCursor::fail(const Where& where, const std::string& what) {
  throw MsgpackError(where.str() + ": " + what);
}

void MsgpackCursor::need(size_t bytes, const Where& where) const {
  if (bytes > bytes_.size() - std::min(at_, bytes_.size()))
    fail(where, "the file is truncated (msgpack data ends early)");
}

uint8_t MsgpackCursor::peek(const Where& where) const {
  need(1, where);
  return static_cast<uint8_t>(bytes_[at_]);
}

uint64_t MsgpackCursor::big_endian(size_t bytes, const Where& where) {
  need(bytes, where);
  uint64_t value = 0;
  for (size_t i = 0; i < bytes; ++i) value = (value << 8) | static_cast<uint8_t>(bytes_[at_ + i]);
  at_ += bytes;
  return value;
}

// Every element takes at least `bytes_each` input bytes: a count beyond what is left is damage.
size_t MsgpackCursor::checked_count(uint64_t count, size_t bytes_each, const Where& where) const {
  const size_t left = bytes_.size() - std::min(at_, bytes_.size());
  if (count > left / bytes_each)
    fail(where, "the file is truncated or damaged: a length exceeds what is left of the file");
  return static_cast<size_t>(count);
}

// An array's or map's header: the fix form (`fix` with the count in the low nibble) or the
// 16- and 32-bit forms (`tag16`, `tag16 + 1`).
size_t MsgpackCursor::header(const Where& where, uint8_t fix, uint8_t tag16, size_t bytes_each,
                             const char* expected) {
  const uint8_t tag = peek(where);
  uint64_t count = 0;
  if ((tag & 0xf0) == fix) {
    ++at_;
    count = tag & 0x0f;
  } else if (tag == tag16 || tag == tag16 + 1) {
    ++at_;
    count = big_endian(tag == tag16 ? 2 : 4, where);
  } else {
    fail(where, expected);
  }
  return checked_count(count, bytes_each, where);
}

size_t MsgpackCursor::array(const Where& where) { return header(where, 0x90, 0xdc, 1, "expected an array"); }

size_t MsgpackCursor::array(const Where& where, size_t expected) {
  const size_t count = array(where);
  if (count != expected)
    fail(where, "expected " + std::to_string(expected) + " fields, found " + std::to_string(count));
  return count;
}

size_t MsgpackCursor::map(const Where& where) { return header(where, 0x80, 0xde, 2, "expected a map"); }

uint64_t MsgpackCursor::uint(const Where& where) {
  const uint8_t tag = peek(where);
  if (tag <= 0x7f) {
    ++at_;
    return tag;
  }
  if (tag >= 0xcc && tag <= 0xcf) {
    ++at_;
    return big_endian(size_t{1} << (tag - 0xcc), where);
  }
  // A signed encoding of a non-negative value is still one.
  if (tag >= 0xd0 && tag <= 0xd3) {
    const size_t start = at_;
    const int64_t value = integer(where);
    if (value >= 0) return static_cast<uint64_t>(value);
    at_ = start;
  }
  fail(where, "expected a non-negative integer");
}

int64_t MsgpackCursor::integer(const Where& where) {
  const uint8_t tag = peek(where);
  if (tag <= 0x7f) {
    ++at_;
    return tag;
  }
  if (tag >= 0xe0) {
    ++at_;
    return static_cast<int8_t>(tag);
  }
  if (tag >= 0xcc && tag <= 0xcf) {
    ++at_;
    const uint64_t value = big_endian(size_t{1} << (tag - 0xcc), where);
    if (value > static_cast<uint64_t>(INT64_MAX)) fail(where, "expected an integer");
    return static_cast<int64_t>(value);
  }
  if (tag >= 0xd0 && tag <= 0xd3) {
    ++at_;
    const size_t bytes = size_t{1} << (tag - 0xd0);
    const uint64_t raw = big_endian(bytes, where);
    if (bytes == 8) return static_cast<int64_t>(raw);
    const uint64_t sign = uint64_t{1} << (bytes * 8 - 1);
    return static_cast<int64_t>(raw ^ sign) - static_cast<int64_t>(sign);  // sign-extended
  }
  fail(where, "expected an integer");
}

std::string_view MsgpackCursor::str(const Where& where) {
  const uint8_t tag = peek(where);
  uint64_t length = 0;
  if ((tag & 0xe0) == 0xa0) {
    ++at_;
    length = tag & 0x1f;
  } else if (tag >= 0xd9 && tag <= 0xdb) {
    ++at_;
    length = big_endian(size_t{1} << (tag - 0xd9), where);
  } else {
    fail(where, "expected a string");
  }
  need(checked_count(length, 1, where), where);
  const std::string_view text = bytes_.substr(at_, static_cast<size_t>(length));
  at_ += static_cast<size_t>(length);
  return text;
}

bool MsgpackCursor::boolean(const Where& where) {
  const uint8_t tag = peek(where);
  if (tag != 0xc2 && tag != 0xc3) fail(where, "expected true or false");
  ++at_;
  return tag == 0xc3;
}

bool MsgpackCursor::nil() {
  if (at_ < bytes_.size() && static_cast<uint8_t>(bytes_[at_]) == 0xc0) {
    ++at_;
    return true;
  }
  return false;
}

bool MsgpackCursor::next_is_array() const {
  if (at_ >= bytes_.size()) return false;
  const auto tag = static_cast<uint8_t>(bytes_[at_]);
  return (tag & 0xf0) == 0x90 || tag == 0xdc || tag == 0xdd;
}

bool MsgpackCursor::next_is_map() const {
  if (at_ >= bytes_.size()) return false;
  const auto tag = static_cast<uint8_t>(bytes_[at_]);
  return (tag & 0xf0) == 0x80 || tag == 0xde || tag == 0xdf;
}

bool MsgpackCursor::next_is_uint() const {
  if (at_ >= bytes_.size()) return false;
  const auto tag = static_cast<uint8_t>(bytes_[at_]);
  return tag <= 0x7f || (tag >= 0xcc && tag <= 0xcf);
}

void MsgpackCursor::skip(const Where& where, int max_depth) {
  if (max_depth < 0) fail(where, "damaged file: nesting deeper than the format allows");
  const uint8_t tag = peek(where);
  auto skip_bytes = [&](uint64_t count) {
    need(checked_count(count, 1, where), where);
    at_ += static_cast<size_t>(count);
  };
  if (tag <= 0x7f || tag >= 0xe0 || tag == 0xc0 || tag == 0xc2 || tag == 0xc3) {
    ++at_;
  } else if ((tag & 0xf0) == 0x80 || tag == 0xde || tag == 0xdf) {
    const size_t entries = map(where);
    for (size_t i = 0; i < 2 * entries; ++i) skip(where, max_depth - 1);
  } else if ((tag & 0xf0) == 0x90 || tag == 0xdc || tag == 0xdd) {
    const size_t elements = array(where);
    for (size_t i = 0; i < elements; ++i) skip(where, max_depth - 1);
  } else if ((tag & 0xe0) == 0xa0 || (tag >= 0xd9 && tag <= 0xdb)) {
    str(where);
  } else if (tag >= 0xc4 && tag <= 0xc6) {  // bin 8/16/32
    ++at_;
    skip_bytes(big_endian(size_t{1} << (tag - 0xc4), where));
  } else if (tag >= 0xc7 && tag <= 0xc9) {  // ext 8/16/32: length, type, data
    ++at_;
    const uint64_t length = big_endian(size_t{1} << (tag - 0xc7), where);
    skip_bytes(1);
    skip_bytes(length);
  } else if (tag == 0xca || tag == 0xcb) {  // float 32/64
    ++at_;
    skip_bytes(tag == 0xca ? 4 : 8);
  } else if (tag >= 0xcc && tag <= 0xd3) {  // unsigned and signed integers
    ++at_;
    skip_bytes(size_t{1} << ((tag - 0xcc) % 4));
  } else if (tag >= 0xd4 && tag <= 0xd8) {  // fixext 1..16: type, data
    ++at_;
    skip_bytes(1 + (size_t{1} << (tag - 0xd4)));
  } else {
    fail(where, "damaged file: unknown msgpack type byte");
  }
}

}  // namespace memsnap
