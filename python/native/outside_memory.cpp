#include "python/native/outside_memory.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#ifdef MEMSNAP_OUTSIDE_MEMORY
#include "record/allocation_ledger.h"
#include "record/call_recorder.h"
#include "record/call_stack_trim.h"
#include "record/cuda_calls.h"
#include "record/cuda_driver_queries.h"
#include "record/cupti_library.h"
#endif

namespace memsnap::pytorch {
namespace {

#ifdef MEMSNAP_OUTSIDE_MEMORY

// One per recording (a ledger and its recorder); never destroyed, since a callback may still
// run on another thread as recording stops.
struct Recording {
  std::unique_ptr<AllocationLedger> ledger;
  std::unique_ptr<CallRecorder> recorder;
};

struct State {
  std::mutex mutex;
  bool started = false;  // ever
  bool recording = false;
  std::string unrecorded_reason;
  std::optional<CuptiLibrary> cupti;
  CUpti_SubscriberHandle subscriber = nullptr;
  Recording* current = nullptr;
  InterpreterFrames* interpreter = nullptr;
};

State& state() {
  static State* kept = new State;  // never destroyed: callbacks may run during exit
  return *kept;
}

void CUPTIAPI on_callback(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  static_cast<CallRecorder*>(user)->on_callback(domain, id, *static_cast<const CUpti_CallbackData*>(data));
}

// "" or why the subscription failed; under the state's mutex.
std::string subscribe(State& s, size_t max_entries) {
  if (!s.cupti) {
    Result<CuptiLibrary> loaded = load_cupti("");
    if (!loaded) return loaded.error();
    s.cupti = std::move(loaded).value();
  }
  CallStackTrim trim;
  trim.add_tool_module_at(reinterpret_cast<const void*>(&on_callback));
  trim.add_tool_modules_named("libcupti");
  trim.add_tool_modules_named("libcuda.so");
  trim.add_runtime_modules_named("libcudart");
  static const CudaDriverQueries driver = CudaDriverQueries::from_loaded_driver();
  CallRecorderHooks hooks;
  const CuptiLibrary* cupti = &*s.cupti;
  hooks.device_of = [cupti](CUcontext context) {
    uint32_t device = 0;
    return cupti->get_device_id(context, &device) == CUPTI_SUCCESS ? static_cast<int>(device) : -1;
  };
  hooks.device_free_bytes = [] { return driver.current_device_free_bytes(); };
  auto* recording = new Recording;  // (kept: see Recording)
  recording->ledger = std::make_unique<AllocationLedger>(
      LedgerSettings{max_entries, size_t{16} << 20, /*device_memory_as_segments=*/false});
  recording->recorder = std::make_unique<CallRecorder>(*recording->ledger, std::move(hooks), /*capture_stacks=*/true,
                                                       std::move(trim), s.interpreter);
  CUpti_SubscriberHandle subscriber = nullptr;
  CUptiResult result = s.cupti->subscribe(&subscriber, &on_callback, recording->recorder.get());
  if (result != CUPTI_SUCCESS)
    return "CUPTI refused the subscription (" + s.cupti->describe(result) +
           "): another tool holds its callbacks, such as a profiler that started first (torch.profiler, "
           "Nsight Systems)";
  for (const RecordedApi& api : recorded_apis()) {
    result = s.cupti->enable_callback(1, subscriber, api.domain, api.id);
    if (result != CUPTI_SUCCESS) {
      s.cupti->unsubscribe(subscriber);
      return std::string("CUPTI cannot report ") + api.name + " (" + s.cupti->describe(result) + ")";
    }
  }
  s.subscriber = subscriber;
  s.current = recording;
  return "";
}

#endif

}  // namespace

bool outside_memory_wanted() {
  const char* value = std::getenv("MEMSNAP_OUTSIDE_MEMORY");
  if (value == nullptr || std::string(value).empty() || std::string(value) == "1") return true;
  if (std::string(value) == "0") return false;
  throw std::invalid_argument("MEMSNAP_OUTSIDE_MEMORY must be 0 or 1, not '" + std::string(value) + "'");
}

#ifdef MEMSNAP_OUTSIDE_MEMORY

std::string start_outside_memory(InterpreterFrames* interpreter, size_t max_entries) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.started = true;
  if (s.recording) return "";
  s.interpreter = interpreter;
  s.unrecorded_reason = subscribe(s, max_entries);
  s.recording = s.unrecorded_reason.empty();
  return s.unrecorded_reason;
}

void stop_outside_memory(const std::string& reason) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.recording) return;
  s.current->recorder->stop();
  s.cupti->unsubscribe(s.subscriber);
  s.subscriber = nullptr;
  s.recording = false;
  s.unrecorded_reason = reason;
}

bool outside_memory_recording() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.recording;
}

std::string outside_memory_unrecorded_reason() {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return s.unrecorded_reason;
}

void add_outside_memory(Snapshot& snapshot) {
  State& s = state();
  Recording* recording = nullptr;
  std::string reason;
  {
    std::lock_guard lock(s.mutex);
    if (!s.started) return;
    if (!s.recording) {
      if (!s.unrecorded_reason.empty()) snapshot.outside_memory = OutsideMemory{s.unrecorded_reason, {}, {}, 0, {}};
      return;  // (stopped: the snapshot says nothing of memory it no longer watches)
    }
    recording = s.current;
  }
  // Calls the symbolizer makes (none allocate device memory) are the snapshot's, not the program's.
  CallsNotRecorded own;
  recording->ledger->add_outside_memory(snapshot, s.interpreter);
}

#else

std::string start_outside_memory(InterpreterFrames*, size_t) {
  return "memsnap's Python package was built without CUDA's CUPTI headers";
}
void stop_outside_memory(const std::string&) {}
bool outside_memory_recording() { return false; }
std::string outside_memory_unrecorded_reason() { return start_outside_memory(nullptr, 0); }
void add_outside_memory(Snapshot&) {}

#endif

}  // namespace memsnap::pytorch
