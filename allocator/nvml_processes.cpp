#include "allocator/nvml_processes.h"

#include <dlfcn.h>

#include <cstdint>
#include <mutex>

namespace memsnap {
namespace {

// NVML's C ABI, as its header (not in the CUDA toolkit's include folder) declares it.
using NvmlReturn = int;  // NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7
using NvmlDevice = void*;
struct NvmlProcessInfo {  // nvmlProcessInfo_t, as nvmlDeviceGetComputeRunningProcesses_v3 fills it
  unsigned int pid;
  unsigned long long used_gpu_memory;  // NVML_VALUE_NOT_AVAILABLE (all ones) when not allowed
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlNotAvailable = ~0ULL;
constexpr unsigned int kNvmlMaxProcesses = 1024;

struct Nvml {
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*compute_processes)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
  bool ready = false;
};

// Opened and initialized once, on first use; never closed (the driver keeps it for the process).
const Nvml& nvml() {
  static Nvml loaded = [] {
    Nvml n;
    void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return n;
    n.init = reinterpret_cast<NvmlReturn (*)()>(dlsym(library, "nvmlInit_v2"));
    n.handle_by_pci_bus_id =
        reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(dlsym(library, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.compute_processes = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*)>(
        dlsym(library, "nvmlDeviceGetComputeRunningProcesses_v3"));
    n.ready = n.init != nullptr && n.handle_by_pci_bus_id != nullptr && n.compute_processes != nullptr &&
              n.init() == kNvmlSuccess;
    return n;
  }();
  return loaded;
}

}  // namespace

std::vector<DeviceProcess> nvml_processes_at_bus_id(const char* bus_id, uint64_t bound) {
  const Nvml& n = nvml();
  if (!n.ready || bus_id == nullptr) return {};
  NvmlDevice handle = nullptr;
  if (n.handle_by_pci_bus_id(bus_id, &handle) != kNvmlSuccess) return {};
  // The list may grow between asking its length and reading it: ask with room to spare.
  std::vector<NvmlProcessInfo> infos(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const NvmlReturn status = n.compute_processes(handle, &count, infos.data());
    if (status == kNvmlInsufficientSize && count <= kNvmlMaxProcesses) {
      infos.resize(count + 8);
      continue;
    }
    if (status != kNvmlSuccess || count > infos.size()) return {};
    std::vector<DeviceProcess> processes;
    for (unsigned int i = 0; i < count; ++i) {
      const NvmlProcessInfo& info = infos[i];
      // Figures that cannot be right (a layout this code does not know) give nothing, not
      // wrong numbers; memory NVML may not show (a container without the permission) is left out.
      if (info.pid == 0) return {};
      if (info.used_gpu_memory == kNvmlNotAvailable) continue;
      if (info.used_gpu_memory > bound) return {};
      processes.push_back({static_cast<int64_t>(info.pid), info.used_gpu_memory});
    }
    return processes;
  }
  return {};
}

}  // namespace memsnap
