// A Snapshot as JSON, with frames expanded in place (no tables), for scripts and jq: the
// shape of PyTorch's snapshot dictionary, plus memsnap's extras.
#pragma once

#include <nlohmann/json.hpp>

#include "snapshot/snapshot.h"

namespace memsnap {

nlohmann::json to_json(const Snapshot& snapshot);
// An allocator setting's value (JSON text) as JSON; text that is not JSON (files of older
// versions) stays a string.
nlohmann::json setting_value_json(std::string_view value);

}  // namespace memsnap
