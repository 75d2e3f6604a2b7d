// A snapshot of tests/data by its path there; a file that cannot be read fails the test and
// gives an empty snapshot.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "snapshot/snapshot_loader.h"

namespace memsnap::testing {

inline Snapshot load_test_snapshot(const std::string& path) {
  Result<LoadedSnapshot> loaded = load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR "/") + path);
  EXPECT_TRUE(loaded.ok()) << path << ": " << loaded.error();
  return loaded.ok() ? std::move(loaded).value().snapshot : Snapshot{};
}

}  // namespace memsnap::testing
