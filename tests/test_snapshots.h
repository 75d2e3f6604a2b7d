// Reading tests/data: a snapshot by its path there, or a file's bytes (a file that cannot be
// read fails the test and gives an empty snapshot or string); and the one-line error a
// snapshot's loader gives for some bytes.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "snapshot/file_contents.h"
#include "snapshot/snapshot_loader.h"

namespace memsnap::testing {

inline Snapshot load_test_snapshot(const std::string& path) {
  Result<LoadedSnapshot> loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR "/") + path);
  EXPECT_TRUE(loaded.ok()) << path << ": " << loaded.error();
  return loaded.ok() ? std::move(loaded).value().snapshot : Snapshot{};
}

inline std::string data_file_bytes(const std::string& path) {
  auto contents = read_file_contents(std::string(MEMSNAP_TEST_DATA_DIR "/") + path, 64 << 20);
  EXPECT_TRUE(contents.ok()) << path << ": " << contents.error();
  return contents.ok() ? contents.value() : std::string();
}

// Empty when the bytes load.
inline std::string load_error(const std::string& bytes) {
  auto loaded = load_snapshot_from_memory(bytes);
  return loaded.ok() ? std::string() : loaded.error();
}

}  // namespace memsnap::testing
