// Renders a ReplayResult for people (text) and for programs (one JSON object).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "replay/trace_replay.h"

namespace memsnap {

nlohmann::json replay_to_json(const ReplayResult& result);
std::string replay_to_text(const ReplayResult& result, const std::string& source_name);

}  // namespace memsnap
