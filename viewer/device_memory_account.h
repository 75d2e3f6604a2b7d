// Where each device's memory was when a snapshot was taken, from the driver's figures the
// snapshot holds (Snapshot::device_memory): the allocator's reserved bytes (live and cached), what
// this process held outside the allocator (its CUDA context, other libraries' memory), other
// processes, and what was free. Only what the figures support: without NVML's list (or without
// this process in it) the memory outside the allocator is one figure, not split.
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
  std::string note;               // what the figures cannot say, and why
};

// One account per device the snapshot sampled; empty when it holds no driver figures (PyTorch's
// own snapshots, files written before memsnap sampled them).
std::vector<DeviceMemoryAccount> account_device_memory(const Snapshot& snapshot);

nlohmann::json device_memory_json(const std::vector<DeviceMemoryAccount>& accounts);
// Lines for `memsnap stats`, starting with a blank line; "" when there are no accounts.
std::string device_memory_text(const std::vector<DeviceMemoryAccount>& accounts);

}  // namespace memsnap
