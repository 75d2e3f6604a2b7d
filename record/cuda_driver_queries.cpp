#include "record/cuda_driver_queries.h"

#include <dlfcn.h>

namespace memsnap {
namespace {

template <typename Function>
void bind(void* handle, const char* name, Function& function) {
  function = reinterpret_cast<Function>(dlsym(handle, name));
}

}  // namespace

CudaDriverQueries CudaDriverQueries::from_loaded_driver() {
  CudaDriverQueries queries;
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return queries;
  bind(driver, "cuDeviceGet", queries.device_get_);
  bind(driver, "cuDeviceGetName", queries.device_get_name_);
  bind(driver, "cuDeviceTotalMem_v2", queries.device_total_mem_);
  bind(driver, "cuMemGetInfo_v2", queries.mem_get_info_);
  bind(driver, "cuCtxGetDevice", queries.ctx_get_device_);
  bind(driver, "cuDevicePrimaryCtxGetState", queries.primary_state_);
  bind(driver, "cuDevicePrimaryCtxRetain", queries.primary_retain_);
  bind(driver, "cuDevicePrimaryCtxRelease_v2", queries.primary_release_);
  bind(driver, "cuCtxPushCurrent_v2", queries.ctx_push_);
  bind(driver, "cuCtxPopCurrent_v2", queries.ctx_pop_);
  bind(driver, "cuDeviceGetPCIBusId", queries.device_get_pci_bus_id_);
  return queries;  // the handle stays open: the driver is loaded for the process's life anyway
}

std::string CudaDriverQueries::device_name(int device) const {
  CUdevice handle = 0;
  char name[256] = {};
  if (device_get_ == nullptr || device_get_name_ == nullptr || device_get_(&handle, device) != CUDA_SUCCESS ||
      device_get_name_(name, sizeof name - 1, handle) != CUDA_SUCCESS)
    return "";
  return name;
}

uint64_t CudaDriverQueries::total_memory(int device) const {
  CUdevice handle = 0;
  size_t bytes = 0;
  if (device_get_ == nullptr || device_total_mem_ == nullptr || device_get_(&handle, device) != CUDA_SUCCESS ||
      device_total_mem_(&bytes, handle) != CUDA_SUCCESS)
    return 0;
  return bytes;
}

size_t CudaDriverQueries::current_device_free_bytes() const {
  size_t free_bytes = 0;
  size_t total = 0;
  if (mem_get_info_ == nullptr || mem_get_info_(&free_bytes, &total) != CUDA_SUCCESS) return 0;
  return free_bytes;
}

bool CudaDriverQueries::memory_info(int device, size_t& free_bytes, size_t& total_bytes) const {
  if (mem_get_info_ == nullptr || device_get_ == nullptr) return false;
  const auto ask = [&] { return mem_get_info_(&free_bytes, &total_bytes) == CUDA_SUCCESS && free_bytes <= total_bytes; };
  CUdevice current = -1;
  if (ctx_get_device_ != nullptr && ctx_get_device_(&current) == CUDA_SUCCESS && current == device) return ask();
  // Another thread's context: the device's primary one, only if it is active already (retaining
  // an inactive one would create a context, and take memory, in a program that made none).
  CUdevice handle = 0;
  unsigned int flags = 0;
  int active = 0;
  if (primary_state_ == nullptr || primary_retain_ == nullptr || primary_release_ == nullptr || ctx_push_ == nullptr ||
      ctx_pop_ == nullptr || device_get_(&handle, device) != CUDA_SUCCESS ||
      primary_state_(handle, &flags, &active) != CUDA_SUCCESS || active == 0)
    return false;
  CUcontext context = nullptr;
  if (primary_retain_(&context, handle) != CUDA_SUCCESS) return false;
  bool known = false;
  if (ctx_push_(context) == CUDA_SUCCESS) {
    known = ask();
    CUcontext popped = nullptr;
    ctx_pop_(&popped);
  }
  primary_release_(handle);
  return known;
}

std::string CudaDriverQueries::pci_bus_id(int device) const {
  CUdevice handle = 0;
  char bus_id[64] = {};
  if (device_get_ == nullptr || device_get_pci_bus_id_ == nullptr || device_get_(&handle, device) != CUDA_SUCCESS ||
      device_get_pci_bus_id_(bus_id, sizeof bus_id, handle) != CUDA_SUCCESS)
    return "";
  return bus_id;
}

}  // namespace memsnap
