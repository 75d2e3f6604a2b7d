// A Snapshot as JSON, with frames expanded in place (no tables), for scripts and jq: the
// shape of PyTorch's snapshot dictionary, plus memsnap's extras.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "snapshot/byte_sink.h"
#include "snapshot/snapshot.h"

namespace memsnap {

// Writes the document's text a piece at a time to `sink` (a 3M-event snapshot's JSON is
// gigabytes: it is never held whole); the pieces together are one line of compact JSON.
void write_json(const Snapshot& snapshot, const ByteSink& sink);
// The whole text at once, for small snapshots and tests.
std::string to_json_text(const Snapshot& snapshot);
// An allocator setting's value (JSON text) as JSON; text that is not JSON (files of older
// versions) stays a string.
nlohmann::json setting_value_json(std::string_view value);

}  // namespace memsnap
