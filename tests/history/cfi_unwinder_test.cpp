// The CFI walker against libunwind on the same stacks: every frame it reports must be the
// one libunwind reports, or it must give up so that capture_stack falls back.
#include "history/cfi_unwinder.h"

#include <gtest/gtest.h>

#include "history/cfi_rules.h"
#include "history/stack_capture.h"
#include "tests/history/cfi_test_frames.h"

namespace cfi_unwinder_test {

using cfi_test_frames::TwoWalks;

// The innermost return address differs (two calls from one function); the rest must not.
// (The realigned-stack frame GCC gives a main() with over-aligned locals is checked by
// cfi_realigned_main.cpp, a program of its own.)
void expect_same_callers(const TwoWalks& walks) {
  ASSERT_FALSE(walks.unsupported);
  ASSERT_GE(walks.libunwind.size(), 3u);
  ASSERT_EQ(walks.cfi.size(), walks.libunwind.size());
  for (size_t i = 1; i < walks.cfi.size(); ++i)
    EXPECT_EQ(walks.cfi[i], walks.libunwind[i]) << "frame " << i;
}

TEST(CfiUnwinder, MatchesLibunwindThroughStackPointerFrames) {
  expect_same_callers(cfi_test_frames::through_recursion(5));
}

TEST(CfiUnwinder, StopsAtTheSameDepthLimitOnDeepStacks) {
  const TwoWalks walks = cfi_test_frames::through_recursion(100);
  expect_same_callers(walks);
  EXPECT_EQ(walks.cfi.size(), memsnap::kMaxStackDepth);
}

TEST(CfiUnwinder, RememberedWalksAreReusedOnlyWhereTheStackIsUnchanged) {
  for (int which = 0; which < 300; ++which) {
    SCOPED_TRACE(which);
    expect_same_callers(cfi_test_frames::through_one_of_several_callers(which));
    if (HasFailure()) return;
  }
}

TEST(CfiUnwinder, MatchesLibunwindThroughAFrameAddressedFromRbp) {
  expect_same_callers(cfi_test_frames::through_variable_length_array(1000));
}

TEST(CfiUnwinder, GivesUpAtASignalFrameAndCaptureStackFallsBack) {
  const TwoWalks walks = cfi_test_frames::through_signal_handler();
  if (!walks.unsupported) {
    // Some libcs describe the signal trampoline with plain rules: then it must still agree.
    expect_same_callers(walks);
  }
  uintptr_t frames[memsnap::kMaxStackDepth];
  EXPECT_GT(memsnap::capture_stack(frames, memsnap::kMaxStackDepth), 3u);
}

TEST(CfiRules, AddressesOutsideAnyModuleHaveNoRule) {
  EXPECT_EQ(memsnap::find_frame_rule(0x10).kind, memsnap::FrameRule::Kind::kNoInfo);
  const auto here = reinterpret_cast<uintptr_t>(&expect_same_callers);
  EXPECT_EQ(memsnap::find_frame_rule(here + 1).kind, memsnap::FrameRule::Kind::kStep);
}

}  // namespace cfi_unwinder_test
