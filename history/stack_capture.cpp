#include "history/stack_capture.h"

#include "history/cfi_unwinder.h"
#include "history/raw_stack_read.h"
#include "history/stack_bounds.h"

#include <dlfcn.h>
#include <unwind.h>

#include <algorithm>
#include <mutex>

namespace memsnap {
namespace {

// libunwind is loaded privately (RTLD_LOCAL), never linked: the library also defines the
// C++ exception ABI (_Unwind_RaiseException, _Unwind_GetLanguageSpecificData, ...) and a weak
// backtrace(). Linked into a process whose C++ runtime was loaded first (a Python
// interpreter with PyTorch), a throw could bind to libunwind's unwinder while libstdc++'s
// personality routine reads the frame through libgcc's, and the process aborts at the first
// exception that crosses memsnap. Where libunwind is missing, libgcc's own walk serves.
using UnwBacktrace = int (*)(void**, int);

UnwBacktrace load_unw_backtrace() {
  void* library = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return nullptr;
  return reinterpret_cast<UnwBacktrace>(dlsym(library, "unw_backtrace"));
}

std::once_flag fallback_loaded;
UnwBacktrace unw_backtrace_fn = nullptr;

struct GccWalk {
  void** frames;
  int capacity;
  int count;
};

_Unwind_Reason_Code record_gcc_frame(_Unwind_Context* context, void* arg) {
  auto* walk = static_cast<GccWalk*>(arg);
  if (walk->count >= walk->capacity) return _URC_END_OF_STACK;
  const uintptr_t ip = _Unwind_GetIP(context);
  if (ip == 0) return _URC_END_OF_STACK;
  walk->frames[walk->count++] = reinterpret_cast<void*>(ip);
  return _URC_NO_REASON;
}

// Return addresses from the innermost frame out; the first is inside this function.
__attribute__((noinline)) int fallback_backtrace(void** frames, int capacity, bool libunwind) {
  int count = 0;
  if (libunwind && unw_backtrace_fn != nullptr) {
    count = unw_backtrace_fn(frames, capacity);
  } else {
    GccWalk walk{frames, capacity, 0};
    _Unwind_Backtrace(record_gcc_frame, &walk);
    count = walk.count;
  }
  asm volatile("" ::: "memory");  // no tail call: this frame must stay on the stack
  return count;
}

}  // namespace

void prepare_stack_capture() {
  std::call_once(fallback_loaded, [] { unw_backtrace_fn = load_unw_backtrace(); });
}

bool stack_fallback_is_libunwind() {
  prepare_stack_capture();
  return unw_backtrace_fn != nullptr;
}

size_t end_at_stop(const uintptr_t* frames, size_t count, const StopCode& stop) {
  for (size_t i = 0; i < count; ++i)
    if (stop.holds_return_address(frames[i])) return i + 1;
  return count;
}

__attribute__((noinline)) size_t capture_stack(uintptr_t* frames, size_t max_frames,
                                               size_t skip, StackNote** note, const StopCode& stop,
                                               uint64_t path_key, uint64_t note_owner) {
  // +1: this function's own frame.
  const size_t count =
      capture_stack_cfi(frames, max_frames, skip + 1, note, stop, path_key, note_owner);
  if (count != kUnsupportedStack) return count;
  return end_at_stop(frames, capture_stack_libunwind(frames, max_frames, skip + 1), stop);
}

namespace {

__attribute__((noinline)) size_t capture_fallback(uintptr_t* frames, size_t max_frames,
                                                  size_t skip, bool libunwind) {
  // +2: fallback_backtrace's frame and this function's, which the walk reports first.
  prepare_stack_capture();
  void* raw[kMaxStackDepth + 16];
  const size_t wanted = std::min(max_frames, kMaxStackDepth) + std::min<size_t>(skip, 14) + 2;
  const int captured = fallback_backtrace(raw, static_cast<int>(wanted), libunwind);
  const size_t first = std::min<size_t>(skip, 14) + 2;
  if (captured <= static_cast<int>(first)) return 0;
  const size_t count = std::min(static_cast<size_t>(captured) - first, max_frames);
  for (size_t i = 0; i < count; ++i) frames[i] = reinterpret_cast<uintptr_t>(raw[first + i]);
  return count;
}

}  // namespace

__attribute__((noinline)) size_t capture_stack_libunwind(uintptr_t* frames, size_t max_frames,
                                                         size_t skip) {
  const size_t count = capture_fallback(frames, max_frames, skip + 1, true);
  asm volatile("" ::: "memory");  // no tail call
  return count;
}

__attribute__((noinline)) size_t capture_stack_libgcc(uintptr_t* frames, size_t max_frames,
                                                      size_t skip) {
  const size_t count = capture_fallback(frames, max_frames, skip + 1, false);
  asm volatile("" ::: "memory");  // no tail call
  return count;
}

__attribute__((noinline)) MEMSNAP_READS_RAW_STACK size_t
capture_stack_frame_pointers(uintptr_t* frames, size_t max_frames, size_t skip,
                             const StopCode& stop) {
  const StackBounds stack = thread_stack_bounds();
  // Each frame starts with the caller's frame pointer, then the return address into it.
  auto frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  size_t count = 0;
  while (count < max_frames) {
    if (frame < stack.low || frame + 2 * sizeof(uintptr_t) > stack.high ||
        frame % alignof(uintptr_t) != 0)
      break;
    const uintptr_t caller_frame = reinterpret_cast<const volatile uintptr_t*>(frame)[0];
    const uintptr_t return_address = reinterpret_cast<const volatile uintptr_t*>(frame)[1];
    if (return_address == 0) break;
    if (skip > 0) {
      --skip;
    } else {
      frames[count++] = return_address;
      if (stop.holds_return_address(return_address)) break;
    }
    if (caller_frame <= frame) break;  // the stack grows down: callers are higher
    frame = caller_frame;
  }
  return count;
}

}  // namespace memsnap
