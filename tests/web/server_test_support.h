// A memsnap serve instance on a free loopback port for one test, plus a raw-socket client for
// requests no well-behaved HTTP library would send (traversal paths as-is, lying lengths,
// garbage, stalls).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "web/viewer_server.h"

namespace memsnap::web::testing {

inline std::string data_file(const std::string& name) { return std::string(MEMSNAP_TEST_DATA_DIR) + "/" + name; }

class RunningServer {
 public:
  explicit RunningServer(ServerOptions options = {}, size_t max_snapshots = 8,
                         uint64_t cache_bytes = ResponseCache::kDefaultBudgetBytes)
      : store_(max_snapshots, cache_bytes) {
    options.port = 0;
    options_ = options;
  }
  // Loads files, then starts serving (with a job's ranks when given).
  void start(const std::vector<std::string>& files, JobCatalog* job = nullptr) {
    for (const std::string& file : files) {
      auto added = store_.add_file(file);
      ASSERT_TRUE(added) << added.error();
    }
    server_ = std::make_unique<ViewerServer>(store_, options_, job);
    auto port = server_->bind();
    ASSERT_TRUE(port) << port.error();
    port_ = port.value();
    thread_ = std::thread([this] { server_->run(); });
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!server_->running() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(server_->running()) << "the server did not start listening";
  }
  ~RunningServer() {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  int port() const { return port_; }
  SnapshotStore& store() { return store_; }
  ViewerServer& server() { return *server_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(5);
    c.set_read_timeout(20);
    return c;
  }

  // Sends `request` as given and returns everything the server answers until it closes the
  // connection or `timeout_s` passes. `close_write` ends our side after sending.
  std::string raw(const std::string& request, int timeout_s = 5, bool close_write = false) const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port_));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ::close(fd);
      return "<connect failed>";
    }
    timeval timeout{timeout_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    if (close_write) ::shutdown(fd, SHUT_WR);
    std::string response;
    char buffer[65536];
    // Until the server closes, or one whole response (headers and Content-Length bytes) is in:
    // the server may keep the connection open for another request.
    for (;;) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) break;
      response.append(buffer, static_cast<size_t>(n));
      const size_t end = response.find("\r\n\r\n");
      const size_t length = response.find("Content-Length: ");
      if (end != std::string::npos && length != std::string::npos && length < end &&
          response.size() >= end + 4 + std::strtoull(response.c_str() + length + 16, nullptr, 10))
        break;
    }
    ::close(fd);
    return response;
  }

 private:
  SnapshotStore store_;
  ServerOptions options_;
  std::unique_ptr<ViewerServer> server_;
  std::thread thread_;
  int port_ = 0;
};

// The status code of a raw HTTP response ("HTTP/1.1 404 Not Found" -> 404), 0 when none.
inline int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.c_str() + 9);
}

}  // namespace memsnap::web::testing
