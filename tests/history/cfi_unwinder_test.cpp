// The CFI walker against libunwind on the same stacks: every frame it reports must be the
// one libunwind reports, or it must give up so that capture_stack falls back.
#include "history/cfi_unwinder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

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

// Walks from more places than the walker remembers, three times over: the memos are
// replaced in turn while hints still name them, and every walk must still be the one
// libunwind gives, remembered, half-remembered or walked afresh.
TEST(CfiUnwinder, MoreDistinctWalksThanTheWalkerRemembersAllComeOutRight) {
  for (int pass = 0; pass < 3; ++pass) {
    for (int n = 1; n <= 700; ++n) {
      SCOPED_TRACE(testing::Message() << "pass " << pass << ", walk " << n);
      expect_same_callers(cfi_test_frames::through_variable_length_array(16 * n));
      expect_same_callers(cfi_test_frames::through_one_of_several_callers(n));
      if (HasFailure()) return;
    }
  }
}

// Call paths that share their first frames, part, and meet again, walked in turn. Where
// they start, the walker keeps a hint to the last few walks that went through, so up to that
// many paths are each found there and taken over whole. More paths than that push each
// other's hints out: each walks its first steps again and is remembered again as a join of
// another, unless the caller gives a key per path (as the recorder gives the interpreter's
// innermost frames), under which each is found whole before its first step. The frames are
// the same every way.
TEST(CfiUnwinder, PathsThatShareTheirFirstFramesAreFoundWithoutWalkingThemAgain) {
  struct Case {
    int paths;
    bool keyed;
    bool walked_again;
  };
  for (const Case c : {Case{2, false, false}, Case{cfi_test_frames::kMiddles, false, true},
                       Case{cfi_test_frames::kMiddles, true, false}}) {
    SCOPED_TRACE(testing::Message() << c.paths << " paths, " << (c.keyed ? "keyed" : "not keyed"));
    std::vector<std::vector<uintptr_t>> seen(static_cast<size_t>(c.paths));
    memsnap::CfiWalkCounts before;
    for (int round = 0; round < 22; ++round) {
      if (round == 2) before = memsnap::cfi_walk_counts();
      for (int side = 0; side < c.paths; ++side) {
        std::vector<uintptr_t> frames =
            cfi_test_frames::through_one_of_several_middles(side, c.keyed ? 100 + side : 0);
        ASSERT_GE(frames.size(), 10u);
        frames.resize(10);  // up to the frame that asked for the walk
        auto& first = seen[static_cast<size_t>(side)];
        if (round == 0) first = frames;
        ASSERT_EQ(frames, first) << "round " << round << ", side " << side;
      }
    }
    for (size_t a = 0; a < seen.size(); ++a)
      for (size_t b = a + 1; b < seen.size(); ++b) EXPECT_NE(seen[a], seen[b]) << a << ", " << b;
    const memsnap::CfiWalkCounts after = memsnap::cfi_walk_counts();
    const uint64_t walks = 20u * static_cast<uint64_t>(c.paths);
    EXPECT_EQ(after.walks - before.walks, walks);
    if (c.walked_again) {
      EXPECT_GE(after.steps_walked - before.steps_walked, walks * 5);
      EXPECT_GT(after.remembered, before.remembered);
    } else {
      EXPECT_EQ(after.steps_walked, before.steps_walked);
      EXPECT_EQ(after.remembered, before.remembered);
    }
  }
}

// A walk told where to end stops at the first frame whose return address lies there; the
// walks remembered for reuse are kept apart by where they were to end, so a whole walk never
// comes back cut short and a cut walk never comes back long.
TEST(CfiUnwinder, EndsAtTheFirstFrameInsideTheStopCodeWhetherWalkedOrRemembered) {
  const TwoWalks whole = cfi_test_frames::through_recursion(6);
  expect_same_callers(whole);
  // The first return address above the recursion that the stack holds once.
  size_t end = 0;
  for (size_t i = 3; i < whole.libunwind.size() && end == 0; ++i)
    if (std::count(whole.libunwind.begin(), whole.libunwind.end(), whole.libunwind[i]) == 1) end = i;
  ASSERT_GT(end, 0u);
  const memsnap::StopCode stop{whole.libunwind[end] - 1, whole.libunwind[end]};
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    cfi_test_frames::end_cfi_walks_at(stop);
    for (int again = 0; again < 2; ++again) {  // walked, then taken from the walker's memory
      const TwoWalks cut = cfi_test_frames::through_recursion(6);
      ASSERT_EQ(cut.cfi.size(), end + 1);
      for (size_t i = 1; i <= end; ++i) EXPECT_EQ(cut.cfi[i], whole.libunwind[i]) << i;
    }
    cfi_test_frames::end_cfi_walks_at({});
    EXPECT_EQ(cfi_test_frames::through_recursion(6).cfi.size(), whole.cfi.size());
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

// A walk and the note kept with it, from one of two callers of one function.
struct NotedWalk {
  std::vector<uintptr_t> frames;
  memsnap::StackNote* note = nullptr;
  bool noted = false;  // kNotedStack: the frames were left out for the note's owner
};
volatile int g_noted_sink = 0;

__attribute__((noinline)) NotedWalk walk_noted(size_t skip, uint64_t note_owner) {
  NotedWalk walk;
  walk.frames.resize(memsnap::kMaxStackDepth);
  const size_t count = memsnap::capture_stack_cfi(walk.frames.data(), walk.frames.size(), skip, &walk.note,
                                                  {}, 0, note_owner);
  walk.noted = count == memsnap::kNotedStack;
  walk.frames.resize(count == memsnap::kUnsupportedStack || walk.noted ? 0 : count);
  g_noted_sink = g_noted_sink + 1;
  return walk;
}
__attribute__((noinline)) NotedWalk noted_via_first(size_t skip, uint64_t note_owner = 0) {
  NotedWalk walk = walk_noted(skip, note_owner);
  g_noted_sink = g_noted_sink + 1;
  return walk;
}
__attribute__((noinline)) NotedWalk noted_via_second(size_t skip, uint64_t note_owner = 0) {
  NotedWalk walk = walk_noted(skip, note_owner);
  g_noted_sink = g_noted_sink + 2;
  return walk;
}

TEST(CfiUnwinder, NotesComeBackOnlyWithTheFramesTheyWereWrittenFor) {
  constexpr uint64_t kOwner = 42;
  std::map<std::vector<uintptr_t>, uint32_t> value_of;  // what each frame list was noted as
  int hits = 0;
  for (int i = 0; i < 600; ++i) {
    SCOPED_TRACE(i);
    const size_t skip = (i / 7) % 2;  // another cut of the same walk is other frames
    const NotedWalk walk = i % 3 == 0 ? noted_via_first(skip) : noted_via_second(skip);
    ASSERT_FALSE(walk.frames.empty());
    ASSERT_NE(walk.note, nullptr);
    const auto known = value_of.try_emplace(walk.frames, static_cast<uint32_t>(value_of.size() + 1)).first;
    if (walk.note->owner == kOwner) {
      ++hits;
      ASSERT_EQ(walk.note->value, known->second);
    } else {
      *walk.note = {kOwner, known->second};
    }
  }
  EXPECT_EQ(value_of.size(), 4u);  // two callers, two cuts
  EXPECT_GT(hits, 400);            // and repeated walks do bring their notes back
}

// A caller that names itself the note's owner gets a repeated walk as its note alone: no
// frames, kNotedStack. The note is the one it wrote for that path; any other owner, and the
// first walk of a path, still get the frames.
TEST(CfiUnwinder, ARepeatedWalkComesAsItsOwnersNoteWithoutFrames) {
  constexpr uint64_t kOwner = 42, kStranger = 43;
  std::map<int, std::vector<uintptr_t>> frames_of;  // per caller
  int noted = 0;
  for (int i = 0; i < 600; ++i) {
    SCOPED_TRACE(i);
    const int caller = i % 3 == 0 ? 1 : 2;
    const uint64_t owner = i % 5 == 0 ? kStranger : kOwner;
    const NotedWalk walk = caller == 1 ? noted_via_first(0, owner) : noted_via_second(0, owner);
    ASSERT_NE(walk.note, nullptr);
    if (walk.noted) {
      ++noted;
      ASSERT_EQ(owner, kOwner);
      ASSERT_EQ(walk.note->owner, kOwner);
      ASSERT_EQ(walk.note->value, static_cast<uint32_t>(caller));
      continue;
    }
    ASSERT_FALSE(walk.frames.empty());
    const auto known = frames_of.try_emplace(caller, walk.frames).first;
    ASSERT_EQ(walk.frames, known->second);
    if (walk.note->owner == kOwner) {
      ASSERT_EQ(walk.note->value, static_cast<uint32_t>(caller));
    }
    *walk.note = {kOwner, static_cast<uint32_t>(caller)};
  }
  EXPECT_NE(frames_of[1], frames_of[2]);
  EXPECT_GT(noted, 400);  // every walk after the first of its path, but the stranger's
}

// Code without frame pointers keeps data in %rbp, and the callee saves it in its frame: a
// word that differs at every call although nothing above reads %rbp. The walk from the same
// place must still be known again (its note comes back), and give the same frames.
TEST(CfiUnwinder, ASavedRbpWordNoStepReadsDoesNotKeepAWalkFromBeingKnownAgain) {
  constexpr uint64_t kOwner = 7;
  std::vector<uintptr_t> first;
  int hits = 0;
  for (uintptr_t value = 1; value < 100; ++value) {
    SCOPED_TRACE(value);
    const cfi_test_frames::NotedWalk walk = cfi_test_frames::through_rbp_holding(value * 0x10001);
    ASSERT_GE(walk.cfi.size(), 3u);
    ASSERT_NE(walk.note, nullptr);
    if (first.empty()) {
      first = walk.cfi;
      *walk.note = {kOwner, 1};
      continue;
    }
    ASSERT_EQ(walk.cfi, first);
    if (walk.note->owner == kOwner) ++hits;
  }
  EXPECT_EQ(hits, 98);
}

TEST(CfiRules, AddressesOutsideAnyModuleHaveNoRule) {
  EXPECT_EQ(memsnap::find_frame_rule(0x10).kind, memsnap::FrameRule::Kind::kNoInfo);
  const auto here = reinterpret_cast<uintptr_t>(&expect_same_callers);
  EXPECT_EQ(memsnap::find_frame_rule(here + 1).kind, memsnap::FrameRule::Kind::kStep);
}

}  // namespace cfi_unwinder_test
