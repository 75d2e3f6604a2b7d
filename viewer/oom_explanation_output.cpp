// How an explanation reads: JSON for the web viewer and --json, text for the terminal.
#include "viewer/oom_explanation.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "allocator/counted.h"
#include "allocator/device_stats.h"
#include "viewer/byte_text.h"

namespace memsnap {

namespace {

constexpr size_t kOutsideLibrariesShown = 5;

using text::bytes;

// Where the replays' device memory came from, for people.
std::string capacity_words(const SettingsAdvice& a) {
  // DeviceReplay::capacity_source's phrases.
  std::string out;
  if (a.capacity_source == "memory cap at the recorded OOM")
    out = "the bytes reserved at the error: the lowest the memory cap can have been";
  else if (a.capacity_source == "reserved + device free at the recorded OOM")
    out = "what the process could have had: reserved plus the device's free bytes at the error";
  else if (a.capacity_source == "recorded device")
    out = "the device's memory";
  else if (a.capacity_source == "default")
    out = "a default: the recording says nothing of the device";
  else
    out = a.capacity_source;
  if (a.memory_cap) out += ", under the recorded " + memory_cap_words(*a.memory_cap).substr(2);
  return out;
}

// What replaying the graphs with one pool shows, against the limit at the error.
std::string shared_pool_words(const OomExplanation& x) {
  const SharedGraphPool& shared = *x.shared_graph_pool;
  const uint64_t needed = shared.shared_reserved_bytes + x.segment_bytes;
  std::string out = "Replayed with one pool shared by the " + std::to_string(shared.graphs) +
                    " graphs (torch.cuda.graph(g2, pool=g1.pool())), " + bytes(shared.shared_reserved_bytes) +
                    " is reserved before the request instead of " + bytes(shared.apart_reserved_bytes) +
                    "; with the request's segment that is " + bytes(needed);
  const OomLimit& limit = x.limit;
  if (limit.kind == OomLimit::Kind::kExact && needed <= limit.bytes)
    out += ", within " + limit.words + ": sharing avoids the error.";
  else if (limit.kind == OomLimit::Kind::kRange && needed <= limit.bytes)
    out += ", within the least the memory cap can have been (" + bytes(limit.bytes) + "): sharing avoids the error.";
  else if (limit.kind == OomLimit::Kind::kRange && needed < limit.below)
    out += ": sharing avoids the error if the cap was at least that (the recording says only that it lay between " +
           bytes(limit.bytes) + " and " + bytes(limit.below) + ").";
  else if (limit.kind == OomLimit::Kind::kUnknown)
    out += ": whether that fits, the recording cannot say.";
  else
    out += ", more than " + (limit.kind == OomLimit::Kind::kExact ? limit.words : "the memory cap can have been") +
           ": sharing alone does not avoid the error.";
  return out + " Share a pool only between graphs that replay in the order they were captured and never at once.";
}

// The advice's rows shown: the recorded settings, then the best few others.
constexpr size_t kSettingsShown = 6;
std::vector<const TunedSetting*> shown_settings(const SettingsAdvice& a) {
  std::vector<const TunedSetting*> rows;
  for (const TunedSetting& s : a.ranked)
    if (s.recorded) rows.push_back(&s);
  for (const TunedSetting& s : a.ranked)
    if (!s.recorded && rows.size() < kSettingsShown) rows.push_back(&s);
  return rows;
}

nlohmann::json private_pools_json(const std::vector<std::pair<MempoolId, uint64_t>>& pools) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [pool, free] : pools)
    out.push_back({{"pool", {pool.first, pool.second}}, {"name", pool_display_name(pool)}, {"free_bytes", free}});
  return out;
}

}  // namespace

namespace {

nlohmann::json outside_libraries_json(const OomExplanation& x) {
  if (!x.outside_libraries) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& h : *x.outside_libraries)
    out.push_back({{"library", h.library}, {"bytes", h.bytes}, {"allocations", h.allocations}, {"frames", h.frames}});
  return out;
}

}  // namespace

nlohmann::json oom_explanation_to_json(const OomExplanation& x) {
  nlohmann::json holders = nlohmann::json::array();
  for (const OomHolder& h : x.holders)
    holders.push_back({{"stack", h.stack}, {"bytes", h.bytes}, {"blocks", h.blocks}, {"frames", h.frames}});
  nlohmann::json settings = nlohmann::json::array();
  if (x.advice)
    for (const TunedSetting* row : shown_settings(*x.advice)) {
      const TunedSetting& s = *row;
      settings.push_back({{"config", s.config},
                          {"recorded", s.recorded},
                          {"avoided", s.ok},
                          {"peak_reserved_bytes", s.peak_reserved_bytes},
                          {"segment_allocs", s.device_mallocs}});
    }
  const OomLimit& limit = x.limit;
  return {
      {"device", x.device},
      {"time_us", x.time_us},
      {"requested_bytes", x.requested_bytes},
      {"rounded_bytes", x.rounded_bytes},
      {"segment_bytes", x.segment_bytes},
      {"pool", x.small_pool ? "small" : "large"},
      {"stream", x.stream},
      {"device_free_bytes", x.device_free_bytes ? nlohmann::json(*x.device_free_bytes) : nlohmann::json()},
      {"device_total_bytes", x.device_total_bytes ? nlohmann::json(*x.device_total_bytes) : nlohmann::json()},
      {"outside_allocator_bytes",
       x.outside_allocator_bytes ? nlohmann::json(*x.outside_allocator_bytes) : nlohmann::json()},
      {"outside_libraries", outside_libraries_json(x)},
      {"outside_libraries_bytes", x.outside_libraries ? nlohmann::json(x.outside_libraries_bytes) : nlohmann::json()},
      {"outside_unknown_reason", x.outside_unknown_reason},
      {"request_frames", x.request_frames},
      {"reserved_bytes", x.reserved_bytes},
      {"allocated_bytes", x.allocated_bytes},
      {"allocated_blocks", x.allocated_blocks},
      {"pending_free_bytes", x.pending_free_bytes},
      {"free_bytes", x.free_bytes},
      {"free_blocks", x.free_blocks},
      {"usable_free_bytes", x.usable_free_bytes},
      {"usable_largest_free_bytes", x.usable_largest_free},
      {"other_stream_free_bytes", x.other_stream_free_bytes},
      {"private_pool_free_bytes", x.private_pool_free_bytes},
      {"private_pools_free", private_pools_json(x.private_pools_free)},
      {"other_pool_free_bytes", x.other_pool_free_bytes},
      {"inactive_split_bytes", x.inactive_split_bytes},
      {"blocked_by_split_rules_bytes", x.blocked_by_split_rules},
      {"events_after_oom", x.events_after_oom},
      {"state_rebuilt", x.state_rebuilt},
      {"cause", oom_cause_name(x.diagnosis.cause)},
      {"reasons", x.diagnosis.reasons},
      {"verdict", verdict_to_json(x.diagnosis.verdict)},
      {"holders", holders},
      {"settings", settings},
      {"settings_note", x.advice ? x.advice->note : x.advice_error},
      {"settings_conclusion", x.advice ? x.advice->verdict.sentence : std::string()},
      {"settings_verdict", x.advice ? verdict_to_json(x.advice->verdict) : nlohmann::json()},
      {"replay_capacity_bytes", x.advice ? x.advice->capacity_bytes : 0},
      {"replay_capacity_source", x.advice ? x.advice->capacity_source : std::string()},
      {"limit_bytes", limit.kind == OomLimit::Kind::kExact ? nlohmann::json(limit.bytes) : nlohmann::json()},
      {"limit_words", limit.words},
      {"cap", x.cap ? nlohmann::json{{"bytes", x.cap->bytes}, {"fraction", x.cap->fraction}, {"source", x.cap->source}}
                    : nlohmann::json()},
      {"cap_known", x.cap_known},
      {"cap_at_least_bytes", x.cap_range ? nlohmann::json(x.cap_range->first) : nlohmann::json()},
      {"cap_below_bytes", x.cap_range ? nlohmann::json(x.cap_range->second) : nlohmann::json()},
      {"shared_graph_pool_conclusion", x.shared_graph_pool ? shared_pool_words(x) : std::string()},
      {"shared_graph_pool", x.shared_graph_pool ? nlohmann::json{{"graphs", x.shared_graph_pool->graphs},
                                                                 {"apart_reserved_bytes", x.shared_graph_pool->apart_reserved_bytes},
                                                                 {"shared_reserved_bytes", x.shared_graph_pool->shared_reserved_bytes}}
                                                : nlohmann::json()},
  };
}

std::string oom_explanation_to_text(const OomExplanation& x) {
  std::ostringstream out;
  char when[32];
  std::snprintf(when, sizeof when, "%.6f", static_cast<double>(x.time_us) / 1e6);
  out << "Out of memory on device " << x.device << ", " << when
      << " s into the trace: a request for "
      << bytes(x.requested_bytes) << " (rounded to " << bytes(x.rounded_bytes) << ", "
      << (x.small_pool ? "small" : "large") << " pool, stream " << format_hex(x.stream)
      << ") needed a new " << bytes(x.segment_bytes) << " segment.\n";
  if (!x.request_frames.empty()) {
    out << "  requested at  " << x.request_frames[0] << "\n";
    for (size_t i = 1; i < x.request_frames.size(); ++i) out << "                " << x.request_frames[i] << "\n";
  }
  out << "\nWhy (" << oom_cause_name(x.diagnosis.cause) << "):\n";
  for (const std::string& reason : x.diagnosis.reasons) out << "  - " << reason << "\n";

  out << "\nMemory at the error:\n";
  auto line = [&](const std::string& name, uint64_t value, const std::string& note = "") {
    char text[160];
    std::snprintf(text, sizeof text, "  %-34s %12s", name.c_str(), bytes(value).c_str());
    out << text << (note.empty() ? "" : "  " + note) << "\n";
  };
  if (x.device_total_bytes) line("device total", *x.device_total_bytes);
  if (x.device_free_bytes) line("device free", *x.device_free_bytes);
  if (x.cap) line("memory cap", x.cap->bytes, "set by " + x.cap->source);
  if (x.outside_allocator_bytes)
    line("in use outside the allocator", *x.outside_allocator_bytes, "CUDA context, other libraries, other processes");
  if (x.outside_libraries) {
    line(x.outside_allocator_bytes ? "  of it, other libraries" : "other libraries, outside the allocator",
         x.outside_libraries_bytes, x.outside_libraries->empty() ? "none held any" : "");
    for (size_t i = 0; i < x.outside_libraries->size() && i < kOutsideLibrariesShown; ++i) {
      const auto& h = (*x.outside_libraries)[i];
      line("    " + (h.library.empty() ? std::string("(library not known)") : h.library), h.bytes,
           h.frames.empty() ? counted(h.allocations, "allocation") : h.frames[0]);
    }
  } else if (!x.outside_unknown_reason.empty()) {
    out << "  (other libraries: " << x.outside_unknown_reason << ")\n";
  }
  line("reserved by the allocator", x.reserved_bytes);
  line("  live (allocated)", x.allocated_bytes, counted(x.allocated_blocks, "block"));
  line("  freed, waiting for other streams", x.pending_free_bytes);
  line("  free, cached", x.free_bytes, counted(x.free_blocks, "block"));
  line("    usable here (pool and stream)", x.usable_free_bytes,
       "largest block " + bytes(x.usable_largest_free));
  line("    on other streams", x.other_stream_free_bytes);
  line("    in the other pool", x.other_pool_free_bytes);
  if (x.private_pool_free_bytes > 0) {
    line("    in private pools", x.private_pool_free_bytes, "usable only by their graphs or scope");
    for (const auto& [pool, free] : x.private_pools_free) line("      " + pool_display_name(pool), free);
  }
  line("    inside split segments", x.inactive_split_bytes, "cannot go back to the device");

  if (!x.holders.empty()) {
    out << "\nLargest holders of live memory (by allocation stack):\n";
    for (const OomHolder& h : x.holders) {
      char head[96];
      std::snprintf(head, sizeof head, "  %12s in %4llu %-6s  ", bytes(h.bytes).c_str(),
                    static_cast<unsigned long long>(h.blocks), h.blocks == 1 ? "block" : "blocks");
      out << head << (h.frames.empty() ? "<no stack recorded>" : h.frames[0]) << "\n";
      for (size_t i = 1; i < h.frames.size(); ++i)
        out << std::string(std::char_traits<char>::length(head), ' ') << h.frames[i] << "\n";
    }
  }

  if (x.advice) {
    const SettingsAdvice& a = *x.advice;
    out << "\nWould other settings have avoided it? (memsnap tune: " << counted(a.ranked.size(), "setting")
        << " replayed on a simulated device of "
        << bytes(a.capacity_bytes) << ", " << capacity_words(a) << ")\n";
    const std::vector<const TunedSetting*> rows = shown_settings(a);
    size_t width = 10;
    for (const TunedSetting* s : rows) width = std::max(width, (s->config.empty() ? 8 : s->config.size()) + 14);
    for (const TunedSetting* row : rows) {
      const TunedSetting& s = *row;
      std::string label = s.config.empty() ? "defaults" : s.config;
      if (s.recorded) label += " (recorded)";
      out << "  " << label << std::string(width - std::min(width, label.size()), ' ')
          << (s.ok ? "avoids it" : "out of memory again") << "   peak reserved " << format_bytes(s.peak_reserved_bytes) << "\n";
    }
    out << "  " << a.verdict.sentence << "\n";
    if (!a.note.empty()) out << "\n(" << a.note << ")\n";
  } else if (!x.advice_error.empty()) {
    out << "\n(settings not replayed: " << x.advice_error << ")\n";
  }
  if (x.shared_graph_pool) out << "\n" << shared_pool_words(x) << "\n";
  return out.str();
}

}  // namespace memsnap
