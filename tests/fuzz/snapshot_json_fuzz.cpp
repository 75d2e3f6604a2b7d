// libFuzzer target for the JSON snapshot reader, parsed as it streams (nlohmann's SAX
// interface into the values a pickle makes, lowered and checked as they close): any input must
// give a snapshot or a one-line error, never a crash, a hang or memory past its budget
// (scripts/fuzz.sh runs it under -rss_limit_mb). Build with clang:
//   bash scripts/configure_asan.sh
//   cmake --build build-asan --target snapshot_json_fuzz
//   build-asan/tests/fuzz/snapshot_json_fuzz -max_total_time=60 tests/fuzz/corpus-json
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "snapshot/pytorch_snapshot_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto snapshot = memsnap::snapshot_from_json(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!snapshot.ok() && snapshot.error().find('\n') != std::string::npos) __builtin_trap();
  return 0;
}
