#include "allocator/simulated_backend.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

namespace memsnap {
namespace {
// All devices share one address space, [4 GiB, 128 TiB) as on x86-64 Linux user space.
// Each device places segments first-fit from a distinct, recognisable base (0x7f00'0000'0000
// for device 0, then 1 TiB lower per device), far from zero so no address is ever null.
constexpr uintptr_t kAddressSpaceStart = uintptr_t{1} << 32;
constexpr uintptr_t kAddressSpaceEnd = uintptr_t{1} << 47;
constexpr uintptr_t kFirstBase = 0x7f0000000000;
constexpr uintptr_t kDeviceSpan = uintptr_t{1} << 40;
constexpr size_t kSegmentAlignment = 2 << 20;
}  // namespace

SimulatedBackend::SimulatedBackend(Options options) : options_(options) {
  if (options_.device_count < 1 || options_.device_count > 64)
    throw DeviceError("simulated backend: device_count must be between 1 and 64");
  devices_.resize(static_cast<size_t>(options_.device_count));
  free_ranges_.emplace(kAddressSpaceStart, kAddressSpaceEnd - kAddressSpaceStart);
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

bool SimulatedBackend::take_range(uintptr_t address, size_t bytes) {
  auto it = free_ranges_.upper_bound(address);
  if (it == free_ranges_.begin()) return false;
  --it;
  const uintptr_t start = it->first;
  const size_t length = it->second;
  if (address < start || bytes > length || address - start > length - bytes) return false;
  free_ranges_.erase(it);
  if (address > start) free_ranges_.emplace(start, address - start);
  if (address + bytes < start + length)
    free_ranges_.emplace(address + bytes, start + length - (address + bytes));
  return true;
}

// Returns a range to the free space, coalescing it with its free neighbours.
void SimulatedBackend::return_range(uintptr_t address, size_t bytes) {
  auto [pos, inserted] = free_ranges_.emplace(address, bytes);
  if (pos != free_ranges_.begin()) {
    auto before = std::prev(pos);
    if (before->first + before->second == pos->first) {
      before->second += pos->second;
      free_ranges_.erase(pos);
      pos = before;
    }
  }
  auto after = std::next(pos);
  if (after != free_ranges_.end() && pos->first + pos->second == after->first) {
    pos->second += after->second;
    free_ranges_.erase(after);
  }
}

std::optional<uintptr_t> SimulatedBackend::place(int device, DeviceState& state, size_t bytes) {
  if (state.preferred_address) {
    const uintptr_t wanted = *state.preferred_address;
    state.preferred_address.reset();
    if (take_range(wanted, bytes)) return wanted;
  }
  const size_t aligned = (bytes + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
  // First fit at or above the device's base; the ranges below it belong to other devices'
  // bases, so look there only when nothing above fits.
  const uintptr_t base = base_address(device);
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& [start, length] : free_ranges_) {
      if ((pass == 0) != (start + length > base)) continue;
      const uintptr_t from = pass == 0 ? std::max(start, base) : start;
      const uintptr_t address = (from + kSegmentAlignment - 1) / kSegmentAlignment * kSegmentAlignment;
      if (address + aligned <= start + length) {
        take_range(address, bytes);
        return address;
      }
    }
  }
  return std::nullopt;
}

// Whether a request for `bytes` of memory fails: the device is full, or a test asked for it.
bool SimulatedBackend::take_failure(int device, DeviceState& d, size_t bytes) {
  if (bytes == 0 || d.used + bytes > options_.capacity_bytes || bytes > kDeviceSpan) return true;
  if (d.failures_pending > 0) {
    --d.failures_pending;
    return true;
  }
  return failure_hook_ && failure_hook_(device, bytes);
}

std::optional<uintptr_t> SimulatedBackend::reserve(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& d = state(device);
  ++reserve_calls_;
  const bool fail = take_failure(device, d, bytes);
  std::optional<uintptr_t> address;
  if (!fail) address = place(device, d, bytes);
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
  return_range(address, bytes);
}

bool SimulatedBackend::supports_expandable_segments(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  state(device);
  return options_.supports_expandable_segments;
}

std::optional<uintptr_t> SimulatedBackend::reserve_address_space(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& d = state(device);
  if (!options_.supports_expandable_segments)
    throw DeviceError("simulated backend: this device was set up without expandable segments");
  if (bytes == 0 || bytes > kDeviceSpan) return std::nullopt;
  const std::optional<uintptr_t> address = place(device, d, bytes);
  if (address) d.address_spaces.emplace(*address, bytes);
  return address;
}

void SimulatedBackend::release_address_space(int device, uintptr_t address, size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& d = state(device);
  auto it = d.address_spaces.find(address);
  if (it == d.address_spaces.end() || it->second != bytes)
    throw DeviceError("simulated backend: release of address space that is not reserved (address " +
                      std::to_string(address) + ", " + std::to_string(bytes) + " bytes)");
  auto page = d.mapped_pages.lower_bound(address);
  if (page != d.mapped_pages.end() && page->first < address + bytes)
    throw DeviceError("simulated backend: address space released with pages still mapped (" +
                      std::to_string(page->first) + ")");
  d.address_spaces.erase(it);
  return_range(address, bytes);
}

bool SimulatedBackend::inside_address_space(const DeviceState& d, uintptr_t address,
                                            size_t bytes) const {
  auto it = d.address_spaces.upper_bound(address);
  if (it == d.address_spaces.begin()) return false;
  --it;
  return address >= it->first && bytes <= it->second && address - it->first <= it->second - bytes;
}

bool SimulatedBackend::map_pages(int device, uintptr_t address, size_t bytes, size_t page_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& d = state(device);
  if (page_size == 0 || bytes == 0 || bytes % page_size != 0 ||
      !inside_address_space(d, address, bytes))
    throw DeviceError("simulated backend: mapping of pages outside reserved address space (" +
                      std::to_string(address) + ", " + std::to_string(bytes) + " bytes)");
  auto next = d.mapped_pages.lower_bound(address);
  if ((next != d.mapped_pages.end() && next->first < address + bytes) ||
      (next != d.mapped_pages.begin() && std::prev(next)->first + std::prev(next)->second > address))
    throw DeviceError("simulated backend: mapping of a page that is already mapped (" +
                      std::to_string(address) + ")");
  ++map_calls_;
  if (take_failure(device, d, bytes)) {
    ++failed_reserves_;
    return false;
  }
  for (size_t offset = 0; offset < bytes; offset += page_size)
    d.mapped_pages.emplace_hint(d.mapped_pages.end(), address + offset, page_size);
  d.used += bytes;
  return true;
}

void SimulatedBackend::unmap_pages(int device, uintptr_t address, size_t bytes, size_t page_size,
                                   StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceState& d = state(device);
  if (page_size == 0 || bytes == 0 || bytes % page_size != 0)
    throw DeviceError("simulated backend: unmapping a range that is not whole pages");
  for (size_t offset = 0; offset < bytes; offset += page_size) {
    auto page = d.mapped_pages.find(address + offset);
    if (page == d.mapped_pages.end() || page->second != page_size)
      throw DeviceError("simulated backend: unmapping a page that is not mapped (" +
                        std::to_string(address + offset) + ")");
  }
  ++unmap_calls_;
  // Unmapping waits for the stream, so everything recorded on it has completed.
  complete_stream(stream);
  d.mapped_pages.erase(d.mapped_pages.find(address), d.mapped_pages.lower_bound(address + bytes));
  d.used -= bytes;
}

DeviceMemoryInfo SimulatedBackend::memory_info(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  const DeviceState& d = state(device);
  return {options_.capacity_bytes > d.used ? options_.capacity_bytes - d.used : 0, options_.capacity_bytes};
}

std::vector<DeviceProcess> SimulatedBackend::device_processes(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  return state(device).processes;
}

void SimulatedBackend::set_device_processes(int device, std::vector<DeviceProcess> processes) {
  std::lock_guard<std::mutex> lock(mutex_);
  state(device).processes = std::move(processes);
}

EventHandle SimulatedBackend::record_event(int device, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  state(device);
  const EventHandle handle = next_event_++;
  events_.emplace(handle, EventState{device, stream, false});
  uncompleted_[stream].insert(handle);
  return handle;
}

void SimulatedBackend::note_completion(int device, StreamId stream) {
  DeviceState& d = state(device);
  const uint64_t count = ++completion_count_;
  auto [at, fresh] = d.completed_streams.try_emplace(stream, count);
  if (!fresh) {
    d.completions.erase(at->second);
    at->second = count;
  }
  d.completions.emplace(count, stream);
}

void SimulatedBackend::complete(EventHandle handle, EventState& event) {
  if (event.completed) return;
  event.completed = true;
  auto waiting = uncompleted_.find(event.stream);
  waiting->second.erase(handle);
  if (waiting->second.empty()) uncompleted_.erase(waiting);
  note_completion(event.device, event.stream);
}

void SimulatedBackend::complete_stream(StreamId stream) {
  auto waiting = uncompleted_.find(stream);
  if (waiting == uncompleted_.end()) return;
  std::set<int> devices;
  for (EventHandle handle : waiting->second) {
    EventState& event = events_.at(handle);
    event.completed = true;
    devices.insert(event.device);
  }
  uncompleted_.erase(waiting);
  for (int device : devices) note_completion(device, stream);
}

bool SimulatedBackend::streams_completed_since(int device, uint64_t since, uint64_t& count,
                                               std::vector<StreamId>& streams) {
  std::lock_guard<std::mutex> lock(mutex_);
  const DeviceState& d = state(device);
  if (options_.events_complete_immediately) return false;
  for (auto it = d.completions.upper_bound(since); it != d.completions.end(); ++it)
    streams.push_back(it->second);
  count = completion_count_;
  return true;
}

DeviceBackend::CaptureState SimulatedBackend::capture_state(int, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  CaptureState state;
  auto it = capturing_.find(stream);
  if (it == capturing_.end()) return state;
  state.capturing = true;
  state.capture_id = capture_id_;
  state.terminals = it->second;
  return state;
}

std::vector<uintptr_t> SimulatedBackend::node_dependencies(int, uintptr_t node) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = node_dependencies_.find(node);
  return it == node_dependencies_.end() ? std::vector<uintptr_t>{} : it->second;
}

void SimulatedBackend::capture_begin(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capturing_.empty()) ++capture_id_;
  capturing_[stream];
}

uintptr_t SimulatedBackend::capture_work(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = capturing_.find(stream);
  if (it == capturing_.end()) throw std::invalid_argument("capture_work: the stream is not capturing");
  const uintptr_t node = next_node_++;
  node_dependencies_[node] = it->second;
  it->second = {node};
  return node;
}

void SimulatedBackend::capture_wait(StreamId waiter, StreamId other) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto from = capturing_.find(other);
  if (from == capturing_.end()) throw std::invalid_argument("capture_wait: the stream waited on is not capturing");
  const std::vector<uintptr_t> joined = from->second;
  std::vector<uintptr_t>& terminals = capturing_[waiter];
  for (uintptr_t node : joined)
    if (std::find(terminals.begin(), terminals.end(), node) == terminals.end()) terminals.push_back(node);
}

void SimulatedBackend::capture_end(StreamId) {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_.clear();
  node_dependencies_.clear();
}

StreamId SimulatedBackend::create_stream(int device) {
  std::lock_guard<std::mutex> lock(mutex_);
  state(device);
  return next_stream_++;
}

bool SimulatedBackend::event_completed(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(event);
  if (it == events_.end()) throw DeviceError("simulated backend: query of an unknown event");
  if (options_.events_complete_immediately) complete(it->first, it->second);
  return it->second.completed;
}

void SimulatedBackend::synchronize_event(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(event);
  if (it == events_.end()) throw DeviceError("simulated backend: sync on an unknown event");
  complete(it->first, it->second);
}

void SimulatedBackend::release_event(EventHandle event) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = events_.find(event);
  if (it == events_.end()) throw DeviceError("simulated backend: release of an unknown event");
  if (!it->second.completed) {
    auto waiting = uncompleted_.find(it->second.stream);
    waiting->second.erase(event);
    if (waiting->second.empty()) uncompleted_.erase(waiting);
  }
  events_.erase(it);
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

void SimulatedBackend::set_capacity_bytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.capacity_bytes = bytes;
}

void SimulatedBackend::set_events_complete_immediately(bool immediately) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_.events_complete_immediately = immediately;
}

void SimulatedBackend::complete_events(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  complete_stream(stream);
}

void SimulatedBackend::complete_all_events() {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!uncompleted_.empty()) complete_stream(uncompleted_.begin()->first);
}

size_t SimulatedBackend::used_bytes(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state(device).used;
}

size_t SimulatedBackend::live_segments(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state(device).reserved.size();
}

size_t SimulatedBackend::mapped_bytes(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = 0;
  for (const auto& [address, size] : state(device).mapped_pages) bytes += size;
  return bytes;
}

size_t SimulatedBackend::address_spaces(int device) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state(device).address_spaces.size();
}

uint64_t SimulatedBackend::map_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return map_calls_;
}

uint64_t SimulatedBackend::unmap_calls() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return unmap_calls_;
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
