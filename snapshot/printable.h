// Text from a file, fit to quote in a one-line error: control and non-ASCII bytes become '?', and
// more than `max` bytes are cut with "...". A hostile file must not break the error's one line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace memsnap {

inline std::string printable(std::string_view text, size_t max = 40) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  }
  if (text.size() > max) out += "...";
  return out;
}

}  // namespace memsnap
