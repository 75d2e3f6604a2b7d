// A snapshot written in one of memsnap's formats and read back, as `memsnap convert` would: for
// checks that a conversion changes no verdict.
#pragma once

#include <string>
#include <string_view>

#include "snapshot/json_writer.h"
#include "snapshot/msgpack_writer.h"
#include "snapshot/pytorch_pickle_writer.h"
#include "snapshot/snapshot_loader.h"

namespace memsnap::testing {

// `format`: "msgpack", "json" or "pickle" (PyTorch's layout).
inline Result<Snapshot> converted(const Snapshot& snapshot, std::string_view format) {
  std::string bytes;
  const ByteSink sink = [&](std::string_view piece) { bytes.append(piece); };
  if (format == "msgpack") bytes = to_msgpack(snapshot);
  if (format == "json") write_json(snapshot, sink);
  if (format == "pickle") write_pytorch_pickle(snapshot, sink);
  Result<LoadedSnapshot> loaded = load_snapshot_from_memory(bytes);
  if (!loaded) return Result<Snapshot>::failure(std::string(format) + ": " + loaded.error());
  return std::move(loaded).value().snapshot;
}

}  // namespace memsnap::testing
