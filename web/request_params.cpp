#include "web/request_params.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "web/api_error.h"

namespace memsnap::web {
namespace {

constexpr size_t kMaxNumberLength = 24;

[[noreturn]] void refuse(const std::string& name, const std::string& why) {
  throw ApiError(400, "query parameter '" + name + "': " + why);
}

}  // namespace

std::optional<uint64_t> parse_unsigned(const std::string& text, bool allow_hex) {
  if (text.empty() || text.size() > kMaxNumberLength) return std::nullopt;
  const bool hex = allow_hex && text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
  const std::string digits = hex ? text.substr(2) : text;
  const char* allowed = hex ? "0123456789abcdefABCDEF" : "0123456789";
  if (digits.empty() || digits.find_first_not_of(allowed) != std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(digits.c_str(), &end, hex ? 16 : 10);
  if (errno != 0 || end != digits.c_str() + digits.size()) return std::nullopt;
  return static_cast<uint64_t>(value);
}

const std::string* RequestParams::raw(const std::string& name) const {
  auto it = request_.params.find(name);
  return it == request_.params.end() ? nullptr : &it->second;
}

std::optional<uint64_t> RequestParams::unsigned_integer(const std::string& name, uint64_t min, uint64_t max,
                                                        bool allow_hex) const {
  const std::string* value = raw(name);
  if (!value) return std::nullopt;
  const auto parsed = parse_unsigned(*value, allow_hex);
  if (!parsed) refuse(name, allow_hex ? "not a number (decimal or 0x-hex)" : "not a whole number");
  if (*parsed < min || *parsed > max)
    refuse(name, "must be between " + std::to_string(min) + " and " + std::to_string(max));
  return parsed;
}

std::optional<int64_t> RequestParams::device(const std::string& name) const {
  const auto value = unsigned_integer(name, 0, 1u << 20);
  if (!value) return std::nullopt;
  return static_cast<int64_t>(*value);
}

std::optional<double> RequestParams::real(const std::string& name, double min, double max) const {
  const std::string* value = raw(name);
  if (!value) return std::nullopt;
  if (value->empty() || value->size() > kMaxNumberLength ||
      value->find_first_not_of("0123456789.eE-+") != std::string::npos)
    refuse(name, "not a number");
  char* end = nullptr;
  const double parsed = std::strtod(value->c_str(), &end);
  if (end != value->c_str() + value->size() || !std::isfinite(parsed)) refuse(name, "not a number");
  if (parsed < min || parsed > max)
    refuse(name, "must be between " + std::to_string(min) + " and " + std::to_string(max));
  return parsed;
}

std::optional<std::string> RequestParams::text(const std::string& name, size_t max_length) const {
  const std::string* value = raw(name);
  if (!value) return std::nullopt;
  if (value->size() > max_length) refuse(name, "longer than " + std::to_string(max_length) + " characters");
  return *value;
}

std::string RequestParams::choice(const std::string& name, std::initializer_list<const char*> choices) const {
  const std::string* value = raw(name);
  if (!value) return *choices.begin();
  std::string listed;
  for (const char* c : choices) {
    if (*value == c) return *value;
    listed += (listed.empty() ? "" : ", ") + std::string(c);
  }
  refuse(name, "must be one of " + listed);
}

bool RequestParams::flag(const std::string& name) const {
  const std::string* value = raw(name);
  return value && *value != "0" && *value != "false";
}

}  // namespace memsnap::web
