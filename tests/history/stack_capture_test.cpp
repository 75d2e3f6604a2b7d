// Stacks are captured as addresses and turned into the caller's own name, file and line.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "history/stack_capture.h"
#include "history/stack_table.h"
#include "history/symbolizer.h"

// Outside namespace memsnap on purpose: user code, as the symbolizer sees it.
namespace stack_capture_test {

int g_capture_line = 0;

__attribute__((noinline)) std::vector<uintptr_t> capture_from_a_named_function() {
  std::vector<uintptr_t> frames(memsnap::kMaxStackDepth);
  g_capture_line = __LINE__ + 1;
  const size_t count = memsnap::capture_stack(frames.data(), frames.size());
  frames.resize(count);
  asm volatile("" ::: "memory");  // keep the call from becoming a tail call
  return frames;
}

TEST(StackCapture, FindsTheCallingFunctionByNameFileAndLine) {
  const std::vector<uintptr_t> frames = capture_from_a_named_function();
  ASSERT_GE(frames.size(), 2u);
  bool found = false;
  for (uintptr_t address : frames) {
    for (const memsnap::SourceFrame& frame : memsnap::process_symbolizer().frames_at(address)) {
      if (frame.function.find("capture_from_a_named_function") == std::string::npos) continue;
      found = true;
      EXPECT_NE(frame.file.find("stack_capture_test.cpp"), std::string::npos) << frame.file;
      EXPECT_EQ(frame.line, g_capture_line);
    }
  }
  EXPECT_TRUE(found) << "no frame named capture_from_a_named_function";
  // The test body that called it is further out.
  bool caller_found = false;
  for (uintptr_t address : frames)
    for (const memsnap::SourceFrame& frame : memsnap::process_symbolizer().frames_at(address))
      caller_found |= frame.function.find("FindsTheCallingFunctionByNameFileAndLine") != std::string::npos;
  EXPECT_TRUE(caller_found);
}

// Each way of walking ends at the stop code's first frame: the DWARF walk, libunwind's
// through end_at_stop, and the frame-pointer walk (this file keeps frame pointers).
TEST(StackCapture, EveryWalkEndsAtTheFirstFrameInsideTheStopCode) {
  const std::vector<uintptr_t> whole = capture_from_a_named_function();
  ASSERT_GE(whole.size(), 4u);
  const memsnap::StopCode stop{whole[2] - 1, whole[2]};
  EXPECT_EQ(memsnap::end_at_stop(whole.data(), whole.size(), stop), 3u);
  EXPECT_EQ(memsnap::end_at_stop(whole.data(), whole.size(), {}), whole.size());

  uintptr_t frames[memsnap::kMaxStackDepth];
  const size_t dwarf = memsnap::capture_stack(frames, memsnap::kMaxStackDepth, 0, nullptr, stop);
  const size_t dwarf_whole = memsnap::capture_stack(frames, memsnap::kMaxStackDepth);
  // From this test's frame: one frame fewer than capture_from_a_named_function's walk.
  EXPECT_EQ(dwarf, 2u);
  EXPECT_EQ(dwarf_whole, whole.size() - 1);
  uintptr_t by_pointers[memsnap::kMaxStackDepth];
  const size_t pointers = memsnap::capture_stack_frame_pointers(by_pointers, memsnap::kMaxStackDepth, 0, stop);
  ASSERT_GE(pointers, 1u);
  EXPECT_EQ(by_pointers[pointers - 1], whole[2]);
  EXPECT_LE(pointers, 2u);
}

int g_inlined_line = 0;

__attribute__((always_inline)) inline size_t capture_in_inlined_code(uintptr_t* frames) {
  g_inlined_line = __LINE__ + 1;
  return memsnap::capture_stack(frames, memsnap::kMaxStackDepth);
}

__attribute__((noinline)) std::vector<uintptr_t> call_inlined_code() {
  std::vector<uintptr_t> frames(memsnap::kMaxStackDepth);
  frames.resize(capture_in_inlined_code(frames.data()));
  asm volatile("" ::: "memory");
  return frames;
}

TEST(Symbolizer, ShowsFramesTheCompilerInlined) {
  const std::vector<uintptr_t> frames = call_inlined_code();
  ASSERT_FALSE(frames.empty());
  const auto resolved = memsnap::process_symbolizer().frames_at(frames.front());
  ASSERT_GE(resolved.size(), 2u) << "no inlined frame at the capture's return address: "
                                 << resolved[0].function << " " << resolved[0].file << ":"
                                 << resolved[0].line;
  EXPECT_NE(resolved[0].function.find("capture_in_inlined_code"), std::string::npos)
      << resolved[0].function;
  EXPECT_EQ(resolved[0].line, g_inlined_line);
  EXPECT_NE(resolved[1].function.find("call_inlined_code"), std::string::npos)
      << resolved[1].function;
  EXPECT_NE(resolved[1].file.find("stack_capture_test.cpp"), std::string::npos);
}

TEST(Symbolizer, DegradesToModuleOffsetOrAddressWithoutDebugInfo) {
  // An address inside libc (no debug info on this machine) and one mapped nowhere.
  const auto libc_frames =
      memsnap::process_symbolizer().frames_at(reinterpret_cast<uintptr_t>(&::abort) + 4);
  ASSERT_FALSE(libc_frames.empty());
  EXPECT_FALSE(libc_frames.back().function.empty());
  const auto nowhere = memsnap::process_symbolizer().frames_at(0x10);
  ASSERT_EQ(nowhere.size(), 1u);
  EXPECT_EQ(nowhere[0].function, "0x10");
  EXPECT_EQ(memsnap::demangle("_ZN7memsnap5BlockC2Ev"), "memsnap::Block::Block()");
  EXPECT_EQ(memsnap::demangle("not_mangled"), "not_mangled");
}

TEST(StackTable, InternsEachPathOnceAndStopsAtItsBound) {
  memsnap::StackTable table(/*max_frames=*/6);
  const uintptr_t a[] = {1, 2, 3};
  const uintptr_t b[] = {1, 2, 4};
  const memsnap::StackId id_a = table.intern(a, 3);
  EXPECT_EQ(table.intern(a, 3), id_a);
  const memsnap::StackId id_b = table.intern(b, 3);
  EXPECT_NE(id_a, id_b);
  EXPECT_EQ(table.frames(id_b), (std::vector<uintptr_t>{1, 2, 4}));
  EXPECT_EQ(table.intern(a, 2), memsnap::kNoStack);  // full: 6 frames stored
  EXPECT_EQ(table.intern(a, 3), id_a);               // known paths still resolve
  EXPECT_EQ(table.size(), 2u);
  EXPECT_TRUE(table.frames(memsnap::kNoStack).empty());
}

TEST(StackTable, CopiesAStacksFramesUpToTheRoomGiven) {
  memsnap::StackTable table;
  const uintptr_t a[] = {7, 8, 9};
  const memsnap::StackId id = table.intern(a, 3);
  uintptr_t out[4] = {0, 0, 0, 0};
  EXPECT_EQ(table.copy_frames(id, out, 4), 3u);
  EXPECT_EQ((std::vector<uintptr_t>(out, out + 4)), (std::vector<uintptr_t>{7, 8, 9, 0}));
  uintptr_t two[2] = {0, 0};
  EXPECT_EQ(table.copy_frames(id, two, 2), 2u);
  EXPECT_EQ(two[1], 8u);
  EXPECT_EQ(table.copy_frames(id + 1, out, 4), 0u);
  EXPECT_EQ(table.copy_frames(memsnap::kNoStack, out, 4), 0u);
}

TEST(StackTable, KeyNamesOneTablesContentsUntilCleared) {
  memsnap::StackTable first;
  memsnap::StackTable second;
  EXPECT_NE(first.key(), 0u);
  EXPECT_NE(first.key(), second.key());
  const uint64_t before = first.key();
  const uintptr_t a[] = {1, 2, 3};
  first.intern(a, 3);
  EXPECT_EQ(first.key(), before);  // interning adds, it changes no id
  first.clear();
  EXPECT_NE(first.key(), before);
  EXPECT_NE(first.key(), second.key());
}

}  // namespace stack_capture_test

namespace stack_capture_test {

__attribute__((noinline)) std::vector<uintptr_t> capture_by_frame_pointers() {
  std::vector<uintptr_t> frames(memsnap::kMaxStackDepth);
  frames.resize(memsnap::capture_stack_frame_pointers(frames.data(), frames.size()));
  asm volatile("" ::: "memory");
  return frames;
}

TEST(StackCapture, FramePointerWalkFindsTheSameCallers) {
  const std::vector<uintptr_t> by_frame_pointer = capture_by_frame_pointers();
  ASSERT_GE(by_frame_pointer.size(), 2u);
  bool found = false;
  for (uintptr_t address : by_frame_pointer)
    for (const memsnap::SourceFrame& frame : memsnap::process_symbolizer().frames_at(address))
      found |= frame.function.find("FramePointerWalkFindsTheSameCallers") != std::string::npos;
  EXPECT_TRUE(found);
  EXPECT_NE(memsnap::process_symbolizer().frames_at(by_frame_pointer[0])[0].function.find(
                "capture_by_frame_pointers"),
            std::string::npos);
  // Bounded by the buffer, whatever the chain holds.
  uintptr_t one[1];
  EXPECT_LE(memsnap::capture_stack_frame_pointers(one, 1), 1u);
}

}  // namespace stack_capture_test

namespace stack_capture_test {

__attribute__((noinline)) std::vector<uintptr_t> walk_with(bool libunwind) {
  std::vector<uintptr_t> frames(memsnap::kMaxStackDepth);
  frames.resize(libunwind ? memsnap::capture_stack_libunwind(frames.data(), frames.size())
                          : memsnap::capture_stack_libgcc(frames.data(), frames.size()));
  asm volatile("" ::: "memory");
  return frames;
}

TEST(StackCapture, LibgccWalkReportsTheFramesLibunwindReports) {
  ASSERT_TRUE(memsnap::stack_fallback_is_libunwind()) << "libunwind.so.8 is not installed";
  std::vector<uintptr_t> by_libunwind;
  std::vector<uintptr_t> by_libgcc;
  // The same call site for both, so every frame but the innermost returns to the same place.
  for (bool libunwind : {true, false}) (libunwind ? by_libunwind : by_libgcc) = walk_with(libunwind);
  ASSERT_GE(by_libunwind.size(), 3u);
  ASSERT_EQ(by_libgcc.size(), by_libunwind.size());
  for (size_t i = 1; i < by_libunwind.size(); ++i) EXPECT_EQ(by_libgcc[i], by_libunwind[i]) << i;
}

// libunwind also defines the C++ exception ABI; were it linked, a process that loaded its C++
// runtime first (Python with PyTorch) could mix two unwinders in one throw and abort. It is
// loaded privately: nothing of it is visible to the rest of the process.
TEST(StackCapture, LibunwindStaysOutOfTheProcesssExceptionMachinery) {
  ASSERT_TRUE(memsnap::stack_fallback_is_libunwind());
  std::vector<uintptr_t> frames(memsnap::kMaxStackDepth);
  ASSERT_GT(memsnap::capture_stack_libunwind(frames.data(), frames.size()), 0u);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "unw_backtrace"), nullptr);
  void* raise = dlsym(RTLD_DEFAULT, "_Unwind_RaiseException");
  ASSERT_NE(raise, nullptr);
  Dl_info info{};
  ASSERT_NE(dladdr(raise, &info), 0);
  // libgcc's (libgcc_s, or linked into the program as clang's sanitizer builds do), never libunwind's.
  EXPECT_EQ(std::string(info.dli_fname).find("libunwind"), std::string::npos) << info.dli_fname;
  EXPECT_THROW(throw std::runtime_error("crosses memsnap's frames"), std::runtime_error);
}

}  // namespace stack_capture_test
