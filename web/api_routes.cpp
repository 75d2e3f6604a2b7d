#include "web/api_routes.h"

#include <atomic>
#include <memory>
#include <new>
#include <thread>

#include <nlohmann/json.hpp>

#include "viewer/memory_views.h"
#include "viewer/svg/svg_text.h"
#include "web/api_error.h"
#include "web/byte_pipe.h"
#include "web/cached_views.h"
#include "web/request_params.h"
#include "web/response_encoding.h"
#include "web/view_json.h"

namespace memsnap::web {
namespace {

using nlohmann::json;
using Stored = std::shared_ptr<const StoredSnapshot>;

// JSON is UTF-8 by definition (RFC 8259); a charset parameter would also stop cpp-httplib
// from compressing it.
constexpr const char* kJson = "application/json";
constexpr size_t kMaxNameLength = 200;

void send(const httplib::Request& request, httplib::Response& response, const Body& body, const char* type) {
  send_body(request, response, *body, type);
}

Stored find_or_404(SnapshotStore& store, const std::string& id) {
  Stored stored = store.find(id);
  if (!stored) throw ApiError(404, "no snapshot with id " + id.substr(0, 24));
  return stored;
}

FrameFilter frame_filter(const RequestParams& params) {
  FrameFilter filter;
  filter.keep_all = params.flag("all_frames");
  return filter;
}

// The `device` parameter, when given, must name a device of every snapshot asked about.
std::optional<int64_t> device_param(const RequestParams& params, std::initializer_list<const StoredSnapshot*> snapshots) {
  const std::optional<int64_t> device = params.device();
  if (!device) return device;
  for (const StoredSnapshot* s : snapshots) {
    const std::string error = missing_device_error(s->loaded.snapshot, *device);
    if (!error.empty()) throw ApiError(404, error);
  }
  return device;
}

ViewOptions view_options(const RequestParams& params, std::initializer_list<const StoredSnapshot*> snapshots) {
  ViewOptions options;
  options.frames = frame_filter(params);
  options.device = device_param(params, snapshots);
  return options;
}

// Keeps only printable ASCII from an uploader's file name, without folders.
std::string clean_name(const std::string& raw) {
  std::string name = raw.substr(raw.find_last_of("/\\") == std::string::npos ? 0 : raw.find_last_of("/\\") + 1);
  std::string out;
  for (char c : name)
    if (c >= 0x20 && c < 0x7f) out += c;
  if (out.size() > kMaxNameLength) out.resize(kMaxNameLength);
  return out.empty() ? std::string("upload") : out;
}

std::string full_message(const SnapshotStore& store) {
  return "already holding " + std::to_string(store.max_snapshots()) + " snapshots (the limit); delete one first";
}

// Wraps a handler: ApiError becomes its status, anything else a 500; both as JSON.
template <typename Handler>
httplib::Server::Handler guarded(Handler handler) {
  return [handler](const httplib::Request& request, httplib::Response& response) {
    try {
      handler(request, response);
    } catch (const ApiError& error) {
      send_json_error(response, error.status(), error.what());
    } catch (const std::exception& error) {
      send_json_error(response, 500, std::string("internal error: ") + error.what());
    }
  };
}

// `whole_slot`: set while an upload is being received whole (see below); `uploading`: the
// uploads being received or parsed.
void upload(SnapshotStore& store, ViewWarmer& warmer, const ApiLimits& limits, std::atomic<bool>& whole_slot,
            std::atomic<size_t>& uploading, const httplib::Request& request, httplib::Response& response,
            const httplib::ContentReader& reader) {
  // Refusals here come before the body is read, so the connection cannot be trusted to be at a
  // request boundary any more: close it.
  auto refuse = [&](int status, const std::string& message) {
    response.set_header("Connection", "close");
    throw ApiError(status, message);
  };
  // A cross-site page can post text/plain without asking first; octet-stream needs a CORS
  // preflight that this server never grants.
  if (request.get_header_value("Content-Type") != "application/octet-stream")
    refuse(415, "upload the snapshot file as the body, with Content-Type: application/octet-stream");
  const std::string length_text = request.get_header_value("Content-Length");
  const auto length = parse_unsigned(length_text, false);
  if (!length) refuse(411, "an upload needs a Content-Length");
  if (*length > limits.max_upload_bytes)
    refuse(413, "upload of " + svg::human_bytes(*length) + " is over the limit of " +
                    svg::human_bytes(limits.max_upload_bytes) + " (memsnap serve --max-upload-mb)");
  if (store.full()) refuse(507, full_message(store));
  // However many clients send at once, at most max_concurrent_uploads parses run (a parse may
  // take a few times its file's size); the next hears so before its body is read.
  struct Place {
    std::atomic<size_t>& taken;
    bool mine = false;
    ~Place() {
      if (mine) --taken;
    }
  } place{uploading};
  for (size_t taken = uploading.load(); !place.mine;) {
    if (taken >= limits.max_concurrent_uploads)
      refuse(503, std::to_string(limits.max_concurrent_uploads) +
                      " uploads are being received or read; send this one when one of them ends");
    place.mine = uploading.compare_exchange_weak(taken, taken + 1);
  }
  // Parsed while it arrives: a parser thread reads the body through a pipe of a few MiB as this
  // thread receives it, so the parse overlaps the transfer and the body is never held whole.
  // But a plain pickle that would be read on several threads (a large one, on a machine with
  // the cores: reads_faster_whole) is received whole first and read on them, as a file given
  // to `memsnap serve` is: on one thread the parse, not the transfer, is what an upload waits
  // for. The first byte decides. One upload at a time is received whole, the others as they
  // arrive: however many clients send at once, the server holds at most one body.
  BytePipe pipe(size_t{8} << 20);
  Result<LoadedSnapshot> parsed = Result<LoadedSnapshot>::failure("");
  struct Parser {
    BytePipe& pipe;
    std::thread thread;
    void finish() {
      pipe.close();
      if (thread.joinable()) thread.join();
    }
    ~Parser() { finish(); }  // also when receiving throws
  } parser{pipe, {}};
  const auto parse_as_it_arrives = [&] {
    parser.thread = std::thread([&] {
      parsed = load_snapshot_streamed([&pipe](uint8_t* out, size_t capacity) { return pipe.read(out, capacity); },
                                      *length);
      pipe.stop_reading();  // the rest of the body, if any, is received and dropped
    });
  };
  std::string whole;
  enum class Receiving { kUndecided, kAsItArrives, kWhole } receiving = Receiving::kUndecided;
  struct Slot {
    std::atomic<bool>& taken;
    bool mine = false;
    bool take() { return mine = !taken.exchange(true); }
    ~Slot() {
      if (mine) taken.store(false);
    }
  } slot{whole_slot};
  // Room for the whole body; without it (memory short) the body is parsed as it arrives.
  const auto room_for_whole = [&] {
    try {
      whole.reserve(*length);
      return true;
    } catch (const std::bad_alloc&) {
      return false;
    }
  };
  uint64_t received = 0;
  bool over = false;
  reader([&](const char* data, size_t size) {
    if (received + size > *length) {
      over = true;
      return false;
    }
    if (size == 0) return true;
    if (receiving == Receiving::kUndecided) {
      if (reads_faster_whole(static_cast<uint8_t>(data[0]), *length, limits.upload_reads) && slot.take() &&
          room_for_whole()) {
        receiving = Receiving::kWhole;
      } else {
        receiving = Receiving::kAsItArrives;
        parse_as_it_arrives();
      }
    }
    received += size;
    if (receiving == Receiving::kWhole)
      whole.append(data, size);
    else
      pipe.write(data, size);
    return true;
  });
  if (receiving == Receiving::kUndecided) parse_as_it_arrives();  // an empty body: the parser says so
  parser.finish();
  if (over || received != *length) refuse(400, "the upload's body does not match its Content-Length");
  if (receiving == Receiving::kWhole) {
    parsed = load_snapshot_from_memory(whole, limits.upload_reads);
    std::string().swap(whole);
  }
  const RequestParams params(request);
  const std::string name = clean_name(params.text("name", 4096).value_or("upload"));
  if (!parsed) throw ApiError(422, name + ": " + parsed.error());
  const Stored added = store.keep(name, received, std::move(parsed).value());
  if (!added) throw ApiError(507, full_message(store));
  warmer.warm(added);
  response.status = 201;
  response.set_content(json_body(snapshot_summary_json(*added)), kJson);
}

void add_view_routes(httplib::Server& server, SnapshotStore& store) {
  const std::string snapshot = R"(/api/snapshots/(\d+))";
  auto route = [&](const std::string& path, auto handler) {
    server.Get(snapshot + path, guarded([&store, handler](const httplib::Request& request, httplib::Response& response) {
      handler(*find_or_404(store, request.matches[1]), request, response);
    }));
  };
  using Request = const httplib::Request&;
  using Response = httplib::Response&;

  route("/stats", [](const StoredSnapshot& s, Request request, Response response) { send(request, response, stats_view(s), kJson); });
  route("/stats.txt", [](const StoredSnapshot& s, Request request, Response response) {
    send(request, response, stats_text_view(s), "text/plain; charset=utf-8");
  });
  route("/flamegraph", [](const StoredSnapshot& s, Request request, Response response) {
    const RequestParams params(request);
    const std::string kind = params.choice("kind", {"memory", "segments"});
    const double min_share = params.real("min_share", 0, 1).value_or(kDefaultMinShare);
    send(request, response, flamegraph_view(s, kind, view_options(params, {&s}), min_share), kJson);
  });
  route("/flamegraph.svg", [](const StoredSnapshot& s, Request request, Response response) {
    const RequestParams params(request);
    const std::string kind = params.choice("kind", {"memory", "segments"});
    const int width = static_cast<int>(params.unsigned_integer("width", 400, 10000).value_or(1200));
    send(request, response, flamegraph_svg_view(s, kind, view_options(params, {&s}), width), "image/svg+xml");
    // The SVG carries its own small script for hover and zoom; nothing else may run or load.
    response.set_header("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'");
  });
  route("/segments", [](const StoredSnapshot& s, Request request, Response response) {
    send(request, response, segments_view(s, device_param(RequestParams(request), {&s})), kJson);
  });
  route(R"(/segments/(\d+)/blocks/(\d+))", [](const StoredSnapshot& s, Request request, Response response) {
    const auto segment = parse_unsigned(request.matches[2], false);
    const auto block = parse_unsigned(request.matches[3], false);
    std::optional<json> found;
    if (segment && block) found = block_json(s.loaded.snapshot, *segment, *block, frame_filter(RequestParams(request)));
    if (!found) throw ApiError(404, "no such segment or block");
    response.set_content(json_body(*found), kJson);
  });
  route(R"(/stacks/(\d+))", [](const StoredSnapshot& s, Request request, Response response) {
    const auto index = parse_unsigned(request.matches[2], false);
    std::optional<json> found;
    if (index && *index < (uint64_t{1} << 62))
      found = stack_json(s.loaded.snapshot, static_cast<int64_t>(*index), frame_filter(RequestParams(request)));
    if (!found) throw ApiError(404, "no such stack");
    response.set_content(json_body(*found), kJson);
  });
  route("/timeline", [](const StoredSnapshot& s, Request request, Response response) {
    const RequestParams params(request);
    TimelineOptions options;
    options.device = device_param(params, {&s});
    options.max_bands = params.unsigned_integer("bands", 1, 2000).value_or(options.max_bands);
    options.max_samples = params.unsigned_integer("samples", 10, 5000).value_or(options.max_samples);
    options.window_begin = params.unsigned_integer("begin", 0, UINT64_MAX).value_or(0);
    options.window_end = params.unsigned_integer("end", 0, UINT64_MAX);
    options.roles = params.flag("roles");
    options.pools = params.flag("pools");
    options.whole_device = params.flag("whole_device");
    if (const auto kind = params.text("kind", 20); kind && *kind != "active") {
      if (*kind != "segments") throw ApiError(400, "query parameter 'kind': active or segments, not '" + kind->substr(0, 20) + "'");
      options.kind = TimelineKind::kSegments;
    }
    if (options.window_end && *options.window_end < options.window_begin)
      throw ApiError(400, "query parameters 'begin' and 'end': end (" + std::to_string(*options.window_end) +
                              ") is before begin (" + std::to_string(options.window_begin) + ")");
    send(request, response, timeline_view(s, options, frame_filter(params)), kJson);
  });
  // The allocator's state right after entry `event` of a device's trace (PyTorch's
  // device_traces[device][event]), rebuilt by replaying the trace.
  route("/state", [](const StoredSnapshot& s, Request request, Response response) {
    const RequestParams params(request);
    const Snapshot& recorded = s.loaded.snapshot;
    const int64_t device = device_param(params, {&s}).value_or(0);
    if (static_cast<size_t>(device) >= recorded.device_traces.size() ||
        recorded.device_traces[static_cast<size_t>(device)].empty())
      throw ApiError(404, "device " + std::to_string(device) + " has no trace (record history at level 'all')");
    const uint64_t entries = recorded.device_traces[static_cast<size_t>(device)].size();
    const auto event = params.unsigned_integer("event", 0, entries - 1);
    if (!event) throw ApiError(400, "query parameter 'event': give an event between 0 and " + std::to_string(entries - 1));
    Result<StateAfterEntry> state = state_after_entry(recorded, device, *event);
    if (!state) throw ApiError(422, state.error());
    response.set_content(json_body(state_json(recorded, state.value())), kJson);
  });
  route("/search", [](const StoredSnapshot& s, Request request, Response response) {
    const RequestParams params(request);
    SearchQuery query;
    query.device = device_param(params, {&s});
    query.text = params.text("q", 200).value_or("");
    if (query.text.empty()) throw ApiError(400, "query parameter 'q': give a frame's text or an address");
    // 0x-hex, or a decimal of at least 4096, reads as an address too (a line number never does).
    const bool hex = query.text.size() > 2 && query.text[0] == '0' && (query.text[1] == 'x' || query.text[1] == 'X');
    if (const auto number = parse_unsigned(query.text, true); number && (hex || *number >= 4096)) query.address = number;
    response.set_content(json_body(search_json(s.loaded.snapshot, query, frame_filter(params))), kJson);
  });
  route("/growth", [](const StoredSnapshot& s, Request request, Response response) {
    send(request, response, growth_view(s, device_param(RequestParams(request), {&s})), kJson);
  });
  route("/tune", [](const StoredSnapshot& s, Request request, Response response) {
    send(request, response, tune_view(s, device_param(RequestParams(request), {&s})), kJson);
  });
  route("/oom", [](const StoredSnapshot& s, Request request, Response response) {
    send(request, response, oom_view(s, device_param(RequestParams(request), {&s})), kJson);
  });
  route("/trace", [](const StoredSnapshot& s, Request request, Response response) {
    const RequestParams params(request);
    TraceQuery query;
    query.device = device_param(params, {&s});
    query.offset = params.unsigned_integer("offset", 0, UINT64_MAX).value_or(0);
    query.limit = params.unsigned_integer("limit", 1, TraceQuery::kMaxLimit).value_or(query.limit);
    query.min_size = params.unsigned_integer("min_size", 0, UINT64_MAX).value_or(0);
    query.address = params.unsigned_integer("address", 0, UINT64_MAX, true);
    query.frame = params.text("frame", 200).value_or("");
    if (const auto actions = params.text("action", 400); actions && !actions->empty()) {
      query.actions.assign(kTraceActionCount, false);
      size_t start = 0;
      while (start <= actions->size()) {
        const size_t comma = std::min(actions->find(',', start), actions->size());
        const std::string name = actions->substr(start, comma - start);
        const auto action = trace_action_from_name(name);
        if (!action) throw ApiError(400, "query parameter 'action': unknown action '" + name.substr(0, 40) + "'");
        query.actions[static_cast<size_t>(*action)] = true;
        start = comma + 1;
      }
    }
    response.set_content(json_body(trace_page_json(s.loaded.snapshot, query, frame_filter(params))), kJson);
  });
}

size_t rank_row(const JobCatalog& job, const std::string& text) {
  if (text.size() > 9 || std::stoull(text) >= job.ranks()) throw ApiError(404, "no rank row " + text.substr(0, 24));
  return std::stoull(text);
}

void add_rank_routes(httplib::Server& server, std::function<JobCatalog*()> job_of) {
  auto require_job = [job_of]() -> JobCatalog& {
    JobCatalog* job = job_of();
    if (!job) throw ApiError(404, "no job here: memsnap serve shows ranks when given a folder, or files that name two ranks or more");
    return *job;
  };
  server.Get("/api/ranks", guarded([require_job](const httplib::Request& request, httplib::Response& response) {
    send(request, response, require_job().table_json(), kJson);
  }));
  server.Get(R"(/api/ranks/(\d+))", guarded([require_job](const httplib::Request& request, httplib::Response& response) {
    JobCatalog& catalog = require_job();
    response.set_content(catalog.rank_json(rank_row(catalog, request.matches[1])), kJson);
  }));
  server.Post(R"(/api/ranks/(\d+)/open)", guarded([require_job](const httplib::Request& request, httplib::Response& response) {
    // A content type a cross-site form cannot send without a preflight this server never grants.
    if (request.get_header_value("Content-Type").rfind("application/json", 0) != 0)
      throw ApiError(415, "opening a rank needs Content-Type: application/json");
    JobCatalog& catalog = require_job();
    auto opened = catalog.open(rank_row(catalog, request.matches[1]));
    if (!opened) throw ApiError(422, opened.error());
    response.set_content(json_body(snapshot_summary_json(*opened.value())), kJson);
  }));
}

}  // namespace

void send_json_error(httplib::Response& response, int status, const std::string& message) {
  response.status = status;
  response.set_content(json_body(json{{"error", message}}) + "\n", kJson);
}

void add_api_routes(httplib::Server& server, SnapshotStore& store, ViewWarmer& warmer, const ApiLimits& limits,
                    std::function<JobCatalog*()> job) {
  server.Get("/api/snapshots", guarded([&store, job](const httplib::Request&, httplib::Response& response) {
    json list = json::array();
    for (const Stored& s : store.list()) list.push_back(snapshot_summary_json(*s));
    json unopened = json::array();
    for (const UnopenedFile& f : store.unopened()) unopened.push_back({{"file", f.file}, {"error", f.error}});
    response.set_content(json_body(json{{"snapshots", std::move(list)},
                                        {"max_snapshots", store.max_snapshots()},
                                        {"not_opened", std::move(unopened)},
                                        {"job", job() != nullptr}}),
                         kJson);
  }));
  auto whole_slot = std::make_shared<std::atomic<bool>>(false);
  auto uploading = std::make_shared<std::atomic<size_t>>(0);
  server.Post("/api/snapshots", [&store, &warmer, limits, whole_slot, uploading](const httplib::Request& request,
                                                                     httplib::Response& response,
                                                                     const httplib::ContentReader& reader) {
    guarded([&](const httplib::Request& r, httplib::Response& out) {
      upload(store, warmer, limits, *whole_slot, *uploading, r, out, reader);
    })(request, response);
  });
  server.Get(R"(/api/snapshots/(\d+))", guarded([&store](const httplib::Request& request, httplib::Response& response) {
    response.set_content(json_body(snapshot_summary_json(*find_or_404(store, request.matches[1]))), kJson);
  }));
  server.Delete(R"(/api/snapshots/(\d+))", guarded([&store](const httplib::Request& request, httplib::Response& response) {
    if (!store.remove(request.matches[1])) throw ApiError(404, "no snapshot with id " + std::string(request.matches[1]).substr(0, 24));
    response.status = 204;
  }));
  add_view_routes(server, store);
  server.Get("/api/compare", guarded([&store](const httplib::Request& request, httplib::Response& response) {
    const RequestParams params(request);
    const auto before_id = params.text("before", 24), after_id = params.text("after", 24);
    if (!before_id || !after_id) throw ApiError(400, "compare needs ?before=ID&after=ID");
    const Stored before = find_or_404(store, *before_id);
    const Stored after = find_or_404(store, *after_id);
    const double min_share = params.real("min_share", 0, 1).value_or(kDefaultMinShare);
    send(request, response, compare_view(*before, *after, view_options(params, {before.get(), after.get()}), min_share), kJson);
  }));
  add_rank_routes(server, std::move(job));
  // Anything else under /api is a JSON 404, not the UI's page.
  auto unknown = guarded([](const httplib::Request& request, httplib::Response&) {
    throw ApiError(404, "no such API route: " + request.path.substr(0, 200));
  });
  server.Get(R"(/api(/.*)?)", unknown);
  server.Post(R"(/api(/.*)?)", unknown);
  server.Delete(R"(/api(/.*)?)", unknown);
}

}  // namespace memsnap::web
