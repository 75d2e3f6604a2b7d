// libFuzzer target for the allocator config grammar (MEMSNAP_ALLOC_CONF, `replay --config`):
// any string gives a config or a one-line error, never a crash or a hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "allocator/allocator_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto config = memsnap::parse_allocator_config(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!config.ok() && (config.error().empty() || config.error().find('\n') != std::string::npos)) __builtin_trap();
  return 0;
}
