// libFuzzer target for the msgpack snapshot reader: any input must give a snapshot or a
// one-line error, never a crash, a hang or unbounded memory. Build with clang:
//   bash scripts/configure_asan.sh
//   cmake --build build-asan --target snapshot_reader_fuzz
//   build-asan/tests/fuzz/snapshot_reader_fuzz -max_total_time=60 tests/fuzz/corpus
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "snapshot/msgpack_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto snapshot = memsnap::snapshot_from_msgpack(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!snapshot.ok() && snapshot.error().find('\n') != std::string::npos) __builtin_trap();
  return 0;
}
