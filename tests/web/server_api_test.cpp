// The JSON API through a real HTTP client: every route's status, content type and shape, and
// that the answers are the analyses the CLI gives.
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "server_test_support.h"
#include "snapshot/snapshot_loader.h"
#include "viewer/fit_estimate.h"
#include "viewer/oom_explanation.h"
#include "viewer/settings_advisor.h"
#include "viewer/snapshot_stats.h"
#include "web/web_assets.h"

namespace memsnap::web::testing {
namespace {

using nlohmann::json;

class ServerApi : public ::testing::Test {
 protected:
  void SetUp() override {
    server.start({data_file("pytorch-2.11/mlp_train.pickle"), data_file("pytorch-2.11/two_streams.pickle")});
  }
  json get_json(const std::string& path, int expected_status = 200) {
    auto client = server.client();
    auto response = client.Get(path);
    EXPECT_TRUE(response) << path;
    if (!response) return {};
    EXPECT_EQ(response->status, expected_status) << path << ": " << response->body;
    EXPECT_EQ(response->get_header_value("Content-Type"), "application/json") << path;
    EXPECT_EQ(response->get_header_value("X-Content-Type-Options"), "nosniff") << path;
    return json::parse(response->body);
  }
  RunningServer server;
};

TEST_F(ServerApi, ListsTheSnapshotsItWasGiven) {
  const json list = get_json("/api/snapshots");
  ASSERT_EQ(list["snapshots"].size(), 2u);
  const json& first = list["snapshots"][0];
  EXPECT_EQ(first["id"], "1");
  EXPECT_EQ(first["name"], "mlp_train.pickle");
  EXPECT_EQ(first["format"], "pickle");
  EXPECT_EQ(first["source"], "pytorch");
  EXPECT_GT(first["events"].get<uint64_t>(), 0u);
  EXPECT_GT(first["size"].get<uint64_t>(), 0u);
  EXPECT_EQ(first["devices"][0]["device"], 0);
  EXPECT_EQ(get_json("/api/snapshots/2")["name"], "two_streams.pickle");
}

TEST_F(ServerApi, StatsAreTheSameObjectAsTheCliPrints) {
  auto loaded = load_snapshot(data_file("pytorch-2.11/mlp_train.pickle"));
  ASSERT_TRUE(loaded);
  const json expected = stats_to_json(compute_stats(loaded->snapshot), loaded->snapshot);
  EXPECT_EQ(get_json("/api/snapshots/1/stats"), expected);
  auto text = server.client().Get("/api/snapshots/1/stats.txt");
  ASSERT_TRUE(text);
  EXPECT_EQ(text->get_header_value("Content-Type"), "text/plain; charset=utf-8");
  EXPECT_EQ(text->body, stats_to_text(compute_stats(loaded->snapshot), loaded->snapshot));
}

TEST_F(ServerApi, FlamegraphNodesAreAPreorderTreeWhoseBytesAddUp) {
  for (const char* kind : {"memory", "segments"}) {
    const json graph = get_json(std::string("/api/snapshots/1/flamegraph?kind=") + kind + "&min_share=0");
    const auto& nodes = graph["nodes"];
    ASSERT_GT(nodes.size(), 3u) << kind;
    EXPECT_EQ(nodes[0][0], -1);
    EXPECT_EQ(nodes[0][3], graph["total_bytes"]);
    std::vector<uint64_t> child_bytes(nodes.size(), 0);
    for (size_t i = 1; i < nodes.size(); ++i) {
      const int64_t parent = nodes[i][0];
      ASSERT_GE(parent, 0);
      ASSERT_LT(static_cast<size_t>(parent), i) << "parents come first in preorder";
      ASSERT_LT(nodes[i][1].get<size_t>(), graph["labels"].size());
      child_bytes[static_cast<size_t>(parent)] += nodes[i][3].get<uint64_t>();
    }
    for (size_t i = 0; i < nodes.size(); ++i)
      EXPECT_LE(child_bytes[i], nodes[i][3].get<uint64_t>()) << kind << " node " << i;
    EXPECT_EQ(graph["dropped_nodes"], 0);
  }
}

TEST_F(ServerApi, SegmentsBlocksAndStacks) {
  const json segments = get_json("/api/snapshots/2/segments");
  ASSERT_FALSE(segments["segments"].empty());
  uint64_t blocks = 0;
  for (const json& s : segments["segments"]) {
    uint64_t covered = 0;
    for (const json& b : s["blocks"]) {
      EXPECT_EQ(b[0].get<uint64_t>(), covered) << "blocks tile their segment in address order";
      covered += b[1].get<uint64_t>();
      ++blocks;
    }
    EXPECT_EQ(covered, s["total_size"].get<uint64_t>());
  }
  EXPECT_EQ(segments["blocks"], blocks);
  // A free block is requested by nobody (PyTorch's pickles keep the last allocation's size).
  size_t free_blocks = 0;
  const json mlp = get_json("/api/snapshots/1/segments");
  for (const json& s : mlp["segments"])
    for (const json& b : s["blocks"])
      if (b[3].get<int>() == 2) {
        ++free_blocks;
        EXPECT_EQ(b[2].get<uint64_t>(), 0u);
      }
  EXPECT_GT(free_blocks, 0u);
  // A block with a stack, in full.
  for (const json& s : segments["segments"]) {
    for (size_t b = 0; b < s["blocks"].size(); ++b) {
      if (s["blocks"][b][4].get<int64_t>() < 0) continue;
      const json block = get_json("/api/snapshots/2/segments/" + s["index"].dump() + "/blocks/" + std::to_string(b));
      EXPECT_FALSE(block["frames"].empty());
      EXPECT_TRUE(block["frames"][0].contains("label"));
      const json stack = get_json("/api/snapshots/2/stacks/" + s["blocks"][b][4].dump());
      EXPECT_EQ(stack["frames"], block["frames"]);
      return;
    }
  }
  FAIL() << "no block with a stack";
}

// Segments can be coloured as the timeline colours its bands: each live block's stack has its
// call site, the label the timeline gives a band of the same stack.
TEST_F(ServerApi, SegmentsNameEachLiveBlocksCallSiteAsTheTimelineDoes) {
  const json segments = get_json("/api/snapshots/1/segments");
  const json timeline = get_json("/api/snapshots/1/timeline?bands=2000");
  std::map<int64_t, std::string> band_labels;
  for (const json& band : timeline["bands"]) band_labels[band["stack"].get<int64_t>()] = band["label"];
  size_t live = 0, compared = 0;
  for (const json& s : segments["segments"])
    for (const json& b : s["blocks"]) {
      if (b[3].get<int>() == 2 || b[4].get<int64_t>() < 0) continue;
      ++live;
      const std::string stack = b[4].dump();
      ASSERT_TRUE(segments["sites"].contains(stack)) << "stack " << stack;
      if (const auto it = band_labels.find(b[4].get<int64_t>()); it != band_labels.end()) {
        EXPECT_EQ(segments["sites"][stack], it->second) << "stack " << stack;
        ++compared;
      }
    }
  EXPECT_GT(live, 0u);
  EXPECT_GT(compared, 0u) << "some live block's stack also has a band";
  EXPECT_EQ(segments["sites"].size(), std::set<std::string>([&] {
              std::set<std::string> stacks;
              for (const json& s : segments["segments"])
                for (const json& b : s["blocks"])
                  if (b[3].get<int>() != 2 && b[4].get<int64_t>() >= 0) stacks.insert(b[4].dump());
              return stacks;
            }()).size()) << "only the stacks of live blocks";
}

TEST_F(ServerApi, TimelineIsDownsampledAndZooms) {
  const json whole = get_json("/api/snapshots/1/timeline?samples=50&bands=5");
  EXPECT_LE(whole["bands"].size(), 5u);
  EXPECT_LE(whole["samples"].size(), 51u + 2 * 5);
  EXPECT_EQ(whole["samples"].size(), whole["total_bytes"].size());
  const uint64_t events = whole["events"];
  ASSERT_GT(events, 20u);
  EXPECT_EQ(whole["window"], json::array({0, events}));
  const json zoomed = get_json("/api/snapshots/1/timeline?samples=50&begin=10&end=20");
  EXPECT_EQ(zoomed["window"], json::array({10, 20}));
  for (const json& s : zoomed["samples"]) {
    EXPECT_GE(s.get<uint64_t>(), 10u);
    EXPECT_LE(s.get<uint64_t>(), 20u);
  }
  // A window past the end is clamped, not an error.
  EXPECT_EQ(get_json("/api/snapshots/1/timeline?begin=999999999")["window"], json::array({events, events}));
}

TEST_F(ServerApi, TimelineOfReservedMemoryBySegment) {
  const json active = get_json("/api/snapshots/2/timeline");
  const json segments = get_json("/api/snapshots/2/timeline?kind=segments");
  EXPECT_EQ(active["kind"], "active");
  EXPECT_EQ(segments["kind"], "segments");
  EXPECT_EQ(segments["events"], active["events"]) << "one event axis for both";
  EXPECT_GE(segments["peak_bytes"].get<uint64_t>(), active["peak_bytes"].get<uint64_t>()) << "reserved covers active";
}

TEST_F(ServerApi, TracePagesAndFilters) {
  const json page = get_json("/api/snapshots/1/trace?offset=5&limit=7");
  EXPECT_EQ(page["events"].size(), 7u);
  EXPECT_EQ(page["events"][0]["index"], 5);
  const uint64_t all = page["matched"];
  const json allocs = get_json("/api/snapshots/1/trace?action=alloc&limit=1000");
  for (const json& e : allocs["events"]) EXPECT_EQ(e["action"], "alloc");
  const json frees = get_json("/api/snapshots/1/trace?action=free_requested,free_completed&limit=1");
  EXPECT_EQ(allocs["matched"].get<uint64_t>() + frees["matched"].get<uint64_t>() +
                get_json("/api/snapshots/1/trace?action=segment_alloc,segment_free,segment_map,segment_unmap,oom,snapshot")["matched"]
                    .get<uint64_t>(),
            all);
  const json big = get_json("/api/snapshots/1/trace?min_size=1048576&limit=1000");
  for (const json& e : big["events"]) EXPECT_GE(e["size"].get<uint64_t>(), 1048576u);
  const json first = page["events"][0];
  const json at = get_json("/api/snapshots/1/trace?address=0x" + [&] {
    char text[32];
    std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(first["address"].get<uint64_t>()));
    return std::string(text);
  }());
  EXPECT_GE(at["matched"].get<uint64_t>(), 1u);
  EXPECT_EQ(get_json("/api/snapshots/1/trace?frame=no_such_function_anywhere")["matched"], 0);
}

TEST_F(ServerApi, CompareAndSvg) {
  const json compare = get_json("/api/compare?before=1&after=2");
  EXPECT_EQ(compare["before"]["id"], "1");
  EXPECT_EQ(compare["after"]["id"], "2");
  EXPECT_TRUE(compare["flamegraph"]["nodes"].is_array());
  EXPECT_TRUE(compare.contains("only_before") && compare.contains("only_after"));
  auto svg = server.client().Get("/api/snapshots/1/flamegraph.svg?kind=segments&width=800");
  ASSERT_TRUE(svg);
  EXPECT_EQ(svg->status, 200);
  EXPECT_EQ(svg->get_header_value("Content-Type"), "image/svg+xml");
  EXPECT_EQ(svg->body.rfind("<?xml", 0) == 0 || svg->body.rfind("<svg", 0) == 0, true);
  EXPECT_NE(svg->get_header_value("Content-Security-Policy").find("default-src 'none'"), std::string::npos);
}

TEST_F(ServerApi, TheUiIsServedWithItsContentTypes) {
  auto client = server.client();
  const std::pair<const char*, const char*> expected[] = {
      {"/", "text/html; charset=utf-8"},
      {"/index.html", "text/html; charset=utf-8"},
      {"/app.css", "text/css; charset=utf-8"},
      {"/js/app.js", "text/javascript; charset=utf-8"},
      {"/favicon.svg", "image/svg+xml"},
  };
  for (const auto& [path, type] : expected) {
    auto response = client.Get(path);
    ASSERT_TRUE(response) << path;
    EXPECT_EQ(response->status, 200) << path;
    EXPECT_EQ(response->get_header_value("Content-Type"), type) << path;
    EXPECT_FALSE(response->body.empty()) << path;
  }
  auto page = client.Get("/");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  EXPECT_NE(page->body.find("/js/app.js"), std::string::npos);
}

// Ctrl-C right after the URL is printed: the stop comes before the server listens, and run()
// must still return.
TEST(ViewerServerStop, AStopBeforeTheServerListensIsNotLost) {
  SnapshotStore store(1);
  ServerOptions options;
  options.port = 0;
  ViewerServer server(store, options);
  ASSERT_TRUE(server.bind());
  server.stop();
  std::atomic<bool> returned{false};
  std::thread runner([&] {
    server.run();
    returned = true;
  });
  for (int i = 0; i < 5000 && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(returned) << "run() kept listening after stop()";
  if (!returned) server.stop();
  runner.join();
}

// The page names every module in a modulepreload link, so the browser fetches them all at once
// rather than one level of imports after another.
TEST_F(ServerApi, ThePagePreloadsEveryModule) {
  const std::string page(find_asset("/")->content);
  size_t modules = 0;
  for (size_t i = 0; i < embedded_asset_count(); ++i) {
    const EmbeddedAsset asset = embedded_asset(i);
    if (!asset.path.starts_with("/js/") || asset.path == "/js/app.js") continue;
    ++modules;
    EXPECT_NE(page.find("<link rel=\"modulepreload\" href=\"" + std::string(asset.path) + "\">"), std::string::npos)
        << asset.path << " is not preloaded by index.html";
  }
  EXPECT_GT(modules, 5u);
}

TEST_F(ServerApi, RefusalsAreJsonWithTheRightStatus) {
  const std::pair<const char*, int> cases[] = {
      {"/api/snapshots/99/stats", 404},
      {"/api/snapshots/99999999999999999999999/stats", 404},
      {"/api/snapshots/1/stacks/99999999", 404},
      {"/api/snapshots/1/segments/9999/blocks/0", 404},
      {"/api/snapshots/1/no_such_view", 404},
      {"/api/compare?before=1", 400},
      {"/api/compare?before=1&after=77", 404},
      {"/api/snapshots/1/trace?limit=abc", 400},
      {"/api/snapshots/1/trace?limit=0", 400},
      {"/api/snapshots/1/trace?limit=100000", 400},
      {"/api/snapshots/1/trace?offset=-1", 400},
      {"/api/snapshots/1/trace?action=explode", 400},
      {"/api/snapshots/1/trace?address=0xZZ", 400},
      {"/api/snapshots/1/trace?min_size=99999999999999999999999999", 400},
      {"/api/snapshots/1/flamegraph?kind=pie", 400},
      {"/api/snapshots/1/flamegraph?min_share=nan", 400},
      {"/api/snapshots/1/flamegraph?min_share=2", 400},
      {"/api/snapshots/1/flamegraph.svg?width=5", 400},
      {"/api/snapshots/1/timeline?bands=0", 400},
      {"/api/snapshots/1/timeline?device=-1", 400},
      {"/api/snapshots/1/segments?device=1e3", 400},
      {"/api/snapshots/1/timeline?begin=500&end=100", 400},
      {"/api/snapshots/1/timeline?kind=pie", 400},
      // A device the snapshot does not have: 404 on every view that takes one.
      {"/api/snapshots/1/trace?device=7", 404},
      {"/api/snapshots/1/flamegraph?device=7", 404},
      {"/api/snapshots/1/flamegraph.svg?device=7", 404},
      {"/api/snapshots/1/segments?device=7", 404},
      {"/api/snapshots/1/timeline?device=7", 404},
      {"/api/snapshots/1/oom?device=7", 404},
      {"/api/compare?before=1&after=2&device=7", 404},
      {"/no/such/page", 404},
  };
  for (const auto& [path, status] : cases) {
    const json body = get_json(path, status);
    EXPECT_TRUE(body.contains("error")) << path;
    EXPECT_FALSE(body["error"].get<std::string>().empty()) << path;
  }
}

TEST_F(ServerApi, AnswersAreGzippedEvenWhenTheBrowserPrefersBrotli) {
  // Browsers list br; the library's brotli at top quality takes seconds on a big timeline.
  const std::string response = server.raw("GET /api/snapshots/1/timeline HTTP/1.1\r\nHost: localhost\r\n"
                                          "Accept-Encoding: gzip, deflate, br\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(response), 200);
  EXPECT_NE(response.find("Content-Encoding: gzip"), std::string::npos) << response.substr(0, 300);
  const std::string only_br = server.raw("GET /api/snapshots/1/timeline HTTP/1.1\r\nHost: localhost\r\n"
                                         "Accept-Encoding: br\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(only_br), 200);
  EXPECT_EQ(only_br.find("Content-Encoding"), std::string::npos) << "no brotli, and plain when gzip is not offered";
}

TEST_F(ServerApi, DeletedSnapshotsAreGone) {
  auto client = server.client();
  auto deleted = client.Delete("/api/snapshots/1");
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 204);
  get_json("/api/snapshots/1/stats", 404);
  EXPECT_EQ(client.Delete("/api/snapshots/1")->status, 404);
  EXPECT_EQ(get_json("/api/snapshots")["snapshots"].size(), 1u);
}

// The OOM view is explain-oom's analysis: the same object the CLI prints with --json, plus the
// devices that hold an error; snapshots without one (or a device without one) are a JSON 404.
TEST(ServerOom, ExplainsTheRecordedOutOfMemoryErrorAsTheCliDoes) {
  RunningServer server;
  const std::string oom_file = data_file("pytorch-2.11-h100/frag_oom.pickle");
  server.start({oom_file, data_file("pytorch-2.11/mlp_train.pickle")});
  auto client = server.client();
  const json list = json::parse(client.Get("/api/snapshots")->body);
  EXPECT_EQ(list["snapshots"][0]["has_oom"], true);
  EXPECT_EQ(list["snapshots"][1]["has_oom"], false);

  auto response = client.Get("/api/snapshots/1/oom");
  ASSERT_TRUE(response);
  ASSERT_EQ(response->status, 200) << response->body;
  json answer = json::parse(response->body);
  EXPECT_EQ(answer["oom_devices"], json::array({0}));
  auto loaded = load_snapshot(oom_file);
  ASSERT_TRUE(loaded);
  auto expected = explain_oom(loaded->snapshot);
  ASSERT_TRUE(expected);
  answer.erase("oom_devices");
  EXPECT_EQ(answer, oom_explanation_to_json(expected.value()));
  EXPECT_EQ(answer["cause"], "fragmentation");
  EXPECT_EQ(client.Get("/api/snapshots/1/oom?device=0")->status, 200);
  // memsnap tune's search, answered by the server.
  const json tune = json::parse(client.Get("/api/snapshots/1/tune")->body);
  EXPECT_TRUE(tune["recorded_oom"].get<bool>());
  EXPECT_TRUE(tune["best"]["ok"].get<bool>());
  EXPECT_GT(tune["ranked"].size(), 40u);  // garbage collection left out: the cap is not recorded
  // One settings verdict on the OOM page, the tune page and the CLI's tune and estimate.
  EXPECT_EQ(answer["settings_conclusion"], tune["conclusion"]);
  EXPECT_EQ(answer["settings_verdict"], tune["judgement"]);
  const auto cli_tune = tune_settings(loaded->snapshot);
  ASSERT_TRUE(cli_tune);
  EXPECT_EQ(tune["conclusion"], settings_advice_to_json(cli_tune.value())["conclusion"]);
  const auto estimate = estimate_fit(loaded->snapshot, FitOptions{});
  ASSERT_TRUE(estimate) << estimate.error();
  ASSERT_TRUE(estimate->failure.has_value());
  EXPECT_EQ(estimate->failure->cause.verdict.sentence, answer["verdict"]["sentence"].get<std::string>());
  ASSERT_TRUE(estimate->advice.has_value());
  EXPECT_EQ(estimate->advice->verdict.sentence, tune["conclusion"].get<std::string>());
  // The timeline marks the error on its axis.
  const json timeline = json::parse(client.Get("/api/snapshots/1/timeline")->body);
  ASSERT_FALSE(timeline["markers"].empty());
  EXPECT_EQ(timeline["markers"].back()["kind"], "oom");

  for (const char* path : {"/api/snapshots/2/oom", "/api/snapshots/1/oom?device=3", "/api/snapshots/9/oom"}) {
    auto refused = client.Get(path);
    ASSERT_TRUE(refused) << path;
    EXPECT_EQ(refused->status, 404) << path;
    EXPECT_TRUE(json::parse(refused->body).contains("error")) << path;
  }
  EXPECT_EQ(client.Get("/api/snapshots/1/oom?device=x")->status, 400);
}

// The allocator's state at an event: PyTorch's device_traces[d][N], the state after it, with
// the figures of that moment; at the last event it is the snapshot's own segments.
TEST_F(ServerApi, StateAtAnEventIsTheStateAfterThatTraceEntry) {
  const json last_segments = get_json("/api/snapshots/1/segments");
  const json stats = get_json("/api/snapshots/1/stats");
  const uint64_t entries = 250;
  const json last = get_json("/api/snapshots/1/state?event=" + std::to_string(entries - 1));
  EXPECT_EQ(last["event"], entries - 1);
  EXPECT_EQ(last["events"], entries);
  EXPECT_TRUE(last["exact"].get<bool>());
  ASSERT_EQ(last["segments"].size(), last_segments["segments"].size());
  for (size_t i = 0; i < last["segments"].size(); ++i) {
    EXPECT_EQ(last["segments"][i]["address"], last_segments["segments"][i]["address"]);
    EXPECT_EQ(last["segments"][i]["blocks"].size(), last_segments["segments"][i]["blocks"].size());
  }
  const json early = get_json("/api/snapshots/1/state?event=10");
  EXPECT_EQ(early["event"], 10);
  EXPECT_LT(early["reserved_bytes"].get<uint64_t>(), last["reserved_bytes"].get<uint64_t>() + 1);
  EXPECT_TRUE(early.contains("allocated_bytes"));
  EXPECT_TRUE(early.contains("action"));
  get_json("/api/snapshots/1/state?event=250", 400);
  get_json("/api/snapshots/1/state?event=-1", 400);
  get_json("/api/snapshots/1/state?event=10&device=3", 404);
}

// Search across views: frame text finds the stacks that have it and counts what they hold and
// did; an address finds its block and the events that touched it.
TEST_F(ServerApi, SearchFindsFramesAndAddresses) {
  const json by_text = get_json("/api/snapshots/1/search?q=FORWARD");
  ASSERT_FALSE(by_text["stacks"].empty()) << "case-insensitive";
  EXPECT_GT(by_text["trace_events"].get<uint64_t>(), 0u);
  for (const json& stack : by_text["stacks"]) {
    const json frames = get_json("/api/snapshots/1/stacks/" + stack.dump())["frames"];
    bool has = false;
    for (const json& f : frames) {
      std::string text = f["function"].get<std::string>() + f["file"].get<std::string>();
      for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      has |= text.find("forward") != std::string::npos;
    }
    EXPECT_TRUE(has) << stack;
  }
  EXPECT_TRUE(get_json("/api/snapshots/1/search?q=no_such_frame_anywhere")["stacks"].empty());
  // An address inside the first block of the first segment.
  const json segments = get_json("/api/snapshots/1/segments");
  const uint64_t inside = segments["segments"][0]["address"].get<uint64_t>() + 10;
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(inside));
  const json by_address = get_json(std::string("/api/snapshots/1/search?q=") + hex);
  ASSERT_FALSE(by_address["block"].is_null());
  EXPECT_EQ(by_address["block"]["segment"], 0);
  EXPECT_EQ(by_address["block"]["block"], 0);
  EXPECT_GT(by_address["address_events"].get<uint64_t>(), 0u);
  get_json("/api/snapshots/1/search", 400);
  get_json("/api/snapshots/1/search?q=forward&device=5", 404);
}

}  // namespace
}  // namespace memsnap::web::testing
