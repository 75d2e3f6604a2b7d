#include "allocator/cuda_virtual_memory.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

namespace memsnap {
namespace {

// Makes `device` current (initializing its primary context, which the driver API needs) for
// a scope, and restores the caller's device afterwards.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess)
      throw DeviceError("CUDA cudaGetDevice failed");
    if (cudaSetDevice(device) != cudaSuccess)
      throw DeviceError("CUDA cudaSetDevice(" + std::to_string(device) + ") failed");
  }
  ~CurrentDevice() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

CUmemAllocationProp page_properties(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

// The driver functions memsnap uses, with the signatures of the CUDA 12.0 ABI.
struct CudaVirtualMemory::Driver {
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) get_granularity = nullptr;
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;

  void check(CUresult status, const char* what) const {
    if (status == CUDA_SUCCESS) return;
    const char* text = nullptr;
    if (error_string == nullptr || error_string(status, &text) != CUDA_SUCCESS || text == nullptr)
      text = "unknown error";
    throw DeviceError(std::string("CUDA ") + what + " failed: " + text);
  }
};

namespace {

template <typename Function>
bool look_up(const char* name, Function& out) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &function, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess || function == nullptr) {
    cudaGetLastError();
    return false;
  }
  out = reinterpret_cast<Function>(function);
  return true;
}

}  // namespace

CudaVirtualMemory::CudaVirtualMemory(int device_count)
    : pages_(static_cast<size_t>(device_count)) {}

CudaVirtualMemory::~CudaVirtualMemory() {
  if (!driver_) return;
  for (size_t device = 0; device < pages_.size(); ++device) {
    for (const auto& [address, page] : pages_[device]) {
      driver_->unmap(static_cast<CUdeviceptr>(address), page.size);  // best effort at exit
      driver_->release(page.handle);
    }
  }
}

const CudaVirtualMemory::Driver& CudaVirtualMemory::driver() {
  if (driver_) return *driver_;
  if (driver_missing_) throw DeviceError("CUDA: the driver has no virtual memory API");
  auto driver = std::make_unique<Driver>();
  const bool complete = look_up("cuDeviceGetAttribute", driver->device_get_attribute) &&
                        look_up("cuMemGetAllocationGranularity", driver->get_granularity) &&
                        look_up("cuMemAddressReserve", driver->address_reserve) &&
                        look_up("cuMemAddressFree", driver->address_free) &&
                        look_up("cuMemCreate", driver->create) &&
                        look_up("cuMemRelease", driver->release) &&
                        look_up("cuMemMap", driver->map) && look_up("cuMemUnmap", driver->unmap) &&
                        look_up("cuMemSetAccess", driver->set_access) &&
                        look_up("cuGetErrorString", driver->error_string);
  if (!complete) {
    driver_missing_ = true;
    throw DeviceError("CUDA: the driver has no virtual memory API");
  }
  driver_ = std::move(driver);
  return *driver_;
}

bool CudaVirtualMemory::supported(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    const Driver& d = driver();
    CurrentDevice current(device);
    int vmm = 0;
    d.check(d.device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                                   device),
            "cuDeviceGetAttribute");
    if (vmm == 0) return false;
    size_t granularity = 0;
    const CUmemAllocationProp prop = page_properties(device);
    d.check(d.get_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            "cuMemGetAllocationGranularity");
    constexpr size_t kSmallestPage = 2 << 20;
    return granularity > 0 && kSmallestPage % granularity == 0;
  } catch (const DeviceError&) {
    return false;
  }
}

std::optional<uintptr_t> CudaVirtualMemory::reserve(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Driver& d = driver();
  CurrentDevice current(device);
  CUdeviceptr address = 0;
  const CUresult status = d.address_reserve(&address, bytes, 0, 0, 0);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) return std::nullopt;
  d.check(status, "cuMemAddressReserve");
  return static_cast<uintptr_t>(address);
}

void CudaVirtualMemory::release(int device, uintptr_t address, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Driver& d = driver();
  CurrentDevice current(device);
  d.check(d.address_free(static_cast<CUdeviceptr>(address), bytes), "cuMemAddressFree");
}

// One physical allocation per page, so that any page can later be unmapped on its own.
bool CudaVirtualMemory::map(int device, uintptr_t address, size_t bytes, size_t page_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Driver& d = driver();
  CurrentDevice current(device);
  const CUmemAllocationProp prop = page_properties(device);
  std::vector<CUmemGenericAllocationHandle> handles;
  for (size_t offset = 0; offset < bytes; offset += page_size) {
    CUmemGenericAllocationHandle handle = 0;
    const CUresult status = d.create(&handle, page_size, &prop, 0);
    if (status != CUDA_SUCCESS) {
      for (CUmemGenericAllocationHandle created : handles) d.release(created);
      if (status == CUDA_ERROR_OUT_OF_MEMORY) return false;
      d.check(status, "cuMemCreate");
    }
    handles.push_back(handle);
  }
  size_t mapped = 0;
  CUresult status = CUDA_SUCCESS;
  for (; mapped < handles.size() && status == CUDA_SUCCESS; ++mapped)
    status = d.map(static_cast<CUdeviceptr>(address + mapped * page_size), page_size, 0,
                   handles[mapped], 0);
  if (status == CUDA_SUCCESS) {
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    status = d.set_access(static_cast<CUdeviceptr>(address), bytes, &access, 1);
  } else {
    --mapped;  // the failed page
  }
  if (status != CUDA_SUCCESS) {  // undo, so a failure leaves nothing behind
    for (size_t i = 0; i < mapped; ++i) d.unmap(static_cast<CUdeviceptr>(address + i * page_size), page_size);
    for (CUmemGenericAllocationHandle handle : handles) d.release(handle);
    d.check(status, "cuMemMap/cuMemSetAccess");
  }
  auto& pages = pages_.at(static_cast<size_t>(device));
  for (size_t i = 0; i < handles.size(); ++i) pages.emplace(address + i * page_size, Page{handles[i], page_size});
  return true;
}

void CudaVirtualMemory::unmap(int device, uintptr_t address, size_t bytes, size_t page_size,
                              StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Driver& d = driver();
  CurrentDevice current(device);
  // Unlike cudaFree, unmapping does not wait for kernels still using the pages.
  if (cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)) != cudaSuccess)
    throw DeviceError("CUDA cudaStreamSynchronize failed before unmapping pages");
  auto& pages = pages_.at(static_cast<size_t>(device));
  for (size_t offset = 0; offset < bytes; offset += page_size) {
    auto page = pages.find(address + offset);
    if (page == pages.end())
      throw DeviceError("CUDA: unmapping a page memsnap did not map (" +
                        std::to_string(address + offset) + ")");
    d.check(d.unmap(static_cast<CUdeviceptr>(page->first), page->second.size), "cuMemUnmap");
    d.check(d.release(page->second.handle), "cuMemRelease");
    pages.erase(page);
  }
}

}  // namespace memsnap
