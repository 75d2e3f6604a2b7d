// A device backend whose calls are not recorded: it wraps another (the CUDA backend of a caching
// allocator) and makes every call that reserves or gives back memory under CallsNotRecorded, so
// the allocator's own cudaMalloc, cudaFree and page mappings, which its snapshots already show
// as segments, do not also appear as memory outside it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "allocator/device_backend.h"
#include "record/call_recorder.h"

namespace memsnap {

class UnrecordedBackend final : public DeviceBackend {
 public:
  explicit UnrecordedBackend(std::shared_ptr<DeviceBackend> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  int device_count() const override { return inner_->device_count(); }
  std::string device_name(int device) const override { return inner_->device_name(device); }
  std::optional<uintptr_t> reserve(int device, size_t bytes) override {
    CallsNotRecorded own;
    return inner_->reserve(device, bytes);
  }
  void release(int device, uintptr_t address, size_t bytes) override {
    CallsNotRecorded own;
    inner_->release(device, address, bytes);
  }
  DeviceMemoryInfo memory_info(int device) override { return inner_->memory_info(device); }
  std::vector<DeviceProcess> device_processes(int device) override { return inner_->device_processes(device); }
  EventHandle record_event(int device, StreamId stream) override { return inner_->record_event(device, stream); }
  bool event_completed(EventHandle event) override { return inner_->event_completed(event); }
  void synchronize_event(EventHandle event) override { inner_->synchronize_event(event); }
  void release_event(EventHandle event) override { inner_->release_event(event); }
  bool streams_completed_since(int device, uint64_t since, uint64_t& count, std::vector<StreamId>& streams) override {
    return inner_->streams_completed_since(device, since, count, streams);
  }
  bool supports_expandable_segments(int device) override { return inner_->supports_expandable_segments(device); }
  std::optional<uintptr_t> reserve_address_space(int device, size_t bytes) override {
    CallsNotRecorded own;
    return inner_->reserve_address_space(device, bytes);
  }
  void release_address_space(int device, uintptr_t address, size_t bytes) override {
    CallsNotRecorded own;
    inner_->release_address_space(device, address, bytes);
  }
  bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_size) override {
    CallsNotRecorded own;
    return inner_->map_pages(device, address, bytes, page_size);
  }
  void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_size, StreamId stream) override {
    CallsNotRecorded own;
    inner_->unmap_pages(device, address, bytes, page_size, stream);
  }
  StreamId create_stream(int device) override { return inner_->create_stream(device); }
  CaptureState capture_state(int device, StreamId stream) override { return inner_->capture_state(device, stream); }
  std::vector<uintptr_t> node_dependencies(int device, uintptr_t node) override {
    return inner_->node_dependencies(device, node);
  }

 private:
  std::shared_ptr<DeviceBackend> inner_;
};

}  // namespace memsnap
