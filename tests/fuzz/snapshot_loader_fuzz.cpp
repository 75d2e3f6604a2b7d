// libFuzzer target for everything `memsnap` reads from a snapshot file: format detection,
// gzip, the pickle machine and PyTorch document converter, the JSON reader and the msgpack
// reader. Any input must load or fail with one line, never crash or leak.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "snapshot/snapshot_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto loaded = memsnap::load_snapshot_from_memory(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!loaded.ok() && loaded.error().find('\n') != std::string::npos) __builtin_trap();
  return 0;
}
