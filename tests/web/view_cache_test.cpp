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

TEST(StoredSnapshotCache, KeepsABoundedNumberOfResponses) {
  StoredSnapshot s;
  int renders = 0;
  for (size_t i = 0; i < StoredSnapshot::kMaxCachedResponses + 10; ++i)
    s.cached("key" + std::to_string(i), [&] { ++renders; return std::string("x"); });
  s.cached("key0", [&] { ++renders; return std::string("x"); });
  EXPECT_EQ(renders, static_cast<int>(StoredSnapshot::kMaxCachedResponses) + 11) << "the oldest was dropped";
  s.cached("key20", [&] { ++renders; return std::string("x"); });
  EXPECT_EQ(renders, static_cast<int>(StoredSnapshot::kMaxCachedResponses) + 11) << "a recent one is kept";
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

}  // namespace
}  // namespace memsnap::web
