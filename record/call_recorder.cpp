#include "record/call_recorder.h"

#include <cstdio>
#include <cstring>
#include <exception>

#include "history/stack_capture.h"
#include "record/cuda_calls.h"

namespace memsnap {
namespace {

thread_local int runtime_calls_in_progress = 0;
thread_local bool inside_recorder = false;
thread_local int not_recorded_depth = 0;  // CallsNotRecorded scopes alive on the thread
// The device of the thread's last context, by the context's unique id (a thread keeps to one
// context for long stretches; asking CUPTI costs more than the rest of a call's recording).
thread_local uint32_t last_context_uid = 0;
thread_local int last_context_device = -1;

// Marks the thread as inside the recorder for a scope, so calls its hooks make are not recorded.
class InsideRecorder {
 public:
  InsideRecorder() { inside_recorder = true; }
  ~InsideRecorder() { inside_recorder = false; }
  InsideRecorder(const InsideRecorder&) = delete;
  InsideRecorder& operator=(const InsideRecorder&) = delete;
};

}  // namespace

CallsNotRecorded::CallsNotRecorded() { ++not_recorded_depth; }
CallsNotRecorded::~CallsNotRecorded() { --not_recorded_depth; }
bool calls_recorded_on_this_thread() { return not_recorded_depth == 0; }

CallRecorder::CallRecorder(AllocationLedger& ledger, CallRecorderHooks hooks, bool capture_stacks,
                           CallStackTrim trim, InterpreterFrames* interpreter)
    : ledger_(ledger), hooks_(std::move(hooks)), capture_stacks_(capture_stacks), trim_(std::move(trim)),
      interpreter_(interpreter),
      interpreter_stop_(interpreter != nullptr ? interpreter->evaluation_loop_code() : StopCode{}) {
  if (capture_stacks_) prepare_stack_capture();
}

void CallRecorder::fail(const std::string& what) {
  stop();
  if (!failed_.exchange(true))
    std::fprintf(stderr, "memsnap record: stopped recording: %s; the program goes on unrecorded\n",
                 what.c_str());
}

void CallRecorder::on_callback(CUpti_CallbackDomain domain, CUpti_CallbackId id,
                               const CUpti_CallbackData& data) {
  if (inside_recorder || not_recorded_depth > 0 || stopped()) return;
  const RecordedApi* api = find_recorded_api(domain, id);
  if (api == nullptr) return;
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  if (data.callbackSite == CUPTI_API_ENTER) {
    if (runtime) ++runtime_calls_in_progress;
    return;
  }
  if (runtime) {
    if (runtime_calls_in_progress == 0) return;  // its entry came before recording began
    --runtime_calls_in_progress;
  } else if (runtime_calls_in_progress > 0) {
    return;  // under a runtime call, which records it
  }
  InsideRecorder inside;
  try {
    const DecodedCall call = decode_call(*api, data.functionParams, data.functionReturnValue);
    if (!call.succeeded && !call.out_of_memory) return;
    if (call.succeeded && api->effect == CallEffect::kCreates) return;  // counted when mapped
    int device = 0;
    if (data.contextUid != 0 && data.contextUid == last_context_uid) {
      device = last_context_device;
    } else if (hooks_.device_of) {
      device = hooks_.device_of(data.context);
      last_context_uid = data.contextUid;
      last_context_device = device;
    }
    record(device < 0 ? 0 : device, *api, call);
  } catch (const std::exception& error) {
    fail(std::string("while recording ") + api->name + ": " + error.what());
  } catch (...) {
    fail(std::string("while recording ") + api->name);
  }
}

void CallRecorder::record(int device, const RecordedApi& api, const DecodedCall& call) {
  uintptr_t frames[kMaxStackDepth + kMaxInterpreterTokens];
  CallStack stack;
  if (capture_stacks_) {
    // The interpreter's tokens go behind the room for C++ frames, and move down to follow them.
    uintptr_t* const tokens = frames + kMaxStackDepth;
    const size_t token_count = interpreter_ != nullptr ? interpreter_->capture(tokens, kMaxInterpreterTokens) : 0;
    const size_t count = trim_.trim(frames, capture_stack(frames, kMaxStackDepth, 0, nullptr, interpreter_stop_));
    std::memmove(frames + count, tokens, token_count * sizeof(uintptr_t));
    stack.count = count + token_count;
    stack.frames = frames;
  }
  const bool host = is_host_memory(api.memory);
  if (call.out_of_memory) {
    if (!host) describe_once(device);
    const size_t free_bytes = !host && hooks_.device_free_bytes ? hooks_.device_free_bytes() : 0;
    ledger_.out_of_memory(device, call.size, free_bytes, call.stream, stack, api.memory, api.name);
    if (hooks_.out_of_memory && !host) hooks_.out_of_memory(device);
    return;
  }
  switch (api.effect) {
    case CallEffect::kAllocates:
      if (call.address == 0) return;  // a zero-byte request gives no pointer
      if (!host) describe_once(device);
      ledger_.allocated(device, call.address, call.size, call.stream, stack, api.memory, api.name);
      return;
    case CallEffect::kFrees:
      if (call.address != 0) ledger_.freed(call.address, call.stream, stack);
      return;
    case CallEffect::kUnmaps:
      ledger_.freed_range(call.address, call.size, call.stream, stack);
      return;
    case CallEffect::kCreates:
      return;  // (its successes return before; see on_callback)
  }
}

void CallRecorder::describe_once(int device) {
  if (device < 0 || device >= AllocationLedger::kMaxDevices) return;
  if (described_[static_cast<size_t>(device)].exchange(true)) return;
  if (hooks_.describe_device) hooks_.describe_device(device, ledger_);
}

}  // namespace memsnap
