// The table is a sequence of entries, each covering 1 to 8 code units. An entry's first
// byte has its top bit set, a 4-bit code and the length minus one; the bytes that follow,
// up to the next byte with the top bit set, hold the entry's columns and line deltas
// (Objects/locations.md in CPython's sources). Only the line matters here:
//   15      no location (the instruction has no line; the line carries on unchanged)
//   14      long form: a signed varint line delta, then end line and columns
//   13      no columns: a signed varint line delta
//   10..12  one line: delta code - 10, then two column bytes
//   0..9    short form: same line, one column byte
#include "python/native/code_locations.h"

namespace memsnap::python {
namespace {

constexpr int kNoLocation = 15;
constexpr int kLongForm = 14;
constexpr int kNoColumns = 13;
constexpr int kOneLineFirst = 10;

// A varint: 6 bits a byte, least significant first, bit 6 set while more follow.
bool read_varint(std::string_view table, size_t& at, uint32_t& value) {
  value = 0;
  for (unsigned shift = 0; at < table.size() && shift < 32; shift += 6) {
    const auto byte = static_cast<uint8_t>(table[at++]);
    value |= static_cast<uint32_t>(byte & 63) << shift;
    if ((byte & 64) == 0) return true;
  }
  return false;
}

bool read_signed_varint(std::string_view table, size_t& at, int& value) {
  uint32_t raw = 0;
  if (!read_varint(table, at, raw)) return false;
  value = (raw & 1) ? -static_cast<int>(raw >> 1) : static_cast<int>(raw >> 1);
  return true;
}

}  // namespace

int line_for_instruction(std::string_view table, int first_line, uint32_t instruction) {
  int line = first_line;
  uint64_t start = 0;  // code unit where the current entry begins
  size_t at = 0;
  while (at < table.size()) {
    const auto head = static_cast<uint8_t>(table[at]);
    if ((head & 0x80) == 0) return -1;  // not an entry's first byte: a damaged table
    const int code = (head >> 3) & 15;
    const uint32_t length = (head & 7) + 1;
    size_t next = at + 1;
    int delta = 0;
    if (code == kLongForm || code == kNoColumns) {
      if (!read_signed_varint(table, next, delta)) return -1;
    } else if (code >= kOneLineFirst && code < kNoColumns) {
      delta = code - kOneLineFirst;
    }
    line += delta;
    if (instruction < start + length) return code == kNoLocation ? -1 : line;
    start += length;
    // The rest of the entry (end line, columns) up to the next entry's first byte.
    at = next;
    while (at < table.size() && (static_cast<uint8_t>(table[at]) & 0x80) == 0) ++at;
  }
  return -1;
}

}  // namespace memsnap::python
