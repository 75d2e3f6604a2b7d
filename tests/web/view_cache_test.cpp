// A snapshot's response cache, the gzip kept with each response, and the background warm-up:
// a view is rendered once however many threads ask for it at once, a failed render is not kept,
// and the warm-up leaves the first views (and their gzip) made.
#include <gtest/gtest.h>

#include <zlib.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "server_test_support.h"
#include "web/cached_views.h"
#include "web/rendered_body.h"
#include "web/response_cache.h"
#include "web/view_warmer.h"

namespace memsnap::web {
namespace {

std::string gunzip(const std::string& data) {
  z_stream stream{};
  EXPECT_EQ(inflateInit2(&stream, 15 + 16), Z_OK);
  std::string out;
  char buffer[65536];
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  int status = Z_OK;
  while (status == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    status = inflate(&stream, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - stream.avail_out);
  }
  EXPECT_EQ(status, Z_STREAM_END);
  inflateEnd(&stream);
  return out;
}

TEST(RenderedBody, GzipRoundTripsWhateverTheSize) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
    std::string text(size, '\0');
    for (size_t i = 0; i < size; ++i) text[i] = static_cast<char>("{\"abc\": [1, 2, 3]}"[i % 18] + (i / 4096) % 3);
    const RenderedBody body(text);
    const std::string& gzip = body.gzip();
    ASSERT_GE(gzip.size(), 2u);
    EXPECT_EQ(static_cast<unsigned char>(gzip[0]), 0x1f);
    EXPECT_EQ(static_cast<unsigned char>(gzip[1]), 0x8b);
    EXPECT_EQ(gunzip(gzip), text) << size;
    EXPECT_EQ(&body.gzip(), &gzip) << "made once";
    // What it counts is what it holds: the gzip's buffer is its own size, not the text's.
    EXPECT_LE(gzip.capacity(), gzip.size() + 64) << size;
    EXPECT_EQ(body.bytes(), body.text().capacity() + gzip.capacity());
  }
}

TEST(StoredSnapshotCache, ThreadsAskingAtOnceShareOneRender) {
  StoredSnapshot s;
  std::atomic<int> renders{0};
  std::vector<std::thread> threads;
  std::vector<Body> bodies(8);
  for (size_t t = 0; t < bodies.size(); ++t)
    threads.emplace_back([&, t] {
      bodies[t] = s.cached("view", [&] {
        ++renders;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return std::string("made");
      });
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(renders, 1);
  for (const Body& body : bodies) {
    ASSERT_TRUE(body);
    EXPECT_EQ(body.get(), bodies[0].get());
    EXPECT_EQ(body->text(), "made");
  }
}

TEST(StoredSnapshotCache, AFailedRenderReachesEveryWaiterAndIsNotKept) {
  StoredSnapshot s;
  std::atomic<int> renders{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      try {
        s.cached("broken", [&]() -> std::string {
          ++renders;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          throw std::runtime_error("no such view");
        });
      } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "no such view");
        ++failures;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures, 4);
  EXPECT_GE(renders, 1);
  const int before = renders;
  EXPECT_EQ(s.cached("broken", [] { return std::string("fixed"); })->text(), "fixed") << "the failure was not kept";
  EXPECT_EQ(renders, before);
}

// A text of `size` bytes that says which key it was made for.
std::string text_for(const std::string& key, size_t size) {
  std::string text = key + ":";
  while (text.size() < size) text += static_cast<char>('a' + text.size() * 7 % 26);
  return text.substr(0, size);
}

TEST(ResponseCache, KeepsItsBytesWithinTheBudgetLeastRecentlyUsedFirst) {
  constexpr uint64_t kBudget = 1 << 20;
  ResponseCache cache(kBudget);
  const int owner = 0;
  int renders = 0;
  const auto get = [&](const std::string& key) {
    return cache.get(&owner, key, [&] {
      ++renders;
      return text_for(key, 100 << 10);
    });
  };
  const Body first = get("view0");
  for (int i = 1; i < 40; ++i) {
    EXPECT_EQ(get("view" + std::to_string(i))->text(), text_for("view" + std::to_string(i), 100 << 10));
    EXPECT_LE(cache.bytes(), kBudget) << "after view" << i;
  }
  EXPECT_EQ(renders, 40);
  EXPECT_GE(cache.bytes(), kBudget - (100 << 10) - 2 * ResponseCache::kEntryOverheadBytes) << "the budget is used";
  EXPECT_LT(cache.entries(), 11u);

  // The oldest was dropped and is made again, the same; the newest is kept.
  const Body again = get("view0");
  EXPECT_EQ(renders, 41);
  EXPECT_NE(again.get(), first.get());
  EXPECT_EQ(again->text(), first->text());
  get("view39");
  EXPECT_EQ(renders, 41);

  // Asking for a response makes it the most recently used: it outlives those made after it.
  get("view38");
  for (int i = 40; i < 48; ++i) get("view" + std::to_string(i));
  const int before = renders;
  get("view38");
  EXPECT_EQ(renders, before) << "used recently, so kept";

  // A gzip counts once made, and the total stays within the budget.
  const uint64_t without_gzip = cache.bytes();
  const Body kept = get("view38");
  kept->gzip();
  EXPECT_LE(cache.bytes(), kBudget);
  EXPECT_NE(cache.bytes(), without_gzip) << "the gzip was counted";

  // One response bigger than the whole budget is answered, not kept.
  const Body huge = cache.get(&owner, "huge", [] { return text_for("huge", 2 << 20); });
  EXPECT_EQ(huge->text().size(), size_t{2} << 20);
  EXPECT_LE(cache.bytes(), kBudget);
  int huge_renders = 0;
  cache.get(&owner, "huge", [&] {
    ++huge_renders;
    return text_for("huge", 2 << 20);
  });
  EXPECT_EQ(huge_renders, 1);
}

TEST(ResponseCache, ASnapshotFreedTakesItsResponsesAlong) {
  auto cache = std::make_shared<ResponseCache>(64 << 20);
  auto a = std::make_shared<StoredSnapshot>();
  auto b = std::make_shared<StoredSnapshot>();
  a->response_cache = b->response_cache = cache;
  a->cached("stats", [] { return std::string(1000, 'a'); });
  b->cached("stats", [] { return std::string(1000, 'b'); });
  EXPECT_EQ(cache->entries(), 2u);
  const Body kept = b->cached("stats", [] { return std::string("not kept"); });
  EXPECT_EQ(kept->text(), std::string(1000, 'b'));
  a.reset();
  EXPECT_EQ(cache->entries(), 1u);
  EXPECT_EQ(cache->bytes(), kept->bytes() + std::string("stats").size() + ResponseCache::kEntryOverheadBytes);
}

// Real views of a snapshot through a store with a small budget: the cache never holds more than
// the budget, and a view dropped from it is made again, the same.
TEST(ResponseCache, ViewsPastTheBudgetAreDroppedAndMadeAgainTheSame) {
  constexpr uint64_t kBudget = 1 << 20;  // a few of its timelines (270-370 KB)
  SnapshotStore store(2, kBudget);
  auto added = store.add_file(testing::data_file("pytorch-2.11-h100/transformer_s0.pickle.gz"));
  ASSERT_TRUE(added) << added.error();
  const StoredSnapshot& s = *added.value();
  const auto timeline = [&](size_t samples) {
    TimelineOptions options;
    options.max_samples = samples;
    return timeline_view(s, options, FrameFilter{});
  };
  const Body first = timeline(100);
  first->gzip();
  uint64_t made = first->bytes();
  size_t samples = 100;
  while (made < 4 * kBudget) {
    const Body view = timeline(++samples);
    view->gzip();
    made += view->bytes();
    EXPECT_LE(store.response_cache().bytes(), kBudget) << samples << " samples";
  }
  const Body again = timeline(100);
  EXPECT_NE(again.get(), first.get()) << "dropped, so made again";
  EXPECT_EQ(again->text(), first->text());
  EXPECT_EQ(timeline(samples).get(), timeline(samples).get()) << "the latest is kept";
  EXPECT_LE(store.response_cache().bytes(), kBudget);
}

TEST(ViewWarmer, LeavesTheFirstViewsMade) {
  SnapshotStore store(2);
  auto added = store.add_file(testing::data_file("pytorch-2.11/mlp_train.pickle"));
  ASSERT_TRUE(added) << added.error();
  const auto stored = added.value();
  {
    ViewWarmer warmer;
    warmer.warm(stored);
    warmer.wait_idle();
  }
  int renders = 0;
  const auto count = [&] { ++renders; return std::string("not warmed"); };
  EXPECT_NE(stored->cached("stats", count)->text(), "not warmed");
  EXPECT_NE(stored->cached("stats.txt", count)->text(), "not warmed");
  EXPECT_EQ(renders, 0) << "the warm-up made them";
}

// The queue holds snapshots weakly: one closed while the warm-up is busy with another is freed
// at once, and skipped when its turn comes.
TEST(ViewWarmer, ASnapshotClosedBeforeItsTurnIsFreedAtOnce) {
  SnapshotStore store(4);
  auto busy = store.add_file(testing::data_file("pytorch-2.11-h100/transformer_s0.pickle.gz"));
  auto second = store.add_file(testing::data_file("pytorch-2.11/two_streams.pickle"));
  ASSERT_TRUE(busy && second);
  std::weak_ptr<const StoredSnapshot> closed = second.value();
  ViewWarmer warmer;
  warmer.warm(busy.value());
  warmer.warm(second.value());
  ASSERT_TRUE(store.remove(second.value()->id));
  second = Result<std::shared_ptr<const StoredSnapshot>>::failure("closed");
  EXPECT_TRUE(closed.expired()) << "the warm-up's queue kept a closed snapshot alive";
  warmer.wait_idle();
}

// Through HTTP: a client that accepts gzip gets the kept encoding, one that does not the text.
TEST(ViewCacheHttp, ViewsGoOutInTheirKeptGzip) {
  testing::RunningServer server;
  server.start({testing::data_file("pytorch-2.11/mlp_train.pickle")});
  auto client = server.client();
  client.set_decompress(false);
  auto gzipped = client.Get("/api/snapshots/1/timeline", {{"Accept-Encoding", "gzip, deflate, br"}});
  auto plain = client.Get("/api/snapshots/1/timeline", {{"Accept-Encoding", "identity"}});
  ASSERT_TRUE(gzipped && plain);
  EXPECT_EQ(gzipped->status, 200);
  EXPECT_EQ(gzipped->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(plain->get_header_value("Content-Encoding"), "");
  EXPECT_EQ(gunzip(gzipped->body), plain->body) << "compressed once, not twice";
  EXPECT_EQ(plain->body.front(), '{');
}

// Issue 53, item 9: distinct timeline requests (59 of them took a server from 149 MB to
// 1.08 GB on a 47 MB snapshot) keep the server's cache within its budget, gzip included; a
// view dropped from it is answered again, the same.
TEST(ViewCacheHttp, DistinctViewsKeepTheCacheWithinItsBudget) {
  constexpr uint64_t kBudget = 1 << 20;
  testing::RunningServer server({}, 4, kBudget);
  server.start({testing::data_file("pytorch-2.11-h100/transformer_s0.pickle.gz")});
  server.server().warmer().wait_idle();
  auto client = server.client();
  const auto timeline = [&](int samples) {
    auto answer = client.Get("/api/snapshots/1/timeline?samples=" + std::to_string(samples));
    EXPECT_TRUE(answer && answer->status == 200);
    return answer ? answer->body : std::string();
  };
  const std::string first = timeline(100);
  for (int samples = 101; samples < 160; ++samples) {
    timeline(samples);
    EXPECT_LE(server.store().response_cache().bytes(), kBudget) << samples << " samples";
  }
  EXPECT_LT(server.store().response_cache().entries(), 10u);
  EXPECT_EQ(timeline(100), first) << "dropped, then made again the same";
  EXPECT_LE(server.store().response_cache().bytes(), kBudget);
}

}  // namespace
}  // namespace memsnap::web
