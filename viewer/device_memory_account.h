// Where each device's memory was when a snapshot was taken, from the driver's figures the
// snapshot holds (Snapshot::device_memory): the allocator's reserved bytes (live and cached), what
// this process held outside the allocator, other processes, and what was free. Where the CUDA
// calls outside the allocator were recorded (Snapshot::outside_memory), what this process held
// outside it splits into the libraries that asked CUDA for memory and the remainder no recorded
// call made (the CUDA context, module images, local memory). Only what the figures support:
// without NVML's list (or without this process in it) the memory outside the allocator is one
// figure less what the libraries hold, not split by process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "snapshot/snapshot.h"

namespace memsnap {

struct DeviceMemoryAccount {
  int64_t device = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  uint64_t reserved_bytes = 0;   // the allocator's segments on the device
  uint64_t allocated_bytes = 0;  // their live blocks
  // total - free - reserved: the CUDA context, other libraries, other processes. Unset when the
  // figures contradict each other (the allocator holding more than the driver says is in use).
  std::optional<uint64_t> outside_bytes;
  // From NVML's list, when this process (by pid) is in it: its bytes on the device, and of them
  // those outside the allocator (the CUDA context and other libraries' memory).
  std::optional<uint64_t> this_process_bytes;
  std::optional<uint64_t> this_process_outside_bytes;
  std::vector<std::pair<int64_t, uint64_t>> other_processes;  // pid, bytes; largest first
  uint64_t other_processes_bytes = 0;
  bool processes_listed = false;  // NVML gave a list
  // Device memory other libraries held (from the recorded calls; unset where they were not
  // recorded), by library, largest first.
  std::optional<uint64_t> libraries_bytes;
  std::vector<std::pair<std::string, uint64_t>> libraries;
  // This process's memory outside the allocator that no recorded call made: its CUDA context,
  // module images, local memory. Set when NVML lists this process and the calls were recorded.
  std::optional<uint64_t> context_bytes;
  // What NVML listed for this process on the device just before the allocator first asked it
  // for a segment (Snapshot::device_memory_before_first_segment): its CUDA context as created,
  // with whatever it had allocated before. Unset where not taken or this process was not listed.
  std::optional<uint64_t> before_first_segment_bytes;
  // Of it, the device memory other libraries held then by the calls recorded (unset where they
  // were not recorded, or the record does not reach back to then).
  std::optional<uint64_t> before_first_segment_libraries_bytes;
  std::string note;               // what the figures cannot say, and why
};

// Memory outside the allocator as the recorded calls saw it, whole process: device memory by
// device and library, and pinned host memory by library.
struct OutsideMemoryAccount {
  bool present = false;           // the snapshot says whether the calls were recorded
  std::string unrecorded_reason;  // why they were not ("" when they were)
  struct Library {
    int64_t device = -1;  // -1: host memory
    std::string library;  // "" when unknown
    uint64_t bytes = 0;
    uint64_t allocations = 0;
  };
  std::vector<Library> device_libraries;  // by device, then largest first
  std::vector<Library> host_libraries;    // pinned and registered host memory, largest first
  uint64_t pinned_host_bytes = 0;
  uint64_t registered_host_bytes = 0;
  uint64_t managed_bytes = 0;  // cudaMallocManaged: on a device only where its pages were touched
};
OutsideMemoryAccount account_outside_memory(const Snapshot& snapshot);
// A library's name for people: "" reads "(library not known)".
std::string library_label(const std::string& library);

// One account per device the snapshot sampled; empty when it holds no driver figures (PyTorch's
// own snapshots, files written before memsnap sampled them).
std::vector<DeviceMemoryAccount> account_device_memory(const Snapshot& snapshot);

nlohmann::json device_memory_json(const std::vector<DeviceMemoryAccount>& accounts);
// Lines for `memsnap stats`, starting with a blank line; "" when there are no accounts.
std::string device_memory_text(const std::vector<DeviceMemoryAccount>& accounts);
nlohmann::json outside_memory_json(const OutsideMemoryAccount& account);
// Lines for `memsnap stats` on memory outside the allocator: the pinned host memory, the
// libraries of devices without driver figures, or why the calls were not recorded; "" when the
// snapshot does not say.
std::string outside_memory_text(const OutsideMemoryAccount& account, const std::vector<DeviceMemoryAccount>& devices);

}  // namespace memsnap
