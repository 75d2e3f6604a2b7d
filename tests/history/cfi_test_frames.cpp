#include "tests/history/cfi_test_frames.h"

#include <alloca.h>
#include <signal.h>

#include <cstring>

#include "history/cfi_unwinder.h"
#include "history/stack_capture.h"

namespace cfi_test_frames {
namespace {

volatile int g_sink = 0;
memsnap::StopCode g_stop;

__attribute__((noinline)) TwoWalks walk_both() {
  TwoWalks walks;
  walks.libunwind.resize(memsnap::kMaxStackDepth);
  walks.cfi.resize(memsnap::kMaxStackDepth);
  walks.libunwind.resize(memsnap::capture_stack_libunwind(walks.libunwind.data(), walks.libunwind.size()));
  const size_t count = memsnap::capture_stack_cfi(walks.cfi.data(), walks.cfi.size(), 0, nullptr, g_stop);
  walks.unsupported = count == memsnap::kUnsupportedStack;
  walks.cfi.resize(walks.unsupported ? 0 : count);
  g_sink = g_sink + 1;  // no tail call: this frame stays the innermost of both walks
  return walks;
}

__attribute__((noinline)) TwoWalks recurse(int depth) {
  if (depth == 0) return walk_both();
  TwoWalks walks = recurse(depth - 1);
  g_sink = g_sink + depth;
  return walks;
}

__attribute__((noinline)) TwoWalks with_array(int n) {
  char* bytes = static_cast<char*>(alloca(static_cast<size_t>(n)));
  std::memset(bytes, n, static_cast<size_t>(n));
  TwoWalks walks = walk_both();
  g_sink = g_sink + bytes[n - 1];
  return walks;
}

// Two callers of one function, with frames of the same size: the shared function's frame
// starts from the same registers whichever called it, and only the return address above
// it tells them apart.
__attribute__((noinline)) TwoWalks shared_inner() {
  TwoWalks walks = walk_both();
  g_sink = g_sink + 1;
  return walks;
}

__attribute__((noinline)) TwoWalks via_first() {
  TwoWalks walks = shared_inner();
  g_sink = g_sink + 1;
  return walks;
}

__attribute__((noinline)) TwoWalks via_second() {
  TwoWalks walks = shared_inner();
  g_sink = g_sink + 2;
  return walks;
}

// Paths that part above their innermost frames and meet again (through_one_of_several_middles).
// Each function's own constant keeps the compiler from folding the two sides into one.
uint64_t g_path_key = 0;

__attribute__((noinline)) std::vector<uintptr_t> walk_cfi() {
  std::vector<uintptr_t> frames(memsnap::kMaxStackDepth);
  const size_t count =
      memsnap::capture_stack_cfi(frames.data(), frames.size(), 0, nullptr, g_stop, g_path_key);
  frames.resize(count == memsnap::kUnsupportedStack ? 0 : count);
  g_sink = g_sink + 1;
  return frames;
}

template <int Level>
__attribute__((noinline)) std::vector<uintptr_t> shared_level() {
  std::vector<uintptr_t> frames;
  if constexpr (Level == 1)
    frames = walk_cfi();
  else
    frames = shared_level<Level - 1>();
  g_sink = g_sink + Level;
  return frames;
}

template <int Side, int Level>
__attribute__((noinline)) std::vector<uintptr_t> middle_level() {
  std::vector<uintptr_t> frames;
  if constexpr (Level == 1)
    frames = shared_level<3>();
  else
    frames = middle_level<Side, Level - 1>();
  g_sink = g_sink + 10 * (Side + 1) + Level;
  return frames;
}

__attribute__((noinline)) std::vector<uintptr_t> meet(std::vector<uintptr_t> (*middle)()) {
  std::vector<uintptr_t> frames = middle();  // one call site for both sides
  g_sink = g_sink + 1;
  return frames;
}

TwoWalks g_from_handler;

// Calls fn with %rbp holding `value`; its CFA is %rsp-based and %rbp is saved at CFA - 16
// (the shape GCC gives a function that uses %rbp as an ordinary register). The callee saves
// `value` in its own frame.
extern "C" void memsnap_test_call_with_rbp(void (*fn)(), uintptr_t value);
asm(R"(
  .text
  .p2align 4
  .type memsnap_test_call_with_rbp, @function
memsnap_test_call_with_rbp:
  .cfi_startproc
  push %rbp
  .cfi_def_cfa_offset 16
  .cfi_offset %rbp, -16
  mov %rsi, %rbp
  call *%rdi
  pop %rbp
  .cfi_def_cfa_offset 8
  ret
  .cfi_endproc
  .size memsnap_test_call_with_rbp, .-memsnap_test_call_with_rbp
)");

NotedWalk g_noted;

__attribute__((noinline)) void walk_noted() {
  g_noted.cfi.resize(memsnap::kMaxStackDepth);
  const size_t count = memsnap::capture_stack_cfi(g_noted.cfi.data(), g_noted.cfi.size(), 0, &g_noted.note);
  g_noted.cfi.resize(count == memsnap::kUnsupportedStack ? 0 : count);
  g_sink = g_sink + 1;
}

void handler(int) { g_from_handler = walk_both(); }

}  // namespace

void end_cfi_walks_at(const memsnap::StopCode& stop) { g_stop = stop; }

TwoWalks through_recursion(int depth) {
  TwoWalks walks = recurse(depth);
  g_sink = g_sink + 1;
  return walks;
}

TwoWalks through_variable_length_array(int n) {
  TwoWalks walks = with_array(n);
  g_sink = g_sink + 1;
  return walks;
}

TwoWalks through_one_of_several_callers(int which) {
  TwoWalks walks = which % 3 == 0 ? via_first() : which % 3 == 1 ? via_second() : recurse(which % 5);
  g_sink = g_sink + 1;
  return walks;
}

std::vector<uintptr_t> through_one_of_several_middles(int side, uint64_t path_key) {
  static constexpr std::vector<uintptr_t> (*kMiddle[kMiddles])() = {
      &middle_level<0, 3>, &middle_level<1, 3>, &middle_level<2, 3>,
      &middle_level<3, 3>, &middle_level<4, 3>, &middle_level<5, 3>};
  g_path_key = path_key;
  return meet(kMiddle[side]);
}

TwoWalks walk_from_caller() {
  TwoWalks walks = walk_both();
  g_sink = g_sink + 1;
  return walks;
}

NotedWalk through_rbp_holding(uintptr_t value) {
  g_noted = NotedWalk{};
  memsnap_test_call_with_rbp(walk_noted, value);
  g_sink = g_sink + 1;
  return g_noted;
}

TwoWalks through_signal_handler() {
  struct sigaction action {};
  struct sigaction previous {};
  action.sa_handler = handler;
  sigaction(SIGUSR1, &action, &previous);
  raise(SIGUSR1);
  sigaction(SIGUSR1, &previous, nullptr);
  return g_from_handler;
}

}  // namespace cfi_test_frames
