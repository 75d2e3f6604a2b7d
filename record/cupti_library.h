// CUPTI, loaded at run time: the recorder is injected into programs built against any CUDA
// 13 runtime, which find CUPTI in different places (the toolkit, a Python wheel), so nothing
// of it is linked. Looked for, in order: the path given (MEMSNAP_RECORD_CUPTI), the one
// already loaded or on the loader's path (libcupti.so.13, libcupti.so), beside the CUDA
// libraries the program loaded (a toolkit's lib64 and extras/CUPTI/lib64, a wheel's lib), and
// the usual toolkit folders under /usr/local/cuda.
#pragma once

#include <cupti_callbacks.h>
#include <cupti_result.h>

#include <string>

#include "allocator/result.h"

namespace memsnap {

struct CuptiLibrary {
  std::string path;  // the file loaded
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*get_result_string)(CUptiResult, const char**) = nullptr;
  CUptiResult (*get_device_id)(CUcontext, uint32_t*) = nullptr;

  // "CUPTI_ERROR_...": the name of a result, for messages.
  std::string describe(CUptiResult result) const;
};

// A one-line error naming where it looked when no usable library is found.
Result<CuptiLibrary> load_cupti(const std::string& given_path);

}  // namespace memsnap
