// The parameter structs of the driver's calls (generated_cuda_meta.h) name the versioned types
// that cuda.h declares only for CUDA's own build; this file calls nothing, it only reads them.
#define __CUDA_API_VERSION_INTERNAL 1

#include "record/cuda_calls.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_meta.h>
#include <generated_cuda_runtime_api_meta.h>

#include <algorithm>
#include <array>
#include <type_traits>

namespace memsnap {
namespace {

constexpr CUpti_CallbackDomain kRuntime = CUPTI_CB_DOMAIN_RUNTIME_API;
constexpr CUpti_CallbackDomain kDriver = CUPTI_CB_DOMAIN_DRIVER_API;

#define MEMSNAP_RUNTIME(name, version, effect, ...) \
  RecordedApi { kRuntime, CUPTI_RUNTIME_TRACE_CBID_##name##_##version, #name, CallEffect::effect __VA_OPT__(, OutsideKind::__VA_ARGS__) }
#define MEMSNAP_DRIVER(cbid, name, effect, ...) \
  RecordedApi { kDriver, CUPTI_DRIVER_TRACE_CBID_##cbid, name, CallEffect::effect __VA_OPT__(, OutsideKind::__VA_ARGS__) }

constexpr std::array kApis = {
    MEMSNAP_RUNTIME(cudaMalloc, v3020, kAllocates),
    MEMSNAP_RUNTIME(cudaMallocPitch, v3020, kAllocates),
    MEMSNAP_RUNTIME(cudaMalloc3D, v3020, kAllocates),
    MEMSNAP_RUNTIME(cudaMallocManaged, v6000, kAllocates, kManaged),
    MEMSNAP_RUNTIME(cudaMallocAsync, v11020, kAllocates),
    MEMSNAP_RUNTIME(cudaMallocAsync_ptsz, v11020, kAllocates),
    MEMSNAP_RUNTIME(cudaMallocFromPoolAsync, v11020, kAllocates),
    MEMSNAP_RUNTIME(cudaMallocFromPoolAsync_ptsz, v11020, kAllocates),
    MEMSNAP_RUNTIME(cudaFree, v3020, kFrees),
    MEMSNAP_RUNTIME(cudaFreeAsync, v11020, kFrees),
    MEMSNAP_RUNTIME(cudaFreeAsync_ptsz, v11020, kFrees),
    MEMSNAP_DRIVER(cuMemAlloc_v2, "cuMemAlloc", kAllocates),
    MEMSNAP_DRIVER(cuMemAllocPitch_v2, "cuMemAllocPitch", kAllocates),
    MEMSNAP_DRIVER(cuMemAllocManaged, "cuMemAllocManaged", kAllocates, kManaged),
    MEMSNAP_DRIVER(cuMemAllocAsync, "cuMemAllocAsync", kAllocates),
    MEMSNAP_DRIVER(cuMemAllocAsync_ptsz, "cuMemAllocAsync", kAllocates),
    MEMSNAP_DRIVER(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", kAllocates),
    MEMSNAP_DRIVER(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", kAllocates),
    MEMSNAP_DRIVER(cuMemMap, "cuMemMap", kAllocates),
    MEMSNAP_DRIVER(cuMemCreate, "cuMemCreate", kCreates),
    MEMSNAP_DRIVER(cuMemFree_v2, "cuMemFree", kFrees),
    MEMSNAP_DRIVER(cuMemFreeAsync, "cuMemFreeAsync", kFrees),
    MEMSNAP_DRIVER(cuMemFreeAsync_ptsz, "cuMemFreeAsync", kFrees),
    MEMSNAP_DRIVER(cuMemUnmap, "cuMemUnmap", kUnmaps),
    // Pinned host memory.
    MEMSNAP_RUNTIME(cudaHostAlloc, v3020, kAllocates, kPinnedHost),
    MEMSNAP_RUNTIME(cudaMallocHost, v3020, kAllocates, kPinnedHost),
    MEMSNAP_RUNTIME(cudaHostRegister, v4000, kAllocates, kRegisteredHost),
    MEMSNAP_RUNTIME(cudaFreeHost, v3020, kFrees, kPinnedHost),
    MEMSNAP_RUNTIME(cudaHostUnregister, v4000, kFrees, kRegisteredHost),
    MEMSNAP_DRIVER(cuMemHostAlloc, "cuMemHostAlloc", kAllocates, kPinnedHost),
    MEMSNAP_DRIVER(cuMemAllocHost_v2, "cuMemAllocHost", kAllocates, kPinnedHost),
    MEMSNAP_DRIVER(cuMemHostRegister_v2, "cuMemHostRegister", kAllocates, kRegisteredHost),
    MEMSNAP_DRIVER(cuMemFreeHost, "cuMemFreeHost", kFrees, kPinnedHost),
    MEMSNAP_DRIVER(cuMemHostUnregister, "cuMemHostUnregister", kFrees, kRegisteredHost),
};

#undef MEMSNAP_RUNTIME
#undef MEMSNAP_DRIVER

uintptr_t address_of(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer); }
StreamId stream_of(const void* stream) { return reinterpret_cast<uintptr_t>(stream); }

// The pointer an allocation wrote through `out` (read only after success: before, it may be
// anything the program left there).
template <typename Pointer>
uintptr_t written(Pointer* out, bool succeeded) {
  if (!succeeded || out == nullptr) return 0;
  if constexpr (std::is_same_v<Pointer, CUdeviceptr>)
    return static_cast<uintptr_t>(*out);
  else
    return address_of(*out);
}

template <typename Params>
const Params& as(const void* params) {
  return *static_cast<const Params*>(params);
}

DecodedCall runtime_call(CUpti_CallbackId id, const void* p, DecodedCall call) {
  const bool ok = call.succeeded;
  switch (id) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020: {
      const auto& a = as<cudaMalloc_v3020_params>(p);
      return {ok, call.out_of_memory, written(a.devPtr, ok), a.size, 0};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020: {
      const auto& a = as<cudaMallocPitch_v3020_params>(p);
      const size_t row = ok && a.pitch != nullptr ? *a.pitch : a.width;
      return {ok, call.out_of_memory, written(a.devPtr, ok), row * a.height, 0};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc3D_v3020: {
      const auto& a = as<cudaMalloc3D_v3020_params>(p);
      const bool have = ok && a.pitchedDevPtr != nullptr;
      const size_t row = have ? a.pitchedDevPtr->pitch : a.extent.width;
      return {ok, call.out_of_memory, have ? address_of(a.pitchedDevPtr->ptr) : 0,
              row * a.extent.height * std::max<size_t>(a.extent.depth, 1), 0};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000: {
      const auto& a = as<cudaMallocManaged_v6000_params>(p);
      return {ok, call.out_of_memory, written(a.devPtr, ok), a.size, 0};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020: {
      const auto& a = as<cudaMallocAsync_v11020_params>(p);  // the _ptsz layout is the same
      return {ok, call.out_of_memory, written(a.devPtr, ok), a.size, stream_of(a.hStream)};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020: {
      const auto& a = as<cudaMallocFromPoolAsync_v11020_params>(p);
      return {ok, call.out_of_memory, written(a.ptr, ok), a.size, stream_of(a.stream)};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020:
      return {ok, false, address_of(as<cudaFree_v3020_params>(p).devPtr), 0, 0};
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020: {
      const auto& a = as<cudaHostAlloc_v3020_params>(p);
      return {ok, call.out_of_memory, written(a.pHost, ok), a.size, 0};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020: {
      const auto& a = as<cudaMallocHost_v3020_params>(p);
      return {ok, call.out_of_memory, written(a.ptr, ok), a.size, 0};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostRegister_v4000: {
      const auto& a = as<cudaHostRegister_v4000_params>(p);
      return {ok, call.out_of_memory, ok ? address_of(a.ptr) : 0, a.size, 0};
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020:
      return {ok, false, address_of(as<cudaFreeHost_v3020_params>(p).ptr), 0, 0};
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostUnregister_v4000:
      return {ok, false, address_of(as<cudaHostUnregister_v4000_params>(p).ptr), 0, 0};
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020: {
      const auto& a = as<cudaFreeAsync_v11020_params>(p);
      return {ok, false, address_of(a.devPtr), 0, stream_of(a.hStream)};
    }
    default:
      return {};
  }
}

DecodedCall driver_call(CUpti_CallbackId id, const void* p, DecodedCall call) {
  const bool ok = call.succeeded;
  switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      const auto& a = as<cuMemAlloc_v2_params>(p);
      return {ok, call.out_of_memory, written(a.dptr, ok), a.bytesize, 0};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      const auto& a = as<cuMemAllocPitch_v2_params>(p);
      const size_t row = ok && a.pPitch != nullptr ? *a.pPitch : a.WidthInBytes;
      return {ok, call.out_of_memory, written(a.dptr, ok), row * a.Height, 0};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      const auto& a = as<cuMemAllocManaged_params>(p);
      return {ok, call.out_of_memory, written(a.dptr, ok), a.bytesize, 0};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      const auto& a = as<cuMemAllocAsync_params>(p);
      return {ok, call.out_of_memory, written(a.dptr, ok), a.bytesize, stream_of(a.hStream)};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      const auto& a = as<cuMemAllocFromPoolAsync_params>(p);
      return {ok, call.out_of_memory, written(a.dptr, ok), a.bytesize, stream_of(a.hStream)};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
      const auto& a = as<cuMemMap_params>(p);
      return {ok, call.out_of_memory, ok ? static_cast<uintptr_t>(a.ptr) : 0, a.size, 0};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate:
      return {ok, call.out_of_memory, 0, as<cuMemCreate_params>(p).size, 0};
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2:
      return {ok, false, static_cast<uintptr_t>(as<cuMemFree_v2_params>(p).dptr), 0, 0};
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
      const auto& a = as<cuMemFreeAsync_params>(p);
      return {ok, false, static_cast<uintptr_t>(a.dptr), 0, stream_of(a.hStream)};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
      const auto& a = as<cuMemHostAlloc_params>(p);
      return {ok, call.out_of_memory, written(a.pp, ok), a.bytesize, 0};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
      const auto& a = as<cuMemAllocHost_v2_params>(p);
      return {ok, call.out_of_memory, written(a.pp, ok), a.bytesize, 0};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2: {
      const auto& a = as<cuMemHostRegister_v2_params>(p);
      return {ok, call.out_of_memory, ok ? address_of(a.p) : 0, a.bytesize, 0};
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost:
      return {ok, false, address_of(as<cuMemFreeHost_params>(p).p), 0, 0};
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister:
      return {ok, false, address_of(as<cuMemHostUnregister_params>(p).p), 0, 0};
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
      const auto& a = as<cuMemUnmap_params>(p);
      return {ok, false, static_cast<uintptr_t>(a.ptr), a.size, 0};
    }
    default:
      return {};
  }
}

}  // namespace

std::span<const RecordedApi> recorded_apis() { return kApis; }

const RecordedApi* find_recorded_api(CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  // Asked at every callback, entries and exits: one table read, not a search.
  constexpr CUpti_CallbackId kIds = 1024;
  using Table = std::array<std::array<const RecordedApi*, kIds>, 2>;  // runtime, driver
  static const Table table = [] {
    Table built{};
    for (const RecordedApi& api : kApis)
      built[api.domain == kRuntime ? 0 : 1][api.id] = &api;
    return built;
  }();
  static_assert(std::all_of(kApis.begin(), kApis.end(), [](const RecordedApi& api) { return api.id < kIds; }));
  if (id >= kIds || (domain != kRuntime && domain != kDriver)) return nullptr;
  return table[domain == kRuntime ? 0 : 1][id];
}

DecodedCall decode_call(const RecordedApi& api, const void* params, const void* result) {
  // Without its parameters or result a call cannot be read: it is taken as failed.
  if (params == nullptr || result == nullptr) return {};
  DecodedCall status;
  if (api.domain == kRuntime) {
    const cudaError_t error = *static_cast<const cudaError_t*>(result);
    status.succeeded = error == cudaSuccess;
    status.out_of_memory = error == cudaErrorMemoryAllocation;
    return runtime_call(api.id, params, status);
  }
  const CUresult error = *static_cast<const CUresult*>(result);
  status.succeeded = error == CUDA_SUCCESS;
  status.out_of_memory = error == CUDA_ERROR_OUT_OF_MEMORY;
  return driver_call(api.id, params, status);
}

}  // namespace memsnap
