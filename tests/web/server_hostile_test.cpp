// memsnap serve against clients that are not browsers: traversal paths, foreign Host headers,
// lying and oversized uploads, garbage and stalled requests, and many clients at once.
#include <poll.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "server_test_support.h"
#include "snapshot/snapshot_loader.h"
#include "web/memory_release.h"
#include "web/rendered_body.h"

namespace memsnap::web::testing {
namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string get_request(const std::string& target, const std::string& host = "127.0.0.1") {
  return "GET " + target + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
}

TEST(ServerHostile, NoPathReachesTheFileSystem) {
  RunningServer server;
  server.start({data_file("pytorch-2.11/mlp_train.pickle")});
  const char* targets[] = {
      "/../../../../etc/passwd",
      "/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
      "/%252e%252e/%252e%252e/etc/passwd",
      "/..%2f..%2f..%2fetc%2fpasswd",
      "/js/../../../../etc/passwd",
      "/js/..%5c..%5c..%5cetc%5cpasswd",
      "//etc/passwd",
      "/etc/passwd",
      "/index.html%00.js",
      "/api/snapshots/1/../../../../etc/passwd",
      "/api/snapshots/..%2f..%2fetc%2fpasswd/stats",
      "/.%2e/.%2e/etc/passwd",
      "/proc/self/environ",
      "/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd",
  };
  for (const char* target : targets) {
    const std::string response = server.raw(get_request(target));
    const int status = status_of(response);
    EXPECT_TRUE(status == 404 || status == 400) << target << " -> " << response.substr(0, 80);
    EXPECT_EQ(response.find("root:"), std::string::npos) << target;
  }
  // Absurd lengths are refused, not parsed.
  EXPECT_EQ(status_of(server.raw(get_request("/" + std::string(100000, 'a')))) / 100, 4);
  EXPECT_EQ(status_of(server.raw(get_request("/api/snapshots/1/trace?frame=" + std::string(300, 'x')))), 400);
  const std::string huge_header = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(200000, 'h') + "\r\n\r\n";
  EXPECT_NE(status_of(server.raw(huge_header)), 200);
}

TEST(ServerHostile, AnswersOnlyRequestsAddressedToLocalhost) {
  RunningServer server;
  server.start({});
  EXPECT_EQ(status_of(server.raw(get_request("/api/snapshots", "evil.example"))), 421);
  EXPECT_EQ(status_of(server.raw(get_request("/", "evil.example:8080"))), 421);
  EXPECT_EQ(status_of(server.raw(get_request("/", "127.0.0.1.evil.example"))), 421);
  EXPECT_EQ(status_of(server.raw("GET / HTTP/1.1\r\nConnection: close\r\n\r\n")), 421);  // no Host at all
  for (const char* host : {"localhost", "localhost:1234", "127.0.0.1", "127.0.0.1:80", "[::1]:8080"})
    EXPECT_EQ(status_of(server.raw(get_request("/api/snapshots", host))), 200) << host;
}

TEST(ServerHostile, UploadsAreCheckedBeforeTheyAreRead) {
  ServerOptions options;
  options.limits.max_upload_bytes = 64 << 10;
  RunningServer server(options, /*max_snapshots=*/2);
  server.start({});
  auto client = server.client();
  const std::string pickle = file_bytes(data_file("pytorch-2.11/two_streams.pickle"));
  ASSERT_LT(pickle.size(), size_t{64} << 10);

  auto made = client.Post("/api/snapshots?name=..%2F..%2Fsecret%2Ftwo.pickle", pickle, "application/octet-stream");
  ASSERT_TRUE(made);
  EXPECT_EQ(made->status, 201) << made->body;
  EXPECT_NE(made->body.find("\"name\":\"two.pickle\""), std::string::npos) << "folders are dropped from names";

  EXPECT_EQ(client.Post("/api/snapshots", pickle, "text/plain")->status, 415) << "a cross-site form cannot upload";
  auto junk = client.Post("/api/snapshots", std::string(1000, '\x80'), "application/octet-stream");
  EXPECT_EQ(junk->status, 422);
  EXPECT_EQ(junk->body.rfind("{\"error\":\"upload: ", 0), 0u) << junk->body;
  auto truncated = client.Post("/api/snapshots", pickle.substr(0, pickle.size() / 2), "application/octet-stream");
  EXPECT_EQ(truncated->status, 422);

  // Parsed as it arrives: a big body that is not a snapshot from its first byte is still read
  // to the end and refused with its reason, and a gzipped pickle loads like the file.
  {
    ServerOptions big_options;
    big_options.limits.max_upload_bytes = 64 << 20;
    RunningServer big(big_options, 2);
    big.start({});
    auto big_client = big.client();
    auto junk_20mb = big_client.Post("/api/snapshots", std::string(20 << 20, '\x80'), "application/octet-stream");
    ASSERT_TRUE(junk_20mb);
    EXPECT_EQ(junk_20mb->status, 422) << junk_20mb->body;
    const std::string gzipped = file_bytes(data_file("pytorch-2.11-h100/transformer_s0.pickle.gz"));
    auto loaded = big_client.Post("/api/snapshots", gzipped, "application/octet-stream");
    ASSERT_TRUE(loaded);
    EXPECT_EQ(loaded->status, 201) << loaded->body;
    const auto direct = load_snapshot(data_file("pytorch-2.11-h100/transformer_s0.pickle.gz"));
    ASSERT_TRUE(direct.ok());
    EXPECT_NE(loaded->body.find("\"events\":" + std::to_string(direct->snapshot.device_traces.at(0).size())), std::string::npos)
        << loaded->body;
    EXPECT_NE(loaded->body.find("\"compressed\":true"), std::string::npos) << loaded->body;
  }

  // Over the limit: refused from the headers alone, the body never sent.
  const std::string headers = "POST /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
                              "Content-Length: 10000000000\r\n\r\n";
  const std::string refused = server.raw(headers, 5);
  EXPECT_EQ(status_of(refused), 413) << refused;
  EXPECT_NE(refused.find("over the limit"), std::string::npos);
  // The same with Expect: 100-continue, as curl sends for big files.
  const std::string expect = "POST /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
                             "Content-Length: 99999999\r\nExpect: 100-continue\r\n\r\n";
  EXPECT_EQ(status_of(server.raw(expect, 5)), 413);
  // A body shorter than its Content-Length (the client hangs up) is not kept.
  const std::string short_body = "POST /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
                                 "Content-Length: 5000\r\n\r\n" + pickle.substr(0, 100);
  server.raw(short_body, 2, /*close_write=*/true);
  auto lengthless = server.raw("POST /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
                               "Connection: close\r\n\r\n" + pickle, 5, true);
  EXPECT_EQ(status_of(lengthless) / 100, 4) << lengthless.substr(0, 200);

  EXPECT_EQ(client.Post("/api/snapshots", pickle, "application/octet-stream")->status, 201);
  auto full = client.Post("/api/snapshots", pickle, "application/octet-stream");
  EXPECT_EQ(full->status, 507) << "the store holds at most 2";
  EXPECT_EQ(server.store().list().size(), 2u);
}

// A server that reads every plain pickle upload whole, on three threads in parts of 16 KiB
// (with `scanners` layout scans), counting in `stats` what its reads did.
ServerOptions reading_uploads_in_parts(PickleReadStats& stats, unsigned scanners) {
  ServerOptions options;
  options.limits.upload_reads.threads = 3;
  options.limits.upload_reads.min_bytes = 0;
  options.limits.upload_reads.layout = {64, 16 << 10, scanners};
  options.limits.upload_reads.stats = &stats;
  return options;
}

// A plain pickle that would be read on several threads is received whole, then read on them
// (here in parts of 16 KiB): the same snapshot and views as a parse on one thread as it
// arrives, and for damaged ones the same refusal.
TEST(ServerHostile, UploadsReadWholeInPartsGiveWhatAParseAsTheyArriveGives) {
  PickleReadStats stats;
  {
    const ServerOptions whole_options = reading_uploads_in_parts(stats, 2);
    ServerOptions arriving_options;
    arriving_options.limits.upload_reads.threads = 1;
    RunningServer whole(whole_options, 4), arriving(arriving_options, 4);
    whole.start({});
    arriving.start({});
    auto whole_client = whole.client(), arriving_client = arriving.client();
    // The answer to an upload, and the views of what was kept (deleted again).
    const auto upload = [](httplib::Client& client, const std::string& body) {
      auto made = client.Post("/api/snapshots?name=up.pickle", body, "application/octet-stream");
      if (!made) return std::string("no answer");
      std::string seen = std::to_string(made->status) + " " + made->body;
      if (made->status == 201) {
        const std::string id = nlohmann::json::parse(made->body)["id"];
        for (const char* view : {"/stats", "/segments", "/timeline", "/flamegraph"}) {
          auto answer = client.Get("/api/snapshots/" + id + view);
          seen += std::string("\n") + view + ": " + (answer ? answer->body : "no answer");
        }
        client.Delete("/api/snapshots/" + id);
      }
      return seen;
    };
    for (const char* name : {"pytorch-2.11/mlp_train.pickle", "pytorch-2.11/expandable_segments.pickle",
                             "pytorch-2.11-h100/expandable_streams.pickle"}) {
      const std::string pickle = file_bytes(data_file(name));
      const std::string read = upload(whole_client, pickle);
      EXPECT_EQ(read.substr(0, 4), "201 ") << name << ": " << read.substr(0, 300);
      EXPECT_EQ(read, upload(arriving_client, pickle)) << name;
      for (const size_t cut : {size_t{1}, pickle.size() / 3, pickle.size() / 2, pickle.size() - 1}) {
        const std::string damaged = pickle.substr(0, cut);
        EXPECT_EQ(upload(whole_client, damaged), upload(arriving_client, damaged)) << name << " cut at " << cut;
      }
      for (size_t flip = 1; flip < 12; ++flip) {
        std::string damaged = pickle;
        damaged[damaged.size() * flip / 12] ^= static_cast<char>(0x10 << (flip % 4));
        EXPECT_EQ(upload(whole_client, damaged), upload(arriving_client, damaged)) << name << " flip #" << flip;
      }
    }
  }  // (the servers' threads joined: the reads' statistics are settled)
  EXPECT_GT(stats.parts_decoded_alone, 0u) << "the uploads were read in parts";
}

// However many clients send at once, the server holds at most one body: while a client
// stalls in the middle of a body received whole, another upload is parsed as it arrives.
TEST(ServerHostile, OneUploadAtATimeIsHeldWhole) {
  PickleReadStats stats;
  {
    ServerOptions options = reading_uploads_in_parts(stats, 1);
    options.read_timeout_seconds = 2;
    RunningServer server(options, 4);
    server.start({});
    const std::string pickle = file_bytes(data_file("pytorch-2.11-h100/expandable_streams.pickle"));
    const std::string stalled_upload = "POST /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
                                       "Content-Length: " + std::to_string(pickle.size()) + "\r\n\r\n" +
                                       pickle.substr(0, pickle.size() / 2);
    std::thread stalled([&] { server.raw(stalled_upload, 5); });
    std::this_thread::sleep_for(std::chrono::seconds(1));  // its first half received
    auto client = server.client();
    auto meanwhile = client.Post("/api/snapshots", pickle, "application/octet-stream");
    stalled.join();  // dropped by the server's read timeout, never parsed
    ASSERT_TRUE(meanwhile);
    EXPECT_EQ(meanwhile->status, 201) << meanwhile->body;
    EXPECT_EQ(server.store().list().size(), 1u);
  }  // (the server's threads joined: the reads' statistics are settled)
  EXPECT_EQ(stats.parts_decoded_alone, 0u) << "the upload sent meanwhile was read whole, in parts";
}

TEST(ServerHostile, RepeatedUploadsAndDeletesLeaveNothingBehind) {
  RunningServer server(ServerOptions{}, 4);
  server.start({});
  auto client = server.client();
  const std::string pickle = file_bytes(data_file("pytorch-2.11/mlp_train.pickle"));
  for (int round = 0; round < 60; ++round) {
    auto made = client.Post("/api/snapshots", pickle, "application/octet-stream");
    ASSERT_TRUE(made);
    ASSERT_EQ(made->status, 201);
    const std::string id = nlohmann::json::parse(made->body)["id"];
    ASSERT_EQ(client.Get("/api/snapshots/" + id + "/flamegraph")->status, 200);
    ASSERT_EQ(client.Delete("/api/snapshots/" + id)->status, 204);
  }
  EXPECT_TRUE(server.store().list().empty());
}

TEST(ServerHostile, GarbageAndStalledRequestsDoNotStopOthers) {
  ServerOptions options;
  options.read_timeout_seconds = 1;
  options.threads = 4;
  RunningServer server(options);
  server.start({data_file("pytorch-2.11/mlp_train.pickle")});
  EXPECT_EQ(status_of(server.raw("GARBAGE\r\n\r\n", 3)) / 100, 4);
  EXPECT_EQ(status_of(server.raw("GET\r\n\r\n", 3)) / 100, 4);
  server.raw(std::string("\0\xff\xfe\r\n\r\n", 7), 3);
  EXPECT_NE(status_of(server.raw("GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n", 3)), 500);
  EXPECT_EQ(status_of(server.raw("BREW /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 3)) / 100, 4);
  // More stalled clients than worker threads: each is dropped after the read timeout, and a
  // normal request still gets through.
  std::vector<std::thread> stalled;
  for (int i = 0; i < 6; ++i)
    stalled.emplace_back([&] { server.raw("GET /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\n", 4); });
  auto response = server.client().Get("/api/snapshots/1/stats");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  for (auto& t : stalled) t.join();
}

// A loopback connection to `port`, -1 when refused.
int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A client that sends `start`, then one byte every `interval` until the server closes the
// connection or `give_up` passes: how long the server kept it, and what the server said.
struct Trickle {
  double held_s = 0;
  std::string heard;
  bool closed_by_server = false;
};

Trickle trickle(int port, const std::string& start, std::chrono::milliseconds interval, std::chrono::seconds give_up) {
  Trickle result;
  const auto began = std::chrono::steady_clock::now();
  const int fd = connect_to(port);
  if (fd < 0) return result;
  ::send(fd, start.data(), start.size(), MSG_NOSIGNAL);
  while (std::chrono::steady_clock::now() - began < give_up) {
    pollfd readable{fd, POLLIN, 0};
    if (::poll(&readable, 1, static_cast<int>(interval.count())) > 0) {
      char buffer[4096];
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) {
        result.closed_by_server = true;
        break;
      }
      result.heard.append(buffer, static_cast<size_t>(n));
      continue;
    }
    if (::send(fd, "X", 1, MSG_NOSIGNAL) != 1) {
      result.closed_by_server = true;
      break;
    }
  }
  result.held_s = seconds_since(began);
  ::close(fd);
  return result;
}

// Issue 53, item 4: clients that send a request a byte at a time, each byte well within the
// read timeout, hold no worker. With 40 of them and 4 workers, a normal request is answered
// before the request deadline (it waits for none of them), and each of them is answered 408
// and closed about the deadline after its first byte, however it trickles.
TEST(ServerHostile, SlowClientsStallNoRequest) {
  ServerOptions options;
  options.threads = 4;
  options.read_timeout_seconds = 10;  // never reached: the slow clients send every 200 ms
  options.request_deadline_seconds = 3;
  RunningServer server(options);
  server.start({data_file("pytorch-2.11/mlp_train.pickle")});
  const auto deadline = std::chrono::seconds(options.request_deadline_seconds);
  constexpr int kSlow = 40;
  std::vector<Trickle> slow(kSlow);
  std::vector<std::thread> clients;
  for (int i = 0; i < kSlow; ++i)
    clients.emplace_back([&, i] {
      slow[i] = trickle(server.port(), "GET /api/snapshots/1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
                        std::chrono::milliseconds(200), 4 * deadline);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // all of them connected and trickling
  const auto asked = std::chrono::steady_clock::now();
  auto answer = server.client().Get("/api/snapshots/1/stats");
  const double waited = seconds_since(asked);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_LT(waited, static_cast<double>(options.request_deadline_seconds))
      << "the request waited for the slow clients";
  for (auto& t : clients) t.join();
  for (const Trickle& t : slow) {
    EXPECT_TRUE(t.closed_by_server);
    EXPECT_LT(t.held_s, 2.0 * options.request_deadline_seconds) << "a trickling client was kept past the deadline";
    EXPECT_EQ(status_of(t.heard), 408) << t.heard.substr(0, 200);
  }
  EXPECT_EQ(server.server().connection_counts().busy_workers, 0u);
}

// Idle keep-alive connections wait on the poll thread, not in a worker each: 40 of them open
// with 4 workers, and a new client is answered at once.
TEST(ServerHostile, IdleKeepAliveConnectionsHoldNoWorker) {
  ServerOptions options;
  options.threads = 4;
  options.request_deadline_seconds = 2;
  RunningServer server(options);
  server.start({data_file("pytorch-2.11/mlp_train.pickle")});
  std::vector<httplib::Client> idle;
  for (int i = 0; i < 40; ++i) {
    idle.emplace_back("127.0.0.1", server.port());
    idle.back().set_keep_alive(true);
    auto answer = idle.back().Get("/api/snapshots");
    ASSERT_TRUE(answer);
    ASSERT_EQ(answer->status, 200);
  }
  const auto asked = std::chrono::steady_clock::now();
  auto answer = server.client().Get("/api/snapshots/1/stats");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_LT(seconds_since(asked), static_cast<double>(options.request_deadline_seconds));
  // Each is still open and answers its next request on the same connection.
  for (auto& client : idle) {
    auto again = client.Get("/api/snapshots");
    ASSERT_TRUE(again);
    EXPECT_EQ(again->status, 200);
  }
}

// Past max_connections, the connection that has waited longest for its request is closed: a
// client that sends its request at once is never it, so clients that open connections and
// send nothing cannot lock others out.
TEST(ServerHostile, PastTheConnectionLimitTheLongestWaitingIsClosed) {
  ServerOptions options;
  options.max_connections = 8;
  options.request_deadline_seconds = 30;  // none of them is dropped for its deadline here
  RunningServer server(options);
  server.start({data_file("pytorch-2.11/mlp_train.pickle")});
  std::vector<int> silent;
  for (int i = 0; i < 20; ++i) {
    const int fd = connect_to(server.port());
    ASSERT_GE(fd, 0);
    ::send(fd, "GET / HTTP/1.1\r\n", 16, MSG_NOSIGNAL);
    silent.push_back(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // an order of arrival
  }
  for (int i = 0; i < 5; ++i) {
    auto answer = server.client().Get("/api/snapshots/1/stats");
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->status, 200);
  }
  const auto counted_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.server().connection_counts().connections > options.max_connections &&
         std::chrono::steady_clock::now() < counted_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_LE(server.server().connection_counts().connections, options.max_connections);
  // The newest of them are still open, the oldest closed.
  const auto closed = [](int fd) {
    pollfd hung_up{fd, POLLRDHUP, 0};
    return ::poll(&hung_up, 1, 1000) > 0 && (hung_up.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  };
  EXPECT_TRUE(closed(silent.front()));
  EXPECT_FALSE(closed(silent.back()));
  for (const int fd : silent) ::close(fd);
}

// Uploads that trickle: only `max_uploads_receiving` are received at once (the next is refused
// 503 from its headers), normal requests are answered meanwhile, and each is cut off once its
// deadline (the request deadline plus its Content-Length at the minimum rate) passes.
TEST(ServerHostile, TricklingUploadsAreBoundedInNumberAndTime) {
  ServerOptions options;
  options.threads = 4;
  options.request_deadline_seconds = 2;
  options.min_transfer_bytes_per_second = 1 << 20;  // 1 MiB: a deadline of 3 s
  options.limits.max_concurrent_uploads = 2;
  RunningServer server(options);
  server.start({data_file("pytorch-2.11/mlp_train.pickle")});
  const std::string upload = "POST /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream\r\n"
                             "Content-Length: 1048576\r\n\r\n";
  std::vector<Trickle> uploads(2);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < uploads.size(); ++i)
    clients.emplace_back([&, i] {
      uploads[i] = trickle(server.port(), upload, std::chrono::milliseconds(200), std::chrono::seconds(12));
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(server.server().connection_counts().body_readers, 2u);
  const std::string refused = server.raw(upload, 5);
  EXPECT_EQ(status_of(refused), 503) << refused.substr(0, 300);
  EXPECT_NE(refused.find("send this one when one of them ends"), std::string::npos) << refused;
  // A small upload (its body gathered before a worker sees it) is refused too while they are
  // received: at most that many uploads are received or parsed at once.
  const std::string pickle = file_bytes(data_file("pytorch-2.11/two_streams.pickle"));
  auto small = server.client().Post("/api/snapshots", pickle, "application/octet-stream");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 503) << small->body;
  const auto asked = std::chrono::steady_clock::now();
  auto answer = server.client().Get("/api/snapshots/1/stats");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_LT(seconds_since(asked), static_cast<double>(options.request_deadline_seconds));
  for (auto& t : clients) t.join();
  for (const Trickle& t : uploads) {
    EXPECT_TRUE(t.closed_by_server);
    EXPECT_LT(t.held_s, 2 * 3.0) << "an upload was received past its deadline";
    EXPECT_EQ(status_of(t.heard) / 100, 4) << t.heard.substr(0, 200);
  }
  EXPECT_EQ(server.server().connection_counts().body_readers, 0u);
  EXPECT_EQ(server.client().Post("/api/snapshots", pickle, "application/octet-stream")->status, 201)
      << "their places are free again";
  // A request body that is not an upload is never read past 64 KiB.
  const std::string big_get = "GET /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n\r\n";
  EXPECT_EQ(status_of(server.raw(big_get, 5)), 413);
  const std::string chunked = "POST /api/ranks/0/open HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(status_of(server.raw(chunked, 5)), 411);
}

// A client that asks for a big view and never reads it holds no worker either: what the socket
// cannot take is sent from the poll thread, and the connection is closed once the request
// deadline plus the response's size at the minimum rate has passed.
TEST(ServerHostile, ClientsThatDoNotReadHoldNoWorker) {
  ServerOptions options;
  options.threads = 2;
  options.request_deadline_seconds = 2;
  options.min_transfer_bytes_per_second = 1 << 20;
  options.socket_send_buffer_bytes = 64 << 10;  // else the kernel takes each 2.2 MB response whole
  RunningServer server(options);
  server.start({data_file("pytorch-2.11-h100/transformer_s0.pickle.gz")});
  std::vector<int> readers;
  for (int i = 0; i < 8; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server.port()));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    const std::string request = "GET /api/snapshots/1/timeline?roles=1&pools=1&bands=2000&samples=" + std::to_string(4000 + i) +
                                " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    readers.push_back(fd);
  }
  // Their responses made (the workers have answered them) and stuck in the sockets.
  const auto made_by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (server.server().connection_counts().requests_answered < readers.size() && std::chrono::steady_clock::now() < made_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(server.server().connection_counts().requests_answered, readers.size());
  const auto began = std::chrono::steady_clock::now();
  auto answer = server.client().Get("/api/snapshots/1/stats");
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_LT(seconds_since(began), static_cast<double>(options.request_deadline_seconds));
  EXPECT_GT(server.server().connection_counts().buffered_response_bytes, 0u);
  // Never read: each is closed by the deadline (2 s plus about 2 s for its size at 1 MiB/s).
  const auto give_up = began + std::chrono::seconds(20);
  size_t closed = 0;
  while (closed < readers.size() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    closed = 0;
    for (const int fd : readers) {
      pollfd hung_up{fd, POLLRDHUP, 0};
      closed += ::poll(&hung_up, 1, 0) > 0 && (hung_up.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    }
  }
  EXPECT_EQ(closed, readers.size());
  EXPECT_LT(seconds_since(began), 10.0);
  for (const int fd : readers) ::close(fd);
  EXPECT_EQ(server.server().connection_counts().buffered_response_bytes, 0u);
}

// Issue 53, item 9: a refused upload that took much memory to parse (here 2M empty JSON
// objects from 2 KiB of gzip) leaves the memory it freed to be given back once the server is
// quiet, not kept by malloc for good (memory_release.h).
TEST(ServerHostile, MemoryFreedByARefusedUploadIsGivenBack) {
  RunningServer server;
  server.start({});
  std::string objects = "[";
  for (int i = 0; i < 2'000'000; ++i) objects += "{},";
  objects += "{}]";
  const std::string bomb = gzip_compress(objects, 9);
  const uint64_t before = server.server().memory_releases();
  auto refused = server.client().Post("/api/snapshots", bomb, "application/octet-stream");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 422) << refused->body;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.server().memory_releases() == before && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GT(server.server().memory_releases(), before);
}

TEST(IdleTrimmer, ReleasesOnceAfterEachBurstOfWorkWhenQuiet) {
  std::atomic<uint64_t> work{0};
  std::atomic<bool> busy{false};
  std::atomic<int> released{0};
  IdleTrimmer trimmer([&] { return work.load(); }, [&] { return busy.load(); }, std::chrono::milliseconds(100),
                      [&] { ++released; });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(released, 0) << "no work, nothing to give back";
  busy = true;
  ++work;
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(released, 0) << "not while work is in progress";
  busy = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (released == 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(released, 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(released, 1) << "once per burst";
  EXPECT_EQ(trimmer.releases(), 1u);
}

TEST(ServerHostile, ManyConcurrentClients) {
  RunningServer server;
  server.start({data_file("pytorch-2.11/mlp_train.pickle"), data_file("pytorch-2.11/two_streams.pickle")});
  const char* paths[] = {"/api/snapshots", "/api/snapshots/1/stats", "/api/snapshots/2/flamegraph",
                         "/api/snapshots/1/segments", "/api/snapshots/2/timeline", "/api/snapshots/1/trace?limit=50",
                         "/api/compare?before=1&after=2", "/", "/js/app.js"};
  std::atomic<int> ok{0}, bad{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 24; ++c) {
    clients.emplace_back([&, c] {
      auto client = server.client();
      client.set_keep_alive(c % 2 == 0);
      for (int i = 0; i < 40; ++i) {
        auto response = client.Get(paths[(c + i) % std::size(paths)]);
        (response && response->status == 200 ? ok : bad)++;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(ok.load(), 24 * 40);
}

}  // namespace
}  // namespace memsnap::web::testing

namespace memsnap::web::testing {

// A second server on a port one already serves is refused with one clear line, rather than
// both running and splitting the traffic.
TEST(ServerHostile, ASecondServerOnABusyPortIsRefused) {
  RunningServer first;
  first.start({data_file("pytorch-2.11/mlp_train.pickle")});
  SnapshotStore other_store(4);
  ServerOptions options;
  options.port = first.port();
  ViewerServer second(other_store, options);
  const Result<int> bound = second.bind();
  ASSERT_FALSE(bound);
  EXPECT_NE(bound.error().find("127.0.0.1:" + std::to_string(first.port()) + ": the port is in use"),
            std::string::npos)
      << bound.error();
  auto client = first.client();
  for (int i = 0; i < 10; ++i) {
    auto answer = client.Get("/api/snapshots");
    ASSERT_TRUE(answer);
    EXPECT_NE(answer->body.find("mlp_train"), std::string::npos) << "every request reaches the first server";
  }
}

}  // namespace memsnap::web::testing
