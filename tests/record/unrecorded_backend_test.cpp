// The backend a caching allocator reserves through while other libraries' calls are recorded:
// its reserving and releasing calls are made with recording off on the thread, every other
// call and the results pass through unchanged.
#include "record/unrecorded_backend.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"

namespace memsnap {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Notes whether recording was on for each call that reaches the device.
class Watching final : public DeviceBackend {
 public:
  explicit Watching(std::shared_ptr<SimulatedBackend> device) : device_(std::move(device)) {}
  std::vector<bool> recorded;  // per reserving or releasing call
  std::vector<bool> queried;   // per memory query

  std::string name() const override { return device_->name(); }
  int device_count() const override { return device_->device_count(); }
  std::optional<uintptr_t> reserve(int device, size_t bytes) override {
    recorded.push_back(calls_recorded_on_this_thread());
    return device_->reserve(device, bytes);
  }
  void release(int device, uintptr_t address, size_t bytes) override {
    recorded.push_back(calls_recorded_on_this_thread());
    device_->release(device, address, bytes);
  }
  DeviceMemoryInfo memory_info(int device) override {
    queried.push_back(calls_recorded_on_this_thread());  // a query: recording stays on
    return device_->memory_info(device);
  }
  EventHandle record_event(int device, StreamId stream) override { return device_->record_event(device, stream); }
  bool event_completed(EventHandle event) override { return device_->event_completed(event); }
  void synchronize_event(EventHandle event) override { device_->synchronize_event(event); }
  void release_event(EventHandle event) override { device_->release_event(event); }
  bool supports_expandable_segments(int device) override { return device_->supports_expandable_segments(device); }
  std::optional<uintptr_t> reserve_address_space(int device, size_t bytes) override {
    recorded.push_back(calls_recorded_on_this_thread());
    return device_->reserve_address_space(device, bytes);
  }
  void release_address_space(int device, uintptr_t address, size_t bytes) override {
    recorded.push_back(calls_recorded_on_this_thread());
    device_->release_address_space(device, address, bytes);
  }
  bool map_pages(int device, uintptr_t address, size_t bytes, size_t page_size) override {
    recorded.push_back(calls_recorded_on_this_thread());
    return device_->map_pages(device, address, bytes, page_size);
  }
  void unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_size, StreamId stream) override {
    recorded.push_back(calls_recorded_on_this_thread());
    device_->unmap_pages(device, address, bytes, page_size, stream);
  }
  StreamId create_stream(int device) override { return device_->create_stream(device); }

 private:
  std::shared_ptr<SimulatedBackend> device_;
};

TEST(UnrecordedBackend, TheAllocatorsOwnReservationsAreMadeWithRecordingOff) {
  SimulatedBackend::Options options;
  options.capacity_bytes = 256 * kMiB;
  auto watching = std::make_shared<Watching>(std::make_shared<SimulatedBackend>(options));
  CachingAllocator allocator(std::make_shared<UnrecordedBackend>(watching));
  void* p = allocator.allocate(10 * kMiB);
  allocator.deallocate(p);
  allocator.empty_cache();
  ASSERT_GE(watching->recorded.size(), 2u);
  for (bool on : watching->recorded) EXPECT_FALSE(on);
  EXPECT_TRUE(calls_recorded_on_this_thread());  // and on again after each call

  // Queries pass through with recording on (they make no memory).
  watching->queried.clear();
  UnrecordedBackend backend(watching);
  EXPECT_EQ(backend.memory_info(0).total_bytes, 256 * kMiB);
  EXPECT_EQ(watching->queried, std::vector<bool>{true});
  EXPECT_EQ(backend.name(), "simulated");
}

TEST(UnrecordedBackend, ExpandableSegmentsMapAndUnmapWithRecordingOff) {
  SimulatedBackend::Options options;
  options.capacity_bytes = 256 * kMiB;
  auto watching = std::make_shared<Watching>(std::make_shared<SimulatedBackend>(options));
  AllocatorConfig config;
  config.expandable_segments = true;
  CachingAllocator allocator(std::make_shared<UnrecordedBackend>(watching), config);
  void* p = allocator.allocate(30 * kMiB);
  allocator.deallocate(p);
  allocator.empty_cache();
  ASSERT_GE(watching->recorded.size(), 3u);  // address space, a mapping, an unmapping
  for (bool on : watching->recorded) EXPECT_FALSE(on);
}

}  // namespace
}  // namespace memsnap
