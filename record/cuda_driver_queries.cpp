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

}  // namespace memsnap
