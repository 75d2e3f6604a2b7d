// Interpreter frames (Python's, through a source like python/native/python_frames.h) land in
// snapshots in call order: each run of the evaluation loop takes the place of the C++ frame
// that ran it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "history/interpreter_frames.h"
#include "snapshot_test_support.h"

namespace interpreter_frames_test {

using memsnap::kInterpreterFrameBit;
using memsnap::kInterpreterRunEnd;
using memsnap::kInterpreterTokenBit;

// Two runs of a fake evaluation loop: the inner one ran "inner_a" (innermost) and "inner_b",
// the outer one ran "outer".
class FakeInterpreter final : public memsnap::InterpreterFrames {
 public:
  static uintptr_t frame(uintptr_t n) { return kInterpreterTokenBit | kInterpreterFrameBit | n; }

  size_t capture(uintptr_t* tokens, size_t max) override {
    const std::vector<uintptr_t> words = {frame(0), frame(1), kInterpreterRunEnd, frame(2),
                                          kInterpreterRunEnd};
    const size_t count = std::min(max, words.size());
    std::copy(words.begin(), words.begin() + static_cast<long>(count), tokens);
    ++captures;
    return count;
  }
  memsnap::SourceFrame resolve(uintptr_t token) override {
    static const char* names[] = {"inner_a", "inner_b", "outer"};
    return {names[token & memsnap::kInterpreterPayloadMask], "model.py",
            static_cast<int>(10 + (token & memsnap::kInterpreterPayloadMask))};
  }
  bool is_evaluation_loop(std::string_view function) const override {
    return function.find("fake_evaluation_loop") != std::string_view::npos;
  }
  int captures = 0;
};

std::vector<std::string> functions_of(const memsnap::Snapshot& s, memsnap::StackIndex stack) {
  std::vector<std::string> out;
  if (stack < 0) return out;
  for (uint32_t frame : s.stacks.at(static_cast<size_t>(stack))) out.push_back(s.frames[frame].function);
  return out;
}

size_t position_of(const std::vector<std::string>& functions, const std::string& wanted) {
  for (size_t i = 0; i < functions.size(); ++i)
    if (functions[i].find(wanted) != std::string::npos) return i;
  return functions.size();
}

__attribute__((noinline)) void* fake_evaluation_loop_inner(memsnap::CachingAllocator& allocator) {
  void* p = allocator.allocate(4096);
  asm volatile("" ::: "memory");
  return p;
}

__attribute__((noinline)) void* fake_evaluation_loop_outer(memsnap::CachingAllocator& allocator) {
  void* p = fake_evaluation_loop_inner(allocator);
  asm volatile("" ::: "memory");
  return p;
}

struct Recorded {
  snapshot_test::RecordedProgram program;
  FakeInterpreter interpreter;
  explicit Recorded(bool cpp_stacks) {
    program.recorder.set_interpreter_frames(&interpreter);
    memsnap::HistorySettings settings;
    settings.level = memsnap::HistoryLevel::kAll;
    settings.cpp_stacks = cpp_stacks;
    settings.interpreter_stacks = true;
    program.recorder.configure(settings);
  }
  std::vector<std::string> allocation_stack() {
    program.held.push_back(fake_evaluation_loop_outer(program.allocator));
    const memsnap::Snapshot s = memsnap::take_snapshot(program.allocator, &program.recorder);
    for (const auto& segment : s.segments)
      for (const auto& block : segment.blocks)
        if (block.state == memsnap::BlockState::kActiveAllocated) return functions_of(s, block.stack);
    return {};
  }
};

TEST(InterpreterFrames, EachRunTakesThePlaceOfTheLoopFrameThatRanIt) {
  Recorded recorded(/*cpp_stacks=*/true);
  const std::vector<std::string> functions = recorded.allocation_stack();
  ASSERT_GE(functions.size(), 4u);
  EXPECT_EQ(position_of(functions, "fake_evaluation_loop"), functions.size())
      << "the loop's own C++ frames are replaced";
  const size_t inner_a = position_of(functions, "inner_a");
  const size_t inner_b = position_of(functions, "inner_b");
  const size_t outer = position_of(functions, "outer");
  const size_t test_body = position_of(functions, "allocation_stack");
  ASSERT_LT(outer, functions.size());
  EXPECT_EQ(inner_b, inner_a + 1);
  EXPECT_EQ(outer, inner_b + 1) << "nothing of C++ ran between the two loop frames";
  EXPECT_LT(outer, test_body) << "the test body that called the loop is further out";
  EXPECT_GT(recorded.interpreter.captures, 0);
}

TEST(InterpreterFrames, WithoutCppStacksTheStackIsTheInterpretersAlone) {
  Recorded recorded(/*cpp_stacks=*/false);
  EXPECT_EQ(recorded.allocation_stack(), (std::vector<std::string>{"inner_a", "inner_b", "outer"}));
}

TEST(InterpreterFrames, SkippedActionsAreNotTraced) {
  snapshot_test::RecordedProgram program;
  memsnap::HistorySettings settings;
  settings.level = memsnap::HistoryLevel::kAll;
  settings.skipped_actions = 1u << static_cast<unsigned>(memsnap::TraceAction::kFreeRequested);
  program.recorder.configure(settings);
  snapshot_test::run_training_step(program);
  size_t frees_requested = 0, frees_completed = 0, allocs = 0;
  for (const memsnap::HistoryEvent& e : program.recorder.trace(0)) {
    frees_requested += e.action == memsnap::TraceAction::kFreeRequested;
    frees_completed += e.action == memsnap::TraceAction::kFreeCompleted;
    allocs += e.action == memsnap::TraceAction::kAlloc;
  }
  EXPECT_EQ(frees_requested, 0u);
  EXPECT_EQ(frees_completed, 2u);
  EXPECT_EQ(allocs, 7u);
}

}  // namespace interpreter_frames_test
