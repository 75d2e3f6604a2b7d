// libFuzzer target for the allocation trace text parser (`memsnap replay FILE.trace`): any
// input gives a trace or a one-line error, never a crash, a hang or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "replay/allocation_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto trace = memsnap::parse_allocation_trace(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!trace.ok() && (trace.error().empty() || trace.error().find('\n') != std::string::npos)) __builtin_trap();
  return 0;
}
