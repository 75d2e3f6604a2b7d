// Each view of a stored snapshot rendered once per distinct set of options and kept in the
// snapshot's response cache: the API routes parse a request into these options and call here,
// and warm_up() renders the views a page opens with right after a snapshot is loaded (on
// ViewWarmer's background thread), so the first request for them usually finds them made.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "viewer/memory_views.h"
#include "viewer/timeline.h"
#include "web/snapshot_store.h"

namespace memsnap::web {

inline constexpr double kDefaultMinShare = 2e-5;  // a node under 1/50,000 of the total is < 0.1 px wide

// nlohmann::json dump that replaces invalid UTF-8 (frame names come from files).
std::string json_body(const nlohmann::json& value);

Body stats_view(const StoredSnapshot& s);
Body stats_text_view(const StoredSnapshot& s);
Body flamegraph_view(const StoredSnapshot& s, const std::string& kind, const ViewOptions& options, double min_share);
Body flamegraph_svg_view(const StoredSnapshot& s, const std::string& kind, const ViewOptions& options, int width);
Body segments_view(const StoredSnapshot& s, std::optional<int64_t> device);
Body timeline_view(const StoredSnapshot& s, const TimelineOptions& options, const FrameFilter& filter);
// Why the snapshot's last out-of-memory error (on `device`, when given) happened: explain-oom's
// analysis, with the replays under candidate settings. ApiError 404 when there is none.
Body oom_view(const StoredSnapshot& s, std::optional<int64_t> device);
// memsnap tune's search of allocator settings, computed once per snapshot and device.
Body tune_view(const StoredSnapshot& s, std::optional<int64_t> device);
// memsnap growth: call sites whose live memory grows from step to step.
Body growth_view(const StoredSnapshot& s, std::optional<int64_t> device);
Body compare_view(const StoredSnapshot& before, const StoredSnapshot& after, const ViewOptions& options,
                  double min_share);

// Renders the views a page opens on (and their gzip), the likeliest first; stops early once
// `stopping` (when given) returns true. ViewWarmer runs it in the background.
void warm_up(const StoredSnapshot& s, const std::function<bool()>& stopping = {});

}  // namespace memsnap::web
