// Typed, range-checked access to a request's query parameters. Every value arrives from an
// untrusted client: anything malformed, out of range or absurdly long is a 400 naming the
// parameter, never a crash or an exception from deep inside a parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <httplib.h>

namespace memsnap::web {

class RequestParams {
 public:
  explicit RequestParams(const httplib::Request& request) : request_(request) {}

  // Decimal, or hex with 0x when `allow_hex`.
  std::optional<uint64_t> unsigned_integer(const std::string& name, uint64_t min, uint64_t max,
                                           bool allow_hex = false) const;
  std::optional<int64_t> device(const std::string& name = "device") const;
  std::optional<double> real(const std::string& name, double min, double max) const;
  std::optional<std::string> text(const std::string& name, size_t max_length) const;
  // One of `choices` (first one when absent).
  std::string choice(const std::string& name, std::initializer_list<const char*> choices) const;
  bool flag(const std::string& name) const;  // present and not "0"/"false"

 private:
  const std::string* raw(const std::string& name) const;
  const httplib::Request& request_;
};

// Parses a whole string as an unsigned number (decimal, or 0x-hex when allowed). No sign, no
// spaces, no overflow.
std::optional<uint64_t> parse_unsigned(const std::string& text, bool allow_hex);

}  // namespace memsnap::web
