#include "replay/allocation_trace.h"

#include "snapshot/file_contents.h"
#include "snapshot/printable.h"

#include <charconv>
#include <sstream>

namespace memsnap {
namespace {

std::string_view next_field(std::string_view& rest) {
  size_t start = rest.find_first_not_of(" \t\r");
  if (start == std::string_view::npos) {
    rest = {};
    return {};
  }
  rest.remove_prefix(start);
  size_t end = rest.find_first_of(" \t\r");
  std::string_view field = rest.substr(0, end);
  rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  return field;
}

template <typename T>
bool parse_number(std::string_view field, T& out) {
  if (field.empty()) return false;
  const char* end = field.data() + field.size();
  auto [ptr, ec] = std::from_chars(field.data(), end, out);
  return ec == std::errc() && ptr == end;
}

// Parses one non-comment line; returns an error message or empty.
std::string parse_line(std::string_view line, TraceEvent& event) {
  std::string_view rest = line;
  const std::string_view kind = next_field(rest);
  const std::string_view id = next_field(rest);
  if (kind == "a") {
    const std::string_view bytes = next_field(rest);
    const std::string_view stream = next_field(rest);
    event.kind = TraceEvent::Kind::kAlloc;
    if (!parse_number(id, event.id)) return "bad id '" + printable(id, 60) + "'";
    if (!parse_number(bytes, event.bytes)) return "bad byte count '" + printable(bytes, 60) + "'";
    if (event.bytes > kMaxTraceAllocationBytes) return "byte count " + std::string(bytes) + " is larger than any device";
    if (!parse_number(stream, event.stream)) return "bad stream '" + printable(stream, 60) + "'";
  } else if (kind == "f") {
    const std::string_view stream = next_field(rest);
    event.kind = TraceEvent::Kind::kFree;
    event.bytes = 0;
    if (!parse_number(id, event.id)) return "bad id '" + printable(id, 60) + "'";
    if (!parse_number(stream, event.stream)) return "bad stream '" + printable(stream, 60) + "'";
  } else {
    return "expected 'a <id> <bytes> <stream>' or 'f <id> <stream>', got '" + printable(line, 60) + "'";
  }
  if (!next_field(rest).empty()) return "unexpected text after the event: '" + printable(line, 60) + "'";
  return {};
}

}  // namespace

Result<AllocationTrace> parse_allocation_trace(std::string_view text) {
  AllocationTrace trace;
  trace.events.reserve(text.size() / 24);
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t newline = text.find('\n');
    const std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline == std::string_view::npos ? text.size() : newline + 1);
    if (line.size() > kMaxTraceLineLength)
      return Result<AllocationTrace>::failure("line " + std::to_string(line_number) +
                                              ": longer than " +
                                              std::to_string(kMaxTraceLineLength) + " bytes");
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') continue;
    TraceEvent event;
    if (std::string error = parse_line(line, event); !error.empty())
      return Result<AllocationTrace>::failure("line " + std::to_string(line_number) + ": " + error);
    trace.events.push_back(event);
  }
  return trace;
}

Result<AllocationTrace> parse_allocation_trace(std::istream& in) {
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return Result<AllocationTrace>::failure("read error");
  return parse_allocation_trace(std::string_view(contents.str()));
}

Result<AllocationTrace> read_allocation_trace(const std::string& path) {
  auto contents = read_file_contents(path, kMaxTraceFileBytes);
  if (!contents) return Result<AllocationTrace>::failure(contents.error());
  Result<AllocationTrace> parsed = parse_allocation_trace(std::string_view(contents.value()));
  if (!parsed) return Result<AllocationTrace>::failure(path + ": " + parsed.error());
  return parsed;
}

}  // namespace memsnap
