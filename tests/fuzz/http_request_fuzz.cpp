// libFuzzer target for memsnap serve's request handling, whole: cpp-httplib's parsing, the
// Host check, routing, parameter parsing, uploads and every view. One server runs in the
// process for the whole session with a small PyTorch snapshot open; each input is sent as raw
// bytes on a fresh loopback connection. A crash anywhere, or a 500 (an exception escaping a
// handler), is a finding; so is an answer that is not HTTP.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "web/viewer_server.h"

namespace {

struct Fixture {
  memsnap::web::SnapshotStore store{4};
  std::unique_ptr<memsnap::web::ViewerServer> server;
  int port = 0;

  Fixture() {
    if (!store.add_file(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11/two_streams.pickle")) std::abort();
    memsnap::web::ServerOptions options;
    options.port = 0;
    options.read_timeout_seconds = 1;
    options.limits.max_upload_bytes = 1 << 20;
    server = std::make_unique<memsnap::web::ViewerServer>(store, options);
    auto bound = server->bind();
    if (!bound) std::abort();
    port = bound.value();
    std::thread([this] { server->run(); }).detach();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture fixture;
  // Deleting the open snapshot would turn every later input's /api/snapshots/1/... into a 404
  // and starve the views of coverage; DELETE itself is covered by the server tests. Uploads
  // are dropped again after each input for the same reason.
  if (std::string_view(reinterpret_cast<const char*>(data), size).find("DELETE") != std::string_view::npos) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(fixture.port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Thousands of connections a second use up the loopback's ephemeral ports while closed
  // ones wait in TIME_WAIT (more so right after the load tests): each socket closes with a
  // reset instead (SO_LINGER 0, so it leaves no TIME_WAIT), and a connect that finds no free
  // port waits and tries again, as does one a signal interrupted (libFuzzer's timers). A
  // refused connection means the server is gone: a finding.
  int fd = -1;
  for (int attempt = 0;; ++attempt) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    const linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) break;
    const int error = errno;
    ::close(fd);
    if ((error != EADDRNOTAVAIL && error != EINTR) || attempt == 400) {
      std::fprintf(stderr, "http_request_fuzz: cannot connect to the server: %s\n", std::strerror(error));
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  timeval timeout{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::send(fd, data, size, MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);  // the server sees the end of the request bytes
  std::string response;
  char buffer[16384];
  for (;;) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
    if (response.size() > (64u << 20)) break;
  }
  ::close(fd);
  for (const auto& stored : fixture.store.list())
    if (stored->id != "1") fixture.store.remove(stored->id);
  if (response.empty()) return 0;  // nothing that parsed as a request
  if (response.rfind("HTTP/1.1 ", 0) != 0) __builtin_trap();
  // Several requests may be pipelined in one input: check every status line.
  for (size_t at = response.find("HTTP/1.1 "); at != std::string::npos; at = response.find("\r\nHTTP/1.1 ", at + 1)) {
    const size_t status_at = response.compare(at, 2, "\r\n") == 0 ? at + 11 : at + 9;
    if (response.compare(status_at, 3, "500") == 0) __builtin_trap();
  }
  return 0;
}
