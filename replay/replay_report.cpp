#include "replay/replay_report.h"

#include <iomanip>
#include <map>
#include <sstream>

namespace memsnap {

nlohmann::json replay_to_json(const ReplayResult& r) {
  const DeviceStats& s = r.stats;
  const int64_t peak_reserved = s.reserved_bytes[kAggregate].peak;
  const int64_t peak_allocated = s.allocated_bytes[kAggregate].peak;
  nlohmann::json out = {
      {"events", r.events},
      {"allocs", r.allocs},
      {"frees", r.frees},
      {"ignored_frees", r.ignored_frees},
      {"reused_live_ids", r.reused_live_ids},
      {"failed_allocs", r.failed_allocs},
      {"segment_allocs", r.segment_alloc_sizes.size()},
      {"segment_alloc_sizes", r.segment_alloc_sizes},
      {"segment_alloc_events", r.segment_alloc_events},
      {"address_mismatches", r.address_mismatches},
      {"first_address_mismatch", r.first_address_mismatch},
      {"segment_frees", r.segment_frees},
      {"peak_reserved_bytes", peak_reserved},
      {"peak_allocated_bytes", peak_allocated},
      {"peak_active_bytes", s.active_bytes[kAggregate].peak},
      {"peak_requested_bytes", s.requested_bytes[kAggregate].peak},
      {"final_reserved_bytes", s.reserved_bytes[kAggregate].current},
      {"final_allocated_bytes", s.allocated_bytes[kAggregate].current},
      {"device_mallocs", s.num_device_alloc},
      {"device_frees", s.num_device_free},
      {"num_alloc_retries", s.num_alloc_retries},
      {"num_ooms", s.num_ooms},
      {"fragmentation", peak_allocated > 0 ? static_cast<double>(peak_reserved) /
                                                 static_cast<double>(peak_allocated)
                                           : 0.0},
      {"address_hints", r.address_hints_used},
      {"config", r.config},
      {"invariant_problems", r.invariant_problems},
  };
  return out;
}

std::string replay_to_text(const ReplayResult& r, const std::string& source_name) {
  const DeviceStats& s = r.stats;
  std::ostringstream out;
  out << "replay of " << source_name << " on the simulated device"
      << (r.config.empty() ? " (default settings)" : " with " + r.config) << "\n\n";
  out << "  events             " << r.events << " (" << r.allocs << " allocs, " << r.frees
      << " frees";
  if (r.ignored_frees) out << ", " << r.ignored_frees << " frees of unknown ids ignored";
  out << ")\n";
  out << "  segments reserved  " << r.segment_alloc_sizes.size() << ", released "
      << r.segment_frees << "\n";
  std::map<size_t, size_t> by_size;
  for (size_t size : r.segment_alloc_sizes) ++by_size[size];
  for (auto it = by_size.rbegin(); it != by_size.rend(); ++it)
    out << std::setw(10) << it->second << " x " << format_bytes(static_cast<int64_t>(it->first))
        << "\n";
  out << "  peak reserved      " << format_bytes(s.reserved_bytes[kAggregate].peak) << "\n";
  out << "  peak allocated     " << format_bytes(s.allocated_bytes[kAggregate].peak) << "\n";
  out << "  peak requested     " << format_bytes(s.requested_bytes[kAggregate].peak) << "\n";
  if (s.allocated_bytes[kAggregate].peak > 0) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.3f",
                  static_cast<double>(s.reserved_bytes[kAggregate].peak) /
                      static_cast<double>(s.allocated_bytes[kAggregate].peak));
    out << "  fragmentation      " << ratio << " (peak reserved / peak allocated)\n";
  }
  out << "  alloc retries      " << s.num_alloc_retries << "\n";
  out << "  out-of-memory      " << s.num_ooms << "\n";
  out << "  address hints      " << (r.address_hints_used ? "on (ids are recorded addresses)" : "off")
      << "\n";
  if (r.address_hints_used) {
    out << "  placement          ";
    if (r.address_mismatches == 0)
      out << "every allocation landed where the recorded run put it\n";
    else
      out << r.address_mismatches << " allocations placed differently from the recorded run, "
          << "first at event " << r.first_address_mismatch << " (0-based)\n";
  }
  if (!r.invariant_problems.empty()) {
    out << "\n  INVARIANT VIOLATIONS (please report):\n";
    for (const std::string& p : r.invariant_problems) out << "    " << p << "\n";
  }
  return out.str();
}

}  // namespace memsnap
