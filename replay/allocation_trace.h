// The text allocation trace of ../shared/bench/TRACE_FORMAT.md:
//   a <id> <bytes> <stream>     allocate <bytes> on <stream>; <id> names the allocation
//   f <id> <stream>             free the allocation named <id>
// `#` starts a comment line. The parser treats the file as hostile: lines are bounded,
// numbers are range-checked, and the first bad line is reported with its number.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include "allocator/result.h"

namespace memsnap {

struct TraceEvent {
  enum class Kind : uint8_t { kAlloc, kFree };
  Kind kind = Kind::kAlloc;
  uint64_t id = 0;
  uint64_t bytes = 0;  // 0 for frees
  int64_t stream = 0;
};

struct AllocationTrace {
  std::vector<TraceEvent> events;
};

inline constexpr size_t kMaxTraceLineLength = 4096;
inline constexpr uint64_t kMaxTraceFileBytes = uint64_t{4} << 30;
// Larger than any device; keeps a hostile size from reaching the allocator's arithmetic.
inline constexpr uint64_t kMaxTraceAllocationBytes = uint64_t{1} << 50;

Result<AllocationTrace> parse_allocation_trace(std::istream& in);
Result<AllocationTrace> parse_allocation_trace(std::string_view text);
// Reads a file; the error names the file and line.
Result<AllocationTrace> read_allocation_trace(const std::string& path);

}  // namespace memsnap
