// The CUDA calls `memsnap record` watches, and how to read one from CUPTI's callback data:
// which pointer a call allocated or freed, how many bytes, on which stream, and whether it
// succeeded or ran out of memory.
//
// Both the runtime's functions (cudaMalloc, ...) and the driver's (cuMemAlloc, ...) are
// listed: a program may call either, and the runtime calls the driver underneath (the recorder
// counts such a nested call once, at the runtime's level: call_recorder.h).
#pragma once

#include <cupti_callbacks.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "allocator/device_backend.h"
#include "snapshot/snapshot.h"

namespace memsnap {

// kCreates: physical memory without an address (cuMemCreate, virtual memory management); it
// is counted when mapped (cuMemMap allocates), so only its out-of-memory errors are recorded.
enum class CallEffect : uint8_t { kAllocates, kFrees, kUnmaps, kCreates };

struct RecordedApi {
  CUpti_CallbackDomain domain;
  CUpti_CallbackId id;
  const char* name;
  CallEffect effect;
  // The memory it makes or frees: device (kDevice, kManaged) or pinned host memory. A free
  // names the kind whose allocations it ends (cudaFree and cudaFreeHost differ; cuMemFree
  // frees device and managed memory alike).
  OutsideKind memory = OutsideKind::kDevice;
};

// Every call recorded, for enabling their callbacks.
std::span<const RecordedApi> recorded_apis();
// The entry for a callback's domain and id; nullptr for calls not recorded.
const RecordedApi* find_recorded_api(CUpti_CallbackDomain domain, CUpti_CallbackId id);

struct DecodedCall {
  bool succeeded = false;
  bool out_of_memory = false;  // cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY
  uintptr_t address = 0;  // allocated (on success), freed, or the start of the unmapped range
  size_t size = 0;        // bytes allocated or asked for; the unmapped range's; 0 for a free
  StreamId stream = 0;
};

// Reads a call at its exit: `params` is CUpti_CallbackData::functionParams, `result` its
// functionReturnValue (a cudaError_t or CUresult, by domain).
DecodedCall decode_call(const RecordedApi& api, const void* params, const void* result);

}  // namespace memsnap
