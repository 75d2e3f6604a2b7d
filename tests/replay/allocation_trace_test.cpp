// The trace text parser, including hostile input.
#include "replay/allocation_trace.h"

#include <gtest/gtest.h>

#include <random>

namespace memsnap {
namespace {

TEST(AllocationTrace, ParsesAllocsFreesAndComments) {
  const auto trace = parse_allocation_trace(
      "# a comment\n"
      "a 100 4096 0\n"
      "\n"
      "  a 200 1048576 7\r\n"
      "f 100 0\n");
  ASSERT_TRUE(trace.ok()) << trace.error();
  ASSERT_EQ(trace->events.size(), 3u);
  EXPECT_EQ(trace->events[1].kind, TraceEvent::Kind::kAlloc);
  EXPECT_EQ(trace->events[1].id, 200u);
  EXPECT_EQ(trace->events[1].bytes, 1048576u);
  EXPECT_EQ(trace->events[1].stream, 7);
  EXPECT_EQ(trace->events[2].kind, TraceEvent::Kind::kFree);
}

TEST(AllocationTrace, ReportsTheFirstBadLineByNumber) {
  struct Case {
    const char* text;
    const char* message;
  };
  for (const Case& c : {Case{"a 1 2 0\nx 1 2\n", "line 2: expected"},
                        Case{"a 1 -5 0\n", "line 1: bad byte count"},
                        Case{"a 1 2\n", "line 1: bad stream"},
                        Case{"f abc 0\n", "line 1: bad id"},
                        Case{"a 1 2 0 9\n", "unexpected text"},
                        Case{"a 18446744073709551616 2 0\n", "bad id"},
                        Case{"a 1 1125899906842625 0\n", "larger than any device"}}) {
    const auto trace = parse_allocation_trace(c.text);
    ASSERT_FALSE(trace.ok()) << c.text;
    EXPECT_NE(trace.error().find(c.message), std::string::npos) << trace.error();
    EXPECT_EQ(trace.error().find('\n'), std::string::npos);
  }
}

TEST(AllocationTrace, RefusesOverlongLines) {
  const auto trace = parse_allocation_trace("a 1 " + std::string(10000, '9') + " 0\n");
  ASSERT_FALSE(trace.ok());
  EXPECT_NE(trace.error().find("longer than"), std::string::npos);
}

TEST(AllocationTrace, MissingFileIsAClearError) {
  const auto trace = read_allocation_trace("/nonexistent/x.trace");
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.error(), "/nonexistent/x.trace: cannot open file");
}

TEST(AllocationTrace, RandomBytesNeverCrash) {
  std::mt19937 rng(3);
  const std::string alphabet = "af 0123456789#\n\r\t-x\xff";
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    for (int j = static_cast<int>(rng() % 60); j > 0; --j) text += alphabet[rng() % alphabet.size()];
    const auto trace = parse_allocation_trace(text);
    if (!trace.ok()) {
      EXPECT_EQ(trace.error().find('\n'), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace memsnap
