#include "allocator/simulated_backend.h"

#include <iterator>
#include <string>

namespace memsnap {
namespace {
// Each device's addresses start at a distinct, recognisable base (0x7f00'0000'0000 for
// device 0, then 1 TiB apart), far from zero so that no address is ever null.
constexpr uintptr_t kFirstBase = 0x7f0000000000;
constexpr uintptr_t kDeviceSpan = uintptr_t{1} << 40;
constexpr size_t kSegmentAlignment = 2 << 20;
}  // namespace

SimulatedBackend::SimulatedBackend(Options options) : options_(options) {
  if (options_.device_count < 1 || options_.device_count > 64)
    throw DeviceError("simulated backend: device_count must be between 1 and 64");
  devices_.resize(static_cast<size_t>(options_.device_count));
  for (int d = 0; d < options_.device_count; ++d)
    devices_[static_cast<size_t>(d)].free_ranges.emplace(base_address(d), kDeviceSpan / 2);
}

uintptr_t SimulatedBackend::base_address(int device) {
  return kFirstBase - static_cast<uintptr_t>(device) * kDeviceSpan;
}

SimulatedBackend::DeviceState& SimulatedBackend::state(int device) {
  if (device < 0 || device >= options_.device_count)
    throw DeviceError("simulated backend: no device " + std::to_string(device));
  return devices_[static_cast<size_t>(device)];
}
const SimulatedBackend::DeviceState& SimulatedBackend::state(int device) const {
  return const_cast<SimulatedBackend*>(this)->state(device);
}

bool SimulatedBackend::take_range(DeviceState& device, uintptr_t address, size_t bytes) {
  auto it = device.free_ranges.upper_bound(address);
  if (it == device.free_ranges.begin()) return false;
  --it;
  const uintptr_t start = it->first;
  const size_t length = it->second;
  if (address < start || address + bytes > start + length) return false;
  device.free_ranges.erase(it);
  if (address > start) device.free_ranges.emplace(start, address - start);
  if (address + bytes < start + length)
    device.free_ranges.emplace(address + bytes, start + length - (address + bytes));
  return true;
}

std::optional<uintptr_t> SimulatedBackend::place(DeviceState& device, size_t bytes) {
  if (device.preferred_address) {
    const uintptr_t wanted = *device.preferred_address;
    device.preferred_address.reset();
    if (take_range(device, wanted, bytes)) return wanted;
  }
  const size_t aligned = (bytes + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
  for (auto& [start, length] : device.free_ranges) {
    const uintptr_t address = (start + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
    if (address + aligned <= start + length) {
      take_range(device, address, bytes);
      return address;
    }
  }
  return std::nullopt;
}

std::optional<uintptr_t> SimulatedBackend::reserve(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& d = state(device);
  ++reserve_calls_;
  bool fail = bytes == 0 || d.used + bytes > options_.capacity_bytes || bytes > kDeviceSpan / 2;
  if (!fail && d.failures_pending > 0) {
    --d.failures_pending;
    fail = true;
  }
  if (!fail && failure_hook_ && failure_hook_(device, bytes)) fail = true;
  std::optional<uintptr_t> address;
  if (!fail) address = place(d, bytes);
  if (!address) {
    ++failed_reserves_;
    return std::nullopt;
  }
  d.reserved.emplace(*address, bytes);
  d.used += bytes;
  return address;
}

void SimulatedBackend::release(int device, uintptr_t address, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& d = state(device);
  auto it = d.reserved.find(address);
  if (it == d.reserved.end() || it->second != bytes)
    throw DeviceError("simulated backend: release of a range that is not reserved (address " +
                      std::to_string(address) + ", " + std::to_string(bytes) + " bytes)");
  d.reserved.erase(it);
  d.used -= bytes;
  // Return the range and coalesce it with its free neighbours.
  auto [pos, inserted] = d.free_ranges.emplace(address, bytes);
  if (pos != d.free_ranges.begin()) {
    auto before = std::prev(pos);
    if (before->first + before->second == pos->first) {
      before->second += pos->second;
      d.free_ranges.erase(pos);
      pos = before;
    }
  }
  auto after = std::next(pos);
  if (after != d.free_ranges.end() && pos->first + pos->second == after->first) {
    pos->second += after->second;
    d.free_ranges.erase(after);
  }
}

DeviceMemoryInfo SimulatedBackend::memory_info(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  const DeviceState& d = state(device);
  return {options_.capacity_bytes - d.used, options_.capacity_bytes};
}

EventHandle SimulatedBackend::record_event(int device, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  state(device);
  const EventHandle handle = next_event_++;
  events_.emplace(handle, EventState{stream, false});
  return handle;
}

bool SimulatedBackend::event_completed(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(event);
  if (it == events_.end()) throw DeviceError("simulated backend: query of an unknown event");
  if (options_.events_complete_immediately) it->second.completed = true;
  return it->second.completed;
}

void SimulatedBackend::synchronize_event(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(event);
  if (it == events_.end()) throw DeviceError("simulated backend: sync on an unknown event");
  it->second.completed = true;
}

void SimulatedBackend::release_event(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (events_.erase(event) == 0)
    throw DeviceError("simulated backend: release of an unknown event");
}

void SimulatedBackend::prefer_address_for_next_reserve(int device, uintptr_t address) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (address == 0)
    state(device).preferred_address.reset();
  else
    state(device).preferred_address = address;
}

void SimulatedBackend::fail_next_reserves(int device, int count) {
  std::lock_guard<std::mutex> lock(mutex_);
  state(device).failures_pending = count;
}

void SimulatedBackend::set_reserve_failure_hook(std::function<bool(int, size_t)> hook) {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_hook_ = std::move(hook);
}

void SimulatedBackend::set_events_complete_immediately(bool immediately) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.events_complete_immediately = immediately;
}

void SimulatedBackend::complete_events(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [handle, event] : events_)
    if (event.stream == stream) event.completed = true;
}

void SimulatedBackend::complete_all_events() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [handle, event] : events_) event.completed = true;
}

size_t SimulatedBackend::used_bytes(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state(device).used;
}

size_t SimulatedBackend::live_segments(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state(device).reserved.size();
}

size_t SimulatedBackend::live_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

uint64_t SimulatedBackend::reserve_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserve_calls_;
}

uint64_t SimulatedBackend::failed_reserves() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_reserves_;
}

}  // namespace memsnap
