#include "record/call_stack_trim.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace memsnap {
namespace {

// Addresses inside modules this test has loaded: its own binary and the C library.
uintptr_t in_test_binary() { return reinterpret_cast<uintptr_t>(&in_test_binary) + 1; }
// (A function no sanitizer runtime intercepts: under AddressSanitizer, qsort and the like resolve
// to the interceptor in the test binary.)
uintptr_t in_libc() { return reinterpret_cast<uintptr_t>(dlsym(RTLD_DEFAULT, "gnu_get_libc_version")) + 1; }

TEST(CallStackTrim, ToolFramesInnermostAreDropped) {
  CallStackTrim trim;
  trim.add_tool_module_at(reinterpret_cast<const void*>(&in_test_binary));
  std::vector<uintptr_t> frames = {in_test_binary(), in_test_binary(), in_libc(), in_test_binary()};
  const size_t kept = trim.trim(frames.data(), frames.size());
  ASSERT_EQ(kept, 2u);
  EXPECT_EQ(frames[0], in_libc());
  EXPECT_EQ(frames[1], in_test_binary()) << "tool frames further out are the program's calls";
}

TEST(CallStackTrim, OfTheRuntimesInnermostRunOnlyTheOutermostFrameStays) {
  CallStackTrim trim;
  trim.add_tool_module_at(reinterpret_cast<const void*>(&in_test_binary));
  trim.add_runtime_modules_named("libc.so");
  std::vector<uintptr_t> frames = {in_test_binary(), in_libc(), in_libc() + 1, in_libc() + 2, 0x10};
  const size_t kept = trim.trim(frames.data(), frames.size());
  ASSERT_EQ(kept, 2u);
  EXPECT_EQ(frames[0], in_libc() + 2);
  EXPECT_EQ(frames[1], 0x10u);
}

TEST(CallStackTrim, ModulesNotLoadedTrimNothing) {
  CallStackTrim trim;
  trim.add_tool_modules_named("libnot-loaded-anywhere");
  std::vector<uintptr_t> frames = {in_test_binary(), in_libc()};
  EXPECT_EQ(trim.trim(frames.data(), frames.size()), 2u);
  EXPECT_EQ(trim.trim(frames.data(), 0), 0u);
}

}  // namespace
}  // namespace memsnap
