// libFuzzer target for reading a pickle on several threads (pytorch_parallel_read.h): any
// input must give exactly what one thread gives, the same snapshot or the same one-line
// error, never a crash, a hang, a race or a leak. Build with clang:
//   bash scripts/configure_asan.sh
//   cmake --build build-asan --target pickle_parallel_fuzz
//   build-asan/tests/fuzz/pickle_parallel_fuzz -max_total_time=60 tests/fuzz/corpus-pickle
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "snapshot/byte_source.h"
#include "snapshot/pytorch_snapshot_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  memsnap::PickleReadOptions alone;
  alone.threads = 1;
  memsnap::PickleReadOptions parted;
  parted.threads = 3;
  parted.min_bytes = 0;
  // Parts of many sizes, and one to four scans at once, from the input itself.
  parted.layout = {16, 64 + size % 512, 1 + static_cast<unsigned>(size / 3 % 4)};
  auto one = memsnap::ByteSource::over_memory(bytes, 64 << 20);
  auto many = memsnap::ByteSource::over_memory(bytes, 64 << 20);
  const auto expected = memsnap::snapshot_from_pickle(*one, alone);
  const auto got = memsnap::snapshot_from_pickle(*many, parted);
  if (expected.ok() != got.ok()) __builtin_trap();
  if (expected.ok() ? !(expected.value() == got.value()) : expected.error() != got.error()) __builtin_trap();
  return 0;
}
