// The simulated device behind a backend of the test's own: what a test does not override goes
// to the SimulatedBackend (the device's memory, events, expandable segments, NVML's list); what
// the simulated device tells beyond the base interface (on which streams events completed, CUDA
// graph captures) is not forwarded, as a backend that cannot tell would not.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "allocator/simulated_backend.h"

namespace memsnap::testing {

class ForwardingBackend : public DeviceBackend {
 public:
  explicit ForwardingBackend(std::shared_ptr<SimulatedBackend> device) : d_(std::move(device)) {}
  std::string name() const override { return d_->name(); }
  int device_count() const override { return d_->device_count(); }
  std::optional<uintptr_t> reserve(int device, size_t bytes) override { return d_->reserve(device, bytes); }
  void release(int device, uintptr_t address, size_t bytes) override { d_->release(device, address, bytes); }
  DeviceMemoryInfo memory_info(int device) override { return d_->memory_info(device); }
  std::vector<DeviceProcess> device_processes(int device) override { return d_->device_processes(device); }
  EventHandle record_event(int device, StreamId stream) override { return d_->record_event(device, stream); }
  bool event_completed(EventHandle event) override { return d_->event_completed(event); }
  void synchronize_event(EventHandle event) override { d_->synchronize_event(event); }
  void release_event(EventHandle event) override { d_->release_event(event); }
  bool supports_expandable_segments(int device) override { return d_->supports_expandable_segments(device); }
  std::optional<uintptr_t> reserve_address_space(int device, size_t bytes) override {
    return d_->reserve_address_space(device, bytes);
  }
  void release_address_space(int device, uintptr_t address, size_t bytes) override {
    d_->release_address_space(device, address, bytes);
  }
  bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_size) override {
    return d_->map_pages(device, address, bytes, page_size);
  }
  void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_size, StreamId stream) override {
    d_->unmap_pages(device, address, bytes, page_size, stream);
  }
  StreamId create_stream(int device) override { return d_->create_stream(device); }

 private:
  std::shared_ptr<SimulatedBackend> d_;
};

}  // namespace memsnap::testing
