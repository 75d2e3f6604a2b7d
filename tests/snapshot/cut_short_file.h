// A file cut short after it was opened (torch's _dump_snapshot rewrites a file in place): the
// mapped pages past its new end read as zeros (a page wholly past it would otherwise raise
// SIGBUS), and a read must fail with one line that says what happened; the process lives on.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "snapshot/byte_source.h"

namespace memsnap::testing_support {

// Writes `bytes` to `path`, opens it, cuts it to a third, to a page boundary near there and to
// a page before its end, and checks what `read(ByteSource&)` (a Result) makes of each.
template <typename Read>
void expect_reads_of_a_file_cut_short_fail(const std::string& bytes, const std::string& path, Read read) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (const size_t cut : {bytes.size() / 3, bytes.size() / 3 / page * page, bytes.size() - page}) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    auto source = ByteSource::open_file(path, 64 << 20);
    ASSERT_TRUE(source.ok()) << source.error();
    ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(cut)), 0);
    const auto result = read(*source.value());
    ASSERT_FALSE(result.ok()) << "cut at " << cut;
    EXPECT_NE(result.error().find("cut short while it was read"), std::string::npos) << result.error();
    EXPECT_EQ(result.error().find('\n'), std::string::npos);
  }
  std::remove(path.c_str());
}

}  // namespace memsnap::testing_support
