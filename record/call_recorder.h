// Turns CUPTI callbacks into ledger entries: at the exit of each recorded call that succeeded,
// the allocation or free with the caller's stack; at the exit of one that ran out of memory,
// the request and the device's free bytes, then the hook that writes the OOM snapshot.
//
// A runtime call (cudaMalloc) reaches the driver (cuMemAlloc) underneath, and both report
// callbacks: a thread-local count of runtime calls in progress makes the nested driver call
// count for nothing. A runtime call whose entry was not seen (recording began inside it,
// CUDA's initialization being the first call's work) is left to its driver call.
//
// Never throws into CUDA: a failure (no memory for the ledger) stops recording, said once on
// stderr. Calls made by the hooks themselves (the driver asked for a device's name) are not
// recorded.
#pragma once

#include <cupti_callbacks.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <functional>
#include <string>

#include "history/interpreter_frames.h"
#include "record/allocation_ledger.h"
#include "record/call_stack_trim.h"
#include "record/cuda_calls.h"

namespace memsnap {

// Calls the calling thread makes while one lives are not recorded: a caching allocator's own
// cudaMalloc and cudaFree, whose memory its snapshot already shows (memsnap.torch).
class CallsNotRecorded {
 public:
  CallsNotRecorded();
  ~CallsNotRecorded();
  CallsNotRecorded(const CallsNotRecorded&) = delete;
  CallsNotRecorded& operator=(const CallsNotRecorded&) = delete;
};
// Whether the calling thread's calls are recorded now (no CallsNotRecorded lives on it).
bool calls_recorded_on_this_thread();

struct CallRecorderHooks {
  // The device ordinal of a callback's context (cuptiGetDeviceId); -1 when unknown.
  std::function<int(CUcontext)> device_of;
  // Once per device the program uses: its name and total memory into the ledger.
  std::function<void(int device, AllocationLedger&)> describe_device;
  // The free bytes of the current device, asked after a failed allocation (0: unknown).
  std::function<size_t()> device_free_bytes;
  // After an out-of-memory error is recorded (writes the OOM snapshot).
  std::function<void(int device)> out_of_memory;
};

class CallRecorder {
 public:
  // With `interpreter`, stacks also hold the calling thread's interpreter frames (as the
  // history recorder's do: C++ frames up to the interpreter's loop, then its tokens).
  CallRecorder(AllocationLedger& ledger, CallRecorderHooks hooks, bool capture_stacks,
               CallStackTrim trim = {}, InterpreterFrames* interpreter = nullptr);

  // One CUPTI callback; calls not recorded return at once.
  void on_callback(CUpti_CallbackDomain domain, CUpti_CallbackId id, const CUpti_CallbackData& data);
  // Records nothing more (after the at-exit snapshot; in a forked child).
  void stop() { stopped_.store(true, std::memory_order_relaxed); }
  // Records again after stop(), unless recording failed.
  void resume() {
    if (!failed_.load(std::memory_order_relaxed)) stopped_.store(false, std::memory_order_relaxed);
  }
  bool stopped() const { return stopped_.load(std::memory_order_relaxed); }
  // Stops recording after `what` went wrong, saying so on stderr (once).
  void fail(const std::string& what);

 private:
  void record(int device, const RecordedApi& api, const DecodedCall& call);
  void describe_once(int device);

  AllocationLedger& ledger_;
  const CallRecorderHooks hooks_;
  const bool capture_stacks_;
  const CallStackTrim trim_;
  InterpreterFrames* const interpreter_;
  // Where the interpreter's evaluation loop lies, for the C++ walk to end at: found once, here.
  // Finding it goes through the dynamic loader (a symbol lookup and a scan of the executable's
  // symbols, under the loader's lock): several µs, and a lock a callback must not take.
  const StopCode interpreter_stop_;
  std::atomic<bool> stopped_{false};
  std::atomic<bool> failed_{false};
  std::array<std::atomic<bool>, AllocationLedger::kMaxDevices> described_{};
};

}  // namespace memsnap
