// The real device: cudaMalloc/cudaFree, cudaMemGetInfo and CUDA events; expandable
// segments through the driver's virtual memory API (cuda_virtual_memory.h).
//
// Built only when CMake finds the CUDA toolkit (MEMSNAP_HAVE_CUDA). Events are pooled per
// device, since creating one costs more than recording it.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "allocator/cuda_virtual_memory.h"
#include "allocator/device_backend.h"

namespace memsnap {

class CudaBackend final : public DeviceBackend {
 public:
  // Throws DeviceError when no CUDA device can be used.
  CudaBackend();
  ~CudaBackend() override;

  // Whether a CUDA device is present and usable (false on machines without a GPU/driver).
  static bool available();

  std::string name() const override { return "cuda"; }
  std::string device_name(int device) const override;
  int device_count() const override { return device_count_; }
  std::optional<uintptr_t> reserve(int device, size_t bytes) override;
  void release(int device, uintptr_t address, size_t bytes) override;
  DeviceMemoryInfo memory_info(int device) override;
  std::vector<DeviceProcess> device_processes(int device) override;  // NVML (nvml_processes.h)
  EventHandle record_event(int device, StreamId stream) override;
  bool event_completed(EventHandle event) override;
  void synchronize_event(EventHandle event) override;
  void release_event(EventHandle event) override;
  StreamId create_stream(int device) override;
  CaptureState capture_state(int device, StreamId stream) override;
  std::vector<uintptr_t> node_dependencies(int device, uintptr_t node) override;
  bool supports_expandable_segments(int device) override { return vmm_->supported(device); }
  std::optional<uintptr_t> reserve_address_space(int device, size_t bytes) override {
    return vmm_->reserve(device, bytes);
  }
  void release_address_space(int device, uintptr_t address, size_t bytes) override {
    vmm_->release(device, address, bytes);
  }
  bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_size) override {
    return vmm_->map(device, address, bytes, page_size);
  }
  void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_size,
                   StreamId stream) override {
    vmm_->unmap(device, address, bytes, page_size, stream);
  }

 private:
  struct PooledEvent;
  int device_count_ = 0;
  std::mutex mutex_;
  std::vector<std::vector<PooledEvent*>> free_events_;  // per device
  std::vector<std::unique_ptr<PooledEvent>> all_events_;
  std::vector<uintptr_t> streams_;  // created here, destroyed with the backend
  std::unique_ptr<CudaVirtualMemory> vmm_;
};

}  // namespace memsnap
