// Byte counts as the views write them in sentences ("1.50 GiB"): format_bytes of a count that is
// never negative. A file brings it in with `using text::bytes;`.
#pragma once

#include <cstdint>
#include <string>

#include "allocator/device_stats.h"

namespace memsnap::text {

inline std::string bytes(uint64_t value) { return format_bytes(static_cast<int64_t>(value)); }

}  // namespace memsnap::text
