// The JSON API of `memsnap serve` (web/README.md lists every route): snapshots are listed,
// uploaded and deleted; each view of a snapshot is one GET whose answer is cached per
// snapshot, so only the first request for a view pays for its analysis.
#pragma once

#include <cstdint>
#include <functional>

#include <httplib.h>

#include "web/job_catalog.h"
#include "web/snapshot_store.h"
#include "web/view_warmer.h"

namespace memsnap::web {

struct ApiLimits {
  uint64_t max_upload_bytes = uint64_t{512} << 20;
  // Uploads received or parsed at once (each parse may take a few times its file's size); the
  // next is answered 503 from its headers.
  size_t max_concurrent_uploads = 4;
  // The threads an uploaded pickle may be read on (server_pickle_reads() unless a test says).
  PickleReadOptions upload_reads = server_pickle_reads();
};

// `job` says (when asked, so it may be set after the routes) the ranks of a job the server was
// given, under /api/ranks, or null. Uploaded snapshots' first views are made in the background
// by `warmer`.
void add_api_routes(httplib::Server& server, SnapshotStore& store, ViewWarmer& warmer, const ApiLimits& limits,
                    std::function<JobCatalog*()> job);

// {"error": message} with `status`, for every refusal the server makes.
void send_json_error(httplib::Response& response, int status, const std::string& message);

}  // namespace memsnap::web
