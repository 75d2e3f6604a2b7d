// What the recorder asks the CUDA driver itself: a device's name and capacity for the
// snapshot, and the free bytes at an out-of-memory error. The driver is the one already loaded
// into the program (it loaded the recorder); in a process without one (the tests' fake runtime)
// every answer is "unknown".
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace memsnap {

class CudaDriverQueries {
 public:
  // Binds to the loaded libcuda.so.1, if any (it is not loaded by this call).
  static CudaDriverQueries from_loaded_driver();

  std::string device_name(int device) const;   // "" when unknown
  uint64_t total_memory(int device) const;     // 0 when unknown
  size_t current_device_free_bytes() const;    // 0 when unknown
  // A device's free and total bytes, asked in the calling thread's context when it is that
  // device's, else in the device's primary context if the program made it active (a thread of
  // the recorder's own has no context); false when neither, or unknown.
  bool memory_info(int device, size_t& free_bytes, size_t& total_bytes) const;
  std::string pci_bus_id(int device) const;    // "" when unknown

 private:
  CUresult (*device_get_)(CUdevice*, int) = nullptr;
  CUresult (*device_get_name_)(char*, int, CUdevice) = nullptr;
  CUresult (*device_total_mem_)(size_t*, CUdevice) = nullptr;
  CUresult (*mem_get_info_)(size_t*, size_t*) = nullptr;
  CUresult (*ctx_get_device_)(CUdevice*) = nullptr;
  CUresult (*primary_state_)(CUdevice, unsigned int*, int*) = nullptr;
  CUresult (*primary_retain_)(CUcontext*, CUdevice) = nullptr;
  CUresult (*primary_release_)(CUdevice) = nullptr;
  CUresult (*ctx_push_)(CUcontext) = nullptr;
  CUresult (*ctx_pop_)(CUcontext*) = nullptr;
  CUresult (*device_get_pci_bus_id_)(char*, int, CUdevice) = nullptr;
};

}  // namespace memsnap
