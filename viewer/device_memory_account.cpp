#include "viewer/device_memory_account.h"

#include <algorithm>
#include <map>

#include "allocator/counted.h"
#include "allocator/device_stats.h"
#include "snapshot/outside_device_history.h"

namespace memsnap {

std::string library_label(const std::string& library) {
  return library.empty() ? "(library not known)" : library;
}

OutsideMemoryAccount account_outside_memory(const Snapshot& snapshot) {
  OutsideMemoryAccount account;
  if (!snapshot.outside_memory) return account;
  account.present = true;
  account.unrecorded_reason = snapshot.outside_memory->unrecorded_reason;
  std::map<std::pair<int64_t, std::string>, OutsideMemoryAccount::Library> by_library;
  for (const OutsideAllocation& a : snapshot.outside_memory->live) {
    if (a.kind == OutsideKind::kManaged) account.managed_bytes += a.size;
    if (a.kind == OutsideKind::kPinnedHost) account.pinned_host_bytes += a.size;
    if (a.kind == OutsideKind::kRegisteredHost) account.registered_host_bytes += a.size;
    if (a.kind == OutsideKind::kManaged) continue;  // not known to be on the device
    OutsideMemoryAccount::Library& entry = by_library[{a.device, a.library}];
    entry.device = a.device;
    entry.library = a.library;
    entry.bytes += a.size;
    ++entry.allocations;
  }
  for (auto& [key, entry] : by_library)
    (entry.device < 0 ? account.host_libraries : account.device_libraries).push_back(std::move(entry));
  const auto order = [](const OutsideMemoryAccount::Library& x, const OutsideMemoryAccount::Library& y) {
    return x.device != y.device ? x.device < y.device : x.bytes > y.bytes;
  };
  std::stable_sort(account.device_libraries.begin(), account.device_libraries.end(), order);
  std::stable_sort(account.host_libraries.begin(), account.host_libraries.end(), order);
  return account;
}

std::vector<DeviceMemoryAccount> account_device_memory(const Snapshot& snapshot) {
  const OutsideMemoryAccount outside = account_outside_memory(snapshot);
  const bool recorded = outside.present && outside.unrecorded_reason.empty();
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
    if (recorded) {
      a.libraries_bytes = 0;
      for (const OutsideMemoryAccount::Library& library : outside.device_libraries) {
        if (library.device != sample.device) continue;
        a.libraries.emplace_back(library.library, library.bytes);
        *a.libraries_bytes += library.bytes;
      }
      if (a.this_process_outside_bytes) {
        if (*a.libraries_bytes <= *a.this_process_outside_bytes)
          a.context_bytes = *a.this_process_outside_bytes - *a.libraries_bytes;
        else if (a.note.empty())
          a.note = "the libraries' recorded allocations (" + format_bytes(static_cast<int64_t>(*a.libraries_bytes)) +
                   ") are more than NVML counts for this process outside the allocator: the figures were not taken "
                   "at one moment, and the CUDA context's share cannot be told";
      }
    }
    for (const DeviceMemorySample& first : snapshot.device_memory_before_first_segment) {
      if (first.device != sample.device) continue;
      for (const auto& [pid, process_bytes] : first.processes)
        if (pid == snapshot.process.pid) a.before_first_segment_bytes = process_bytes;
      if (a.before_first_segment_bytes && recorded) {
        const OutsideDeviceHistory history = outside_device_history(snapshot, sample.device);
        if (history.known_at(first.time_us)) {
          const uint64_t held = OutsideHeldCursor(history).at(first.time_us);
          if (held <= *a.before_first_segment_bytes) a.before_first_segment_libraries_bytes = held;
        }
      }
      break;
    }
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

nlohmann::json libraries_json(const std::vector<std::pair<std::string, uint64_t>>& libraries) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [library, bytes] : libraries) out.push_back({{"library", library}, {"bytes", bytes}});
  return out;
}

// "libnccl.so.2 1.20 GiB, libcublasLt.so.13 64.00 MiB, ..." (the first five).
std::string libraries_line(const std::vector<std::pair<std::string, uint64_t>>& libraries) {
  std::string listed;
  for (size_t i = 0; i < libraries.size() && i < 5; ++i)
    listed += (i ? ", " : "") + library_label(libraries[i].first) + " " + bytes_text(libraries[i].second);
  if (libraries.size() > 5) listed += ", ...";
  return listed;
}

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
                   {"libraries_bytes", optional_bytes(a.libraries_bytes)},
                   {"libraries", libraries_json(a.libraries)},
                   {"context_bytes", optional_bytes(a.context_bytes)},
                   {"before_first_segment_bytes", optional_bytes(a.before_first_segment_bytes)},
                   {"before_first_segment_libraries_bytes", optional_bytes(a.before_first_segment_libraries_bytes)},
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
    if (a.libraries_bytes) {
      row("other libraries in this process", *a.libraries_bytes,
          a.libraries.empty() ? "none allocated outside the allocator" : libraries_line(a.libraries));
      if (a.context_bytes)
        row("CUDA context and unaccounted", *a.context_bytes, "the context, module images, local memory: no recorded call made it");
      else if (a.outside_bytes && !a.this_process_outside_bytes && *a.outside_bytes >= *a.libraries_bytes)
        row("outside the allocator, the rest", *a.outside_bytes - *a.libraries_bytes,
            "this process's CUDA context, other processes");
    } else if (a.this_process_outside_bytes) {
      row("this process, outside the allocator", *a.this_process_outside_bytes,
          "its CUDA context, other libraries' memory (NCCL, cuDNN, another allocator)");
    } else if (a.outside_bytes) {
      row("outside the allocator", *a.outside_bytes,
          "this process's CUDA context and other libraries' memory, other processes");
    }
    if (a.before_first_segment_bytes) {
      const std::optional<uint64_t>& libraries = a.before_first_segment_libraries_bytes;
      row("before the allocator's first segment", *a.before_first_segment_bytes,
          !libraries ? "this process then: its CUDA context as created, with whatever it had allocated before"
          : *libraries == 0
              ? "this process then: its CUDA context as created (no recorded call held memory yet)"
              : "this process then: " + bytes_text(*libraries) +
                    " of it other libraries' (recorded calls), the rest its CUDA context as created");
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

nlohmann::json outside_memory_json(const OutsideMemoryAccount& account) {
  if (!account.present) return nullptr;
  const auto list = [](const std::vector<OutsideMemoryAccount::Library>& libraries) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& l : libraries)
      out.push_back({{"device", l.device}, {"library", l.library}, {"bytes", l.bytes}, {"allocations", l.allocations}});
    return out;
  };
  return {{"recorded", account.unrecorded_reason.empty()},
          {"unrecorded_reason", account.unrecorded_reason},
          {"device_libraries", list(account.device_libraries)},
          {"host_libraries", list(account.host_libraries)},
          {"pinned_host_bytes", account.pinned_host_bytes},
          {"registered_host_bytes", account.registered_host_bytes},
          {"managed_bytes", account.managed_bytes}};
}

std::string outside_memory_text(const OutsideMemoryAccount& account, const std::vector<DeviceMemoryAccount>& devices) {
  if (!account.present) return "";
  std::string out = "\nmemory outside the allocator (the CUDA calls recorded):\n";
  if (!account.unrecorded_reason.empty()) return out + "  not recorded: " + account.unrecorded_reason + "\n";
  char line[256];
  auto row = [&](const std::string& name, uint64_t value, const std::string& note) {
    std::snprintf(line, sizeof line, "    %-36s %12s", name.c_str(), bytes_text(value).c_str());
    out += line + (note.empty() ? std::string() : "  " + note) + "\n";
  };
  const size_t before = out.size();
  // Devices the driver's figures already split (device_memory_text) are not listed again.
  int64_t shown_device = -2;
  for (const OutsideMemoryAccount::Library& l : account.device_libraries) {
    const bool split = std::any_of(devices.begin(), devices.end(),
                                   [&](const DeviceMemoryAccount& d) { return d.device == l.device && d.libraries_bytes; });
    if (split) continue;
    if (l.device != shown_device) out += "  device " + std::to_string(l.device) + ":\n";
    shown_device = l.device;
    row(library_label(l.library), l.bytes, counted(l.allocations, "allocation", "allocations"));
  }
  if (!account.host_libraries.empty()) {
    out += "  pinned host memory: " + bytes_text(account.pinned_host_bytes + account.registered_host_bytes) + "\n";
    for (const OutsideMemoryAccount::Library& l : account.host_libraries)
      row(library_label(l.library), l.bytes, counted(l.allocations, "allocation", "allocations"));
  }
  if (account.managed_bytes > 0)
    out += "  managed memory (cudaMallocManaged): " + bytes_text(account.managed_bytes) +
           ", on a device only where its pages were touched\n";
  if (out.size() == before) out += "  none, besides what the device figures above show\n";
  return out;
}

}  // namespace memsnap
