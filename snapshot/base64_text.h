// Base64 (RFC 4648, with padding): bytes as text that any string can hold.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace memsnap {

std::string to_base64(std::string_view bytes);
// The bytes back; unset when `text` is not padded base64 (another character, a wrong length,
// bits past the end).
std::optional<std::string> from_base64(std::string_view text);

}  // namespace memsnap
