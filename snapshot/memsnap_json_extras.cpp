// What memsnap's JSON export (json_writer.h) holds beside PyTorch's keys and the process, devices
// and statistics pytorch_document.cpp reads: where the trace's events changed what they were
// recorded under (settings, memory cap, labels), the driver's figures (at the snapshot and
// before the allocator's first segment) and memory outside the allocator with its stacks. Read
// back, a JSON export is the snapshot it was written from: a conversion loses nothing a verdict
// rests on.
#include <string>

#include "snapshot/pytorch_document.h"

namespace memsnap {
namespace json_extras {

using pickle::Object;
using pickle::Value;

// As pytorch_document.cpp charges strings: past what std::string keeps in itself.
uint64_t text_cost(std::string_view text) { return text.size() > 15 ? text.size() + 1 : 0; }

[[noreturn]] void refuse(const std::string& where, const std::string& what) { throw std::runtime_error(where + ": " + what); }
std::string item(const std::string& where, size_t index) { return where + "[" + std::to_string(index) + "]"; }

}  // namespace json_extras

using namespace json_extras;

void PyTorchDocument::convert_memsnap_extras(const Object& root, Snapshot& out) {
  const auto key = [&](std::string_view name) { return store_.intern(name); };
  const auto list_of = [&](std::string_view name, const char* where) -> const Object* {
    const Value v = field(root, key(name));
    if (v == kMissing) return nullptr;
    const Object& list = list_at(v, where);
    return &list;
  };

  if (const Object* by_device = list_of("trace_state_changes", "trace_state_changes")) {
    if (by_device->items.size() > kMaxDevices) refuse("trace_state_changes", "more than " + std::to_string(kMaxDevices) + " devices");
    const uint32_t k_event_index = key("event_index"), k_kind = key("kind"), k_value = key("value"), k_request = key("request");
    for (size_t d = 0; d < by_device->items.size(); ++d) {
      const Object& list = list_at(by_device->items[d], item("trace_state_changes", d));
      auto& changes = out.trace_state_changes.emplace_back();
      for (size_t i = 0; i < list.items.size(); ++i) {
        const std::string where = item(item("trace_state_changes", d), i);
        const Object& c = dict_at(list.items[i], where);
        const std::optional<TraceStateKind> kind = trace_state_kind_from_name(string_field(c, k_kind, where, ""));
        if (!kind) refuse(where + ".kind", "unknown kind of trace state change");
        TraceStateChange change{uint_field(c, k_event_index, where, 0, true), *kind, string_field(c, k_value, where, ""),
                                string_field(c, k_request, where, "")};
        store_.charge(sizeof(TraceStateChange) + text_cost(change.value) + text_cost(change.request));
        changes.push_back(std::move(change));
      }
    }
  }

  const uint32_t k_free = key("free_bytes"), k_total = key("total_bytes"), k_processes = key("processes"), k_bytes = key("bytes");
  const auto samples = [&](std::string_view name, const char* where, bool timed, std::vector<DeviceMemorySample>& into) {
    const Object* list = list_of(name, where);
    if (list == nullptr) return;
    if (list->items.size() > kMaxDevices) refuse(where, "more than " + std::to_string(kMaxDevices) + " devices");
    for (size_t i = 0; i < list->items.size(); ++i) {
      const std::string place = item(where, i);
      const Object& d = dict_at(list->items[i], place);
      DeviceMemorySample sample;
      sample.device = int_field(d, k_device_, place, 0);
      if (sample.device < 0 || sample.device >= static_cast<int64_t>(kMaxDevices)) refuse(place + ".device", "out of range");
      sample.total_bytes = uint_field(d, k_total, place, 0);
      sample.free_bytes = uint_field(d, k_free, place, 0);
      if (timed) sample.time_us = int_field(d, k_time_us_, place, 0);
      const Value processes = field(d, k_processes);
      if (!(processes == kMissing)) {
        const Object& p = list_at(processes, place + ".processes");
        for (size_t j = 0; j < p.items.size(); ++j) {
          const Object& process = dict_at(p.items[j], item(place + ".processes", j));
          store_.charge(sizeof(std::pair<int64_t, uint64_t>));
          sample.processes.emplace_back(int_field(process, k_pid_, place, 0), uint_field(process, k_bytes, place, 0));
        }
      }
      store_.charge(sizeof(DeviceMemorySample));
      into.push_back(std::move(sample));
    }
  };
  samples("device_memory", "device_memory", false, out.device_memory);
  samples("device_memory_before_first_segment", "device_memory_before_first_segment", true,
          out.device_memory_before_first_segment);

  const Value outside = field(root, key("outside_memory"));
  if (outside == kMissing) return;
  const Object& o = dict_at(outside, "outside_memory");
  OutsideMemory memory;
  memory.unrecorded_reason = string_field(o, key("unrecorded_reason"), "outside_memory", "");
  memory.dropped_events = uint_field(o, key("dropped_events"), "outside_memory", 0);
  if (has_field(o, key("recorded_since_us"))) memory.recorded_since_us = int_field(o, key("recorded_since_us"), "outside_memory", 0);
  const uint32_t k_api = key("api"), k_kind = key("kind"), k_library = key("library");
  const auto allocation = [&](const Object& a, const std::string& where) {
    OutsideAllocation out_allocation;
    out_allocation.device = int_field(a, k_device_, where, -1);
    out_allocation.address = uint_field(a, k_address_, where, 0);
    out_allocation.size = uint_field(a, k_size_, where, 0);
    const std::optional<OutsideKind> kind = outside_kind_from_name(string_field(a, k_kind, where, "device"));
    if (!kind) refuse(where + ".kind", "unknown kind of memory outside the allocator");
    out_allocation.kind = *kind;
    out_allocation.api = string_field(a, k_api, where, "");
    out_allocation.library = string_field(a, k_library, where, "");
    out_allocation.stack = stack_field(a, k_frames_, where);
    out_allocation.time_us = int_field(a, k_time_us_, where, 0);
    store_.charge(sizeof(OutsideEvent) + text_cost(out_allocation.api) + text_cost(out_allocation.library));
    return out_allocation;
  };
  const Value events = field(o, key("events"));
  if (!(events == kMissing)) {
    const Object& list = list_at(events, "outside_memory.events");
    for (size_t i = 0; i < list.items.size(); ++i) {
      const std::string where = item("outside_memory.events", i);
      const Object& e = dict_at(list.items[i], where);
      const std::optional<OutsideAction> action = outside_action_from_name(string_field(e, k_action_, where, ""));
      if (!action) refuse(where + ".action", "unknown action");
      memory.events.push_back({*action, allocation(e, where)});
    }
  }
  const Value live = field(o, key("live"));
  if (!(live == kMissing)) {
    const Object& list = list_at(live, "outside_memory.live");
    for (size_t i = 0; i < list.items.size(); ++i) {
      const std::string where = item("outside_memory.live", i);
      memory.live.push_back(allocation(dict_at(list.items[i], where), where));
    }
  }
  out.outside_memory = std::move(memory);
}

}  // namespace memsnap
