#include "viewer/device_memory_account.h"

#include <algorithm>

#include "allocator/counted.h"
#include "allocator/device_stats.h"

namespace memsnap {

std::vector<DeviceMemoryAccount> account_device_memory(const Snapshot& snapshot) {
  std::vector<DeviceMemoryAccount> accounts;
  for (const DeviceMemorySample& sample : snapshot.device_memory) {
    DeviceMemoryAccount a;
    a.device = sample.device;
    a.total_bytes = sample.total_bytes;
    a.free_bytes = std::min(sample.free_bytes, sample.total_bytes);
    for (const SnapshotSegment& segment : snapshot.segments) {
      if (segment.device != sample.device) continue;
      a.reserved_bytes += segment.total_size;
      a.allocated_bytes += segment.allocated_size;
    }
    const uint64_t used = a.total_bytes - a.free_bytes;
    if (a.reserved_bytes <= used)
      a.outside_bytes = used - a.reserved_bytes;
    else
      a.note = "the allocator's segments (" + format_bytes(static_cast<int64_t>(a.reserved_bytes)) +
               ") are more than the driver counted in use (" + format_bytes(static_cast<int64_t>(used)) +
               "): the figures were not taken at one moment, and memory outside the allocator cannot be told";
    a.processes_listed = !sample.processes.empty();
    for (const auto& [pid, process_bytes] : sample.processes) {
      if (pid == snapshot.process.pid && !a.this_process_bytes) {
        a.this_process_bytes = process_bytes;
      } else {
        a.other_processes.emplace_back(pid, process_bytes);
        a.other_processes_bytes += process_bytes;
      }
    }
    std::stable_sort(a.other_processes.begin(), a.other_processes.end(),
                     [](const auto& x, const auto& y) { return x.second > y.second; });
    if (a.this_process_bytes && *a.this_process_bytes >= a.reserved_bytes)
      a.this_process_outside_bytes = *a.this_process_bytes - a.reserved_bytes;
    if (a.processes_listed && !a.this_process_bytes && a.note.empty())
      a.note = "NVML lists " + counted(sample.processes.size(), "process", "processes") + " on the device, but not pid " +
               std::to_string(snapshot.process.pid) +
               " (in a container NVML gives the host's pids): which of them is this process, the figures cannot say";
    accounts.push_back(std::move(a));
  }
  return accounts;
}

namespace {

nlohmann::json optional_bytes(const std::optional<uint64_t>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::string bytes_text(uint64_t value) { return format_bytes(static_cast<int64_t>(value)); }

}  // namespace

nlohmann::json device_memory_json(const std::vector<DeviceMemoryAccount>& accounts) {
  nlohmann::json out = nlohmann::json::array();
  for (const DeviceMemoryAccount& a : accounts) {
    nlohmann::json others = nlohmann::json::array();
    for (const auto& [pid, process_bytes] : a.other_processes) others.push_back({{"pid", pid}, {"bytes", process_bytes}});
    out.push_back({{"device", a.device},
                   {"total_bytes", a.total_bytes},
                   {"free_bytes", a.free_bytes},
                   {"reserved_bytes", a.reserved_bytes},
                   {"allocated_bytes", a.allocated_bytes},
                   {"outside_bytes", optional_bytes(a.outside_bytes)},
                   {"this_process_bytes", optional_bytes(a.this_process_bytes)},
                   {"this_process_outside_bytes", optional_bytes(a.this_process_outside_bytes)},
                   {"other_processes", std::move(others)},
                   {"other_processes_bytes", a.other_processes_bytes},
                   {"processes_listed", a.processes_listed},
                   {"note", a.note}});
  }
  return out;
}

std::string device_memory_text(const std::vector<DeviceMemoryAccount>& accounts) {
  if (accounts.empty()) return "";
  std::string out = "\ndevice memory (the driver's figures when the snapshot was taken):\n";
  char line[256];
  auto row = [&](const std::string& name, uint64_t value, const std::string& note) {
    std::snprintf(line, sizeof line, "    %-36s %12s", name.c_str(), bytes_text(value).c_str());
    out += line + (note.empty() ? std::string() : "  " + note) + "\n";
  };
  for (const DeviceMemoryAccount& a : accounts) {
    out += "  device " + std::to_string(a.device) + ": " + bytes_text(a.total_bytes) + "\n";
    row("reserved by the allocator", a.reserved_bytes, bytes_text(a.allocated_bytes) + " of it allocated");
    if (a.this_process_outside_bytes) {
      row("this process, outside the allocator", *a.this_process_outside_bytes,
          "its CUDA context, other libraries' memory (NCCL, cuDNN, another allocator)");
    } else if (a.outside_bytes) {
      row("outside the allocator", *a.outside_bytes,
          "this process's CUDA context and other libraries' memory, other processes");
    }
    if (a.this_process_outside_bytes) {
      std::string listed;
      for (size_t i = 0; i < a.other_processes.size() && i < 5; ++i)
        listed += (i ? ", " : "") + std::string("pid ") + std::to_string(a.other_processes[i].first) + " " +
                  bytes_text(a.other_processes[i].second);
      if (a.other_processes.size() > 5) listed += ", ...";
      if (!a.other_processes.empty()) row("other processes", a.other_processes_bytes, listed);
      if (a.outside_bytes && a.this_process_outside_bytes) {
        const uint64_t counted_outside = *a.this_process_outside_bytes + a.other_processes_bytes;
        if (*a.outside_bytes > counted_outside)
          row("in use, not listed by NVML", *a.outside_bytes - counted_outside, "the driver's own, processes NVML does not show");
      }
    }
    row("free", a.free_bytes, "");
    if (!a.note.empty()) out += "    (" + a.note + ")\n";
  }
  return out;
}

}  // namespace memsnap
