// The driver's virtual memory API, for expandable segments on CUDA: reserve address space
// (cuMemAddressReserve), create physical pages (cuMemCreate), map them and grant the device
// access (cuMemMap, cuMemSetAccess), and undo each.
//
// The driver functions are looked up at run time through the CUDA runtime
// (cudaGetDriverEntryPointByVersion), as PyTorch does, rather than linked: a program linked
// against libcuda would not even start on a machine without the driver, and memsnap must run
// everywhere, falling back to the simulated device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "allocator/device_backend.h"

namespace memsnap {

class CudaVirtualMemory {
 public:
  explicit CudaVirtualMemory(int device_count);
  ~CudaVirtualMemory();  // releases pages still mapped (the allocator normally has)
  CudaVirtualMemory(const CudaVirtualMemory&) = delete;
  CudaVirtualMemory& operator=(const CudaVirtualMemory&) = delete;

  // The driver offers the API, the device supports it, and its page granularity divides
  // the 2 MiB pages memsnap maps.
  bool supported(int device);
  std::optional<uintptr_t> reserve(int device, size_t bytes);
  void release(int device, uintptr_t address, size_t bytes);
  bool map(int device, uintptr_t address, size_t bytes, size_t page_size);
  void unmap(int device, uintptr_t address, size_t bytes, size_t page_size, StreamId stream);

 private:
  struct Driver;
  const Driver& driver();

  std::mutex mutex_;
  std::unique_ptr<Driver> driver_;  // looked up on first use
  bool driver_missing_ = false;
  struct Page {
    unsigned long long handle = 0;  // CUmemGenericAllocationHandle
    size_t size = 0;
  };
  // Each mapped page's physical allocation, per device, by page address.
  std::vector<std::map<uintptr_t, Page>> pages_;
};

}  // namespace memsnap
