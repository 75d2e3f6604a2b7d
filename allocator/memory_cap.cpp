#include "allocator/memory_cap.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "allocator/device_stats.h"

namespace memsnap {

std::string cap_source_of_settings(std::string_view origin) {
  return "per_process_memory_fraction in " + (origin.empty() ? std::string("the settings string") : std::string(origin));
}

std::string memory_cap_text(const std::optional<MemoryCap>& cap) {
  if (!cap) return "none";
  char fraction[40];
  std::snprintf(fraction, sizeof fraction, "%.17g", cap->fraction);
  return std::to_string(cap->bytes) + " " + fraction + " " + cap->source;
}

std::optional<MemoryCap> parse_memory_cap_text(std::string_view text, std::string* error) {
  const auto fail = [&](const char* why) -> std::optional<MemoryCap> {
    if (error) *error = "memory cap '" + std::string(text.substr(0, 80)) + "': " + why;
    return std::nullopt;
  };
  if (error) error->clear();
  if (text == "none") return std::nullopt;
  const size_t first = text.find(' ');
  const size_t second = first == std::string_view::npos ? first : text.find(' ', first + 1);
  if (second == std::string_view::npos) return fail("expected 'none' or '<bytes> <fraction> <source>'");
  const std::string bytes_text(text.substr(0, first));
  const std::string fraction_text(text.substr(first + 1, second - first - 1));
  if (bytes_text.empty() || bytes_text.find_first_not_of("0123456789") != std::string::npos || bytes_text.size() > 19)
    return fail("the bytes are not a number");
  char* end = nullptr;
  errno = 0;
  const double fraction = std::strtod(fraction_text.c_str(), &end);
  if (end == fraction_text.c_str() || *end != '\0' || errno != 0 || !std::isfinite(fraction) || fraction < 0 ||
      fraction > 1)
    return fail("the fraction is not a number from 0 to 1");
  MemoryCap cap;
  cap.bytes = std::strtoull(bytes_text.c_str(), nullptr, 10);
  cap.fraction = fraction;
  cap.source = std::string(text.substr(second + 1));
  return cap;
}

std::string memory_cap_words(const MemoryCap& cap) {
  char fraction[40];
  std::snprintf(fraction, sizeof fraction, "%.4g", cap.fraction);
  return "a memory cap of " + format_bytes(static_cast<int64_t>(cap.bytes)) + " (" + fraction +
         " of the device, set by " + (cap.source.empty() ? std::string("the program") : cap.source) + ")";
}

}  // namespace memsnap
