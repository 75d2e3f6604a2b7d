#include "viewer/svg/svg_text.h"

#include <cmath>
#include <cstdio>

namespace memsnap::svg {
namespace {

// Length of the valid UTF-8 sequence at text[i], or 0.
size_t utf8_sequence(std::string_view text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  size_t length;
  uint32_t min;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) { length = 2; min = 0x80; }
  else if ((c & 0xF0) == 0xE0) { length = 3; min = 0x800; }
  else if ((c & 0xF8) == 0xF0) { length = 4; min = 0x10000; }
  else return 0;
  if (i + length > text.size()) return 0;
  uint32_t code = c & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(text[i + k]);
    if ((next & 0xC0) != 0x80) return 0;
    code = (code << 6) | (next & 0x3F);
  }
  if (code < min || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return 0;
  return length;
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '&': out += "&amp;"; ++i; continue;
      case '<': out += "&lt;"; ++i; continue;
      case '>': out += "&gt;"; ++i; continue;
      case '"': out += "&quot;"; ++i; continue;
      case '\'': out += "&#39;"; ++i; continue;
      default: break;
    }
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    const size_t length = utf8_sequence(text, i);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(text.substr(i, length));
    i += length;
  }
  return out;
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); ++i; continue; }
    if (c == '<' || c == '>' || c == '&' || c < 0x20) {  // safe inside <script> and XML
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
      ++i;
      continue;
    }
    const size_t length = utf8_sequence(text, i);
    if (length == 0) { out += "\\ufffd"; ++i; continue; }
    out.append(text.substr(i, length));
    i += length;
  }
  return out + "\"";
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[48];
  if (unit == 0) std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

std::string human_bytes_signed(int64_t bytes) {
  const uint64_t magnitude = bytes < 0 ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  return (bytes < 0 ? "-" : "+") + human_bytes(magnitude);
}

uint32_t stable_hash(std::string_view text) {
  uint32_t hash = 2166136261u;  // FNV-1a: the same colour for a name on every machine
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 16777619u;
  }
  return hash;
}

std::string site_colour(std::string_view label, int shade) {
  if (label.empty()) return hsl_to_rgb(30, 0.08, (60.0 + shade) / 100);
  const uint32_t h = stable_hash(label);
  return hsl_to_rgb(h % 360, (55.0 + (h >> 9) % 20) / 100, (52.0 + (h >> 17) % 14 + shade) / 100);
}

std::string hsl_to_rgb(double h, double s, double l) {
  h = std::fmod(std::fmod(h, 360.0) + 360.0, 360.0);
  const double c = (1 - std::fabs(2 * l - 1)) * s;
  const double x = c * (1 - std::fabs(std::fmod(h / 60.0, 2) - 1));
  const double m = l - c / 2;
  double r = 0, g = 0, b = 0;
  if (h < 60) { r = c; g = x; }
  else if (h < 120) { r = x; g = c; }
  else if (h < 180) { g = c; b = x; }
  else if (h < 240) { g = x; b = c; }
  else if (h < 300) { r = x; b = c; }
  else { r = c; b = x; }
  char text[32];
  std::snprintf(text, sizeof text, "rgb(%d,%d,%d)", static_cast<int>(std::lround((r + m) * 255)),
                static_cast<int>(std::lround((g + m) * 255)), static_cast<int>(std::lround((b + m) * 255)));
  return text;
}

}  // namespace memsnap::svg
