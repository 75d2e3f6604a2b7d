#include "allocator/device_stats.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <sstream>

namespace memsnap {
namespace {

constexpr const char* kStatTypeNames[kNumStatTypes] = {"all", "small_pool", "large_pool"};

template <typename Stats, typename F>
void for_each_array(Stats& stats, F&& f) {
  for (auto* array : {&stats.allocation, &stats.segment, &stats.active, &stats.inactive_split,
                      &stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes,
                      &stats.inactive_split_bytes, &stats.requested_bytes})
    f(*array);
}

template <typename F>
void for_each_stat(DeviceStats& stats, F&& f) {
  for_each_array(stats, [&](StatArray& array) {
    for (Stat& stat : array) f(stat);
  });
  f(stats.oversize_allocations);
  f(stats.oversize_segments);
}

}  // namespace

DeviceStats DeviceStats::settled() const {
  DeviceStats out = *this;
  for_each_array(out, [](StatArray& array) {
    for (const StatType pool : {kSmallPool, kLargePool})
      array[pool].allocated += array[pool].current + array[pool].freed;
    Stat& all = array[kAggregate];
    all.current = array[kSmallPool].current + array[kLargePool].current;
    all.allocated = array[kSmallPool].allocated + array[kLargePool].allocated;
    all.freed = array[kSmallPool].freed + array[kLargePool].freed;
  });
  return out;
}

void DeviceStats::reset_peak() {
  for_each_stat(*this, [](Stat& s) { s.reset_peak(); });
  // (An unsettled aggregate's current is the pools' sum.)
  for_each_array(*this, [](StatArray& array) { array[kAggregate].peak = total(array); });
}

void DeviceStats::reset_accumulated() {
  for_each_stat(*this, [](Stat& s) { s.reset_accumulated(); });
  // (An unsettled pool's allocated is kept as allocated - current - freed.)
  for_each_array(*this, [](StatArray& array) {
    for (const StatType pool : {kSmallPool, kLargePool}) array[pool].allocated = -array[pool].current;
  });
  num_alloc_retries = num_ooms = num_sync_all_streams = 0;
  num_device_alloc = num_device_free = 0;
}

std::vector<std::pair<std::string, int64_t>> to_memory_stats(const DeviceStats& stats) {
  std::vector<std::pair<std::string, int64_t>> out;
  auto add_stat = [&](const std::string& prefix, const Stat& stat) {
    out.emplace_back(prefix + ".current", stat.current);
    out.emplace_back(prefix + ".peak", stat.peak);
    out.emplace_back(prefix + ".allocated", stat.allocated);
    out.emplace_back(prefix + ".freed", stat.freed);
  };
  auto add_array = [&](const char* name, const StatArray& array) {
    for (size_t t = 0; t < kNumStatTypes; ++t)
      add_stat(std::string(name) + "." + kStatTypeNames[t], array[t]);
  };
  add_array("allocation", stats.allocation);
  add_array("segment", stats.segment);
  add_array("active", stats.active);
  add_array("inactive_split", stats.inactive_split);
  add_array("allocated_bytes", stats.allocated_bytes);
  add_array("reserved_bytes", stats.reserved_bytes);
  add_array("active_bytes", stats.active_bytes);
  add_array("inactive_split_bytes", stats.inactive_split_bytes);
  add_array("requested_bytes", stats.requested_bytes);
  add_stat("oversize_allocations", stats.oversize_allocations);
  add_stat("oversize_segments", stats.oversize_segments);
  out.emplace_back("num_alloc_retries", stats.num_alloc_retries);
  out.emplace_back("num_ooms", stats.num_ooms);
  out.emplace_back("num_sync_all_streams", stats.num_sync_all_streams);
  out.emplace_back("num_device_alloc", stats.num_device_alloc);
  out.emplace_back("num_device_free", stats.num_device_free);
  out.emplace_back("max_split_size", stats.max_split_size);
  std::sort(out.begin(), out.end());
  return out;
}

std::string format_hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  const bool negative = bytes < 0;
  double value = negative ? -static_cast<double>(bytes) : static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[64];
  if (unit == 0)
    std::snprintf(text, sizeof text, "%s%" PRId64 " B", negative ? "-" : "", negative ? -bytes : bytes);
  else
    std::snprintf(text, sizeof text, "%s%.2f %s", negative ? "-" : "", value, units[unit]);
  return text;
}

std::string memory_summary(const DeviceStats& stats, int device) {
  // Every line is 77 characters: '|', 75 inside, '|'.
  constexpr int kInside = 75;
  std::ostringstream out;
  const std::string rule = "|" + std::string(kInside, '=') + "|\n";
  const std::string thin = "|" + std::string(kInside, '-') + "|\n";
  char line[160];
  auto centered = [&](const std::string& text) {
    const int left = (kInside - static_cast<int>(text.size())) / 2;
    std::snprintf(line, sizeof line, "|%*s%-*s|\n", left, "", kInside - left, text.c_str());
    out << line;
  };
  auto row = [&](const char* label, const Stat& s, bool bytes) {
    auto cell = [&](int64_t v) { return bytes ? format_bytes(v) : std::to_string(v); };
    std::snprintf(line, sizeof line, "| %-21s | %10s | %10s | %10s | %10s |\n", label,
                  cell(s.current).c_str(), cell(s.peak).c_str(), cell(s.allocated).c_str(),
                  cell(s.freed).c_str());
    out << line;
  };
  auto section = [&](const char* label, const StatArray& a, bool bytes) {
    row(label, a[kAggregate], bytes);
    row("      from large pool", a[kLargePool], bytes);
    row("      from small pool", a[kSmallPool], bytes);
    out << thin;
  };
  out << rule;
  centered("memsnap memory summary, device ID " + std::to_string(device));
  out << thin;
  std::snprintf(line, sizeof line, "| %-36s| %-36s|\n",
                ("           out-of-memory errors: " + std::to_string(stats.num_ooms)).c_str(),
                ("     device malloc retries: " + std::to_string(stats.num_alloc_retries)).c_str());
  out << line;
  out << rule;
  std::snprintf(line, sizeof line, "| %-21s | %10s | %10s | %10s | %10s |\n", "Metric",
                "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed");
  out << line << thin;
  section("Allocated memory", stats.allocated_bytes, true);
  section("Active memory", stats.active_bytes, true);
  section("Requested memory", stats.requested_bytes, true);
  section("GPU reserved memory", stats.reserved_bytes, true);
  section("Non-releasable memory", stats.inactive_split_bytes, true);
  section("Allocations", stats.allocation, false);
  section("Active allocs", stats.active, false);
  section("GPU reserved segments", stats.segment, false);
  section("Non-releasable allocs", stats.inactive_split, false);
  row("Oversize allocations", stats.oversize_allocations, false);
  row("Oversize GPU segments", stats.oversize_segments, false);
  out << rule;
  return out.str();
}

}  // namespace memsnap
