// "1 event", "2 events": a count with its noun in the right number, for every message and view.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace memsnap {

inline std::string counted(uint64_t count, std::string_view singular, std::string_view plural = {}) {
  std::string out = std::to_string(count) + " ";
  if (count == 1) return out.append(singular);
  if (!plural.empty()) return out.append(plural);
  return out.append(singular).append("s");
}

}  // namespace memsnap
