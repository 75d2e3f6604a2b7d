#include "web/cached_views.h"

#include <functional>
#include <set>
#include <thread>

#include "viewer/growth.h"
#include "viewer/oom_explanation.h"
#include "viewer/settings_advisor.h"
#include "viewer/snapshot_stats.h"
#include "viewer/svg/flamegraph_svg.h"
#include "viewer/svg/svg_text.h"
#include "web/api_error.h"
#include "web/view_json.h"

namespace memsnap::web {
namespace {

std::string device_key(const std::optional<int64_t>& device) { return device ? std::to_string(*device) : "*"; }

std::string options_key(const ViewOptions& options) {
  return device_key(options.device) + ":" + std::to_string(options.frames.keep_all);
}

FlameTree flame_tree(const Snapshot& snapshot, const std::string& kind, const ViewOptions& options) {
  return kind == "segments" ? segments_flamegraph(snapshot, options) : memory_flamegraph(snapshot, options);
}

// The devices whose trace holds an out-of-memory error, so the page can offer each.
std::vector<int64_t> oom_devices(const Snapshot& snapshot) {
  std::set<int64_t> devices;
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d)
    for (const TraceEntry& e : snapshot.device_traces[d])
      if (e.action == TraceAction::kOom) devices.insert(static_cast<int64_t>(d));
  return {devices.begin(), devices.end()};
}

}  // namespace

std::string json_body(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Body stats_view(const StoredSnapshot& s) {
  return s.cached("stats", [&] {
    return json_body(stats_to_json(compute_stats(s.loaded.snapshot), s.loaded.snapshot));
  });
}

Body stats_text_view(const StoredSnapshot& s) {
  return s.cached("stats.txt", [&] { return stats_to_text(compute_stats(s.loaded.snapshot), s.loaded.snapshot); });
}

Body flamegraph_view(const StoredSnapshot& s, const std::string& kind, const ViewOptions& options, double min_share) {
  return s.cached("flame:" + kind + ":" + options_key(options) + ":" + std::to_string(min_share), [&] {
    return json_body(flamegraph_json(flame_tree(s.loaded.snapshot, kind, options), min_share));
  });
}

Body flamegraph_svg_view(const StoredSnapshot& s, const std::string& kind, const ViewOptions& options, int width) {
  return s.cached("svg:" + kind + ":" + options_key(options) + ":" + std::to_string(width), [&] {
    const FlameTree tree = flame_tree(s.loaded.snapshot, kind, options);
    svg::FlamegraphOptions render;
    render.title = (kind == "segments" ? "Memory by segment: " : "Memory by state and stack: ") + s.name;
    render.subtitle = svg::human_bytes(tree.total_bytes()) + " in " +
                      std::to_string(s.loaded.snapshot.segments.size()) + " segments";
    render.width = width;
    return svg::render_flamegraph(tree, render);
  });
}

Body segments_view(const StoredSnapshot& s, std::optional<int64_t> device) {
  return s.cached("segments:" + device_key(device), [&] { return json_body(segments_json(s.loaded.snapshot, device)); });
}

Body timeline_view(const StoredSnapshot& s, const TimelineOptions& options, const FrameFilter& filter) {
  const std::string key = "timeline:" + std::to_string(static_cast<int>(options.kind)) + ":" +
                          std::to_string(options.roles) + ":" + std::to_string(options.pools) + ":" +
                          std::to_string(options.whole_device) + ":" + device_key(options.device) +
                          ":" + std::to_string(options.max_bands) + ":" +
                          std::to_string(options.max_samples) + ":" + std::to_string(options.window_begin) + ":" +
                          (options.window_end ? std::to_string(*options.window_end) : "*") + ":" +
                          std::to_string(filter.keep_all);
  return s.cached(key, [&] {
    return timeline_json(s.loaded.snapshot, compute_timeline(s.loaded.snapshot, options), filter);
  });
}

Body oom_view(const StoredSnapshot& s, std::optional<int64_t> device) {
  // Not cached when there is nothing to explain: the scan that says so is cheap.
  return s.cached("oom:" + device_key(device), [&] {
    Result<OomExplanation> explanation = explain_oom(s.loaded.snapshot, device);
    if (!explanation) throw ApiError(404, explanation.error());
    nlohmann::json body = oom_explanation_to_json(explanation.value());
    body["oom_devices"] = oom_devices(s.loaded.snapshot);
    return json_body(body);
  });
}

Body tune_view(const StoredSnapshot& s, std::optional<int64_t> device) {
  return s.cached("tune:" + device_key(device), [&] {
    TuneOptions options;
    options.device = device;
    options.threads = std::min(4u, std::max(1u, std::thread::hardware_concurrency()));
    Result<SettingsAdvice> advice = tune_settings(s.loaded.snapshot, options);
    if (!advice) throw ApiError(422, advice.error());
    return json_body(settings_advice_to_json(advice.value()));
  });
}

Body growth_view(const StoredSnapshot& s, std::optional<int64_t> device) {
  return s.cached("growth:" + device_key(device), [&] {
    GrowthOptions options;
    options.device = device;
    Result<Growth> growth = compute_growth(s.loaded.snapshot, options);
    if (!growth) throw ApiError(422, growth.error());
    return json_body(growth_to_json(s.loaded.snapshot, growth.value()));
  });
}

Body compare_view(const StoredSnapshot& before, const StoredSnapshot& after, const ViewOptions& options,
                  double min_share) {
  // Kept with the "after" snapshot; ids are never reused, so a deleted "before" cannot alias.
  return after.cached("compare:" + before.id + ":" + options_key(options) + ":" + std::to_string(min_share), [&] {
    const Comparison comparison = compare_snapshots(before.loaded.snapshot, after.loaded.snapshot, options);
    return json_body(compare_json(before, after, comparison, min_share));
  });
}

void warm_up(const StoredSnapshot& s, const std::function<bool()>& stopping) {
  // The views a page opens on, the likeliest first: a page asking for one of them meanwhile
  // waits for this render instead of making its own. Errors are the request's to report.
  const std::function<Body()> views[] = {
      [&] { return stats_view(s); },
      [&] { return timeline_view(s, TimelineOptions{}, FrameFilter{}); },
      [&] { return flamegraph_view(s, "memory", ViewOptions{}, kDefaultMinShare); },
      [&] { return segments_view(s, std::nullopt); },
      [&] { return flamegraph_view(s, "segments", ViewOptions{}, kDefaultMinShare); },
      [&] { return stats_text_view(s); },
  };
  for (const auto& view : views) {
    if (stopping && stopping()) return;
    try {
      view()->gzip();
    } catch (const std::exception&) {
    }
  }
}

}  // namespace memsnap::web
