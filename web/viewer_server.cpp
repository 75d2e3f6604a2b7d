#include "web/viewer_server.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string_view>
#include <thread>

#include <httplib.h>

#include "web/host_check.h"
#include "web/request_params.h"
#include "web/response_encoding.h"
#include "web/web_assets.h"

namespace memsnap::web {
namespace {

// cpp-httplib's server with its connections kept by a ConnectionPool: the accept loop hands each
// accepted socket to process_and_close_socket through the task queue, which runs it at once, and
// the pool's workers call process_request once a request has arrived.
class PooledServer final : public httplib::Server {
 public:
  void set_pool(ConnectionPool* pool) { pool_ = pool; }
  bool answer(httplib::Stream& stream, bool last, bool& closed) { return process_request(stream, last, closed, nullptr); }
  // The library listens with a backlog of 5: 40 clients that connect at once overflow it, and
  // the kernel resets some of them. A second listen() on the bound socket raises it.
  void raise_backlog(int backlog) { ::listen(svr_sock_, backlog); }

 private:
  bool process_and_close_socket(socket_t sock) override {
    pool_->adopt(sock);
    return true;
  }
  ConnectionPool* pool_ = nullptr;
};

class RunAtOnce final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> task) override { task(); }
  void shutdown() override {}
};

constexpr int kKeepAliveSeconds = 5;
constexpr size_t kKeepAliveRequests = 100;

constexpr const char* kPageSecurityPolicy =
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
    "object-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr address{};
  return ::inet_pton(AF_INET, host.c_str(), &address) == 1 && (ntohl(address.s_addr) >> 24) == 127;
}

ViewerServer::ViewerServer(SnapshotStore& store, ServerOptions options, JobCatalog* job)
    : store_(store), options_(std::move(options)), job_(job) {
  auto server = std::make_unique<PooledServer>();
  PooledServer* pooled = server.get();
  server_ = std::move(server);
  ConnectionLimits limits;
  limits.workers = options_.threads;
  limits.request_deadline = std::chrono::seconds(std::max(options_.request_deadline_seconds, 1));
  limits.io_timeout = std::chrono::seconds(std::max(options_.read_timeout_seconds, 1));
  limits.keep_alive = std::chrono::seconds(kKeepAliveSeconds);
  limits.keep_alive_requests = kKeepAliveRequests;
  limits.min_bytes_per_second = options_.min_transfer_bytes_per_second;
  limits.max_connections = options_.max_connections;
  limits.max_body_readers = options_.limits.max_concurrent_uploads;
  limits.send_buffer_bytes = options_.socket_send_buffer_bytes;
  connections_ = std::make_unique<ConnectionPool>(
      limits, [pooled](httplib::Stream& stream, bool last, bool& closed) { return pooled->answer(stream, last, closed); },
      [](std::string_view method, std::string_view target) {
        return method == "POST" && target.substr(0, target.find('?')) == "/api/snapshots";
      },
      "X-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\nCache-Control: no-store\r\n");
  pooled->set_pool(connections_.get());
  // Once the server is quiet after answering requests (an upload refused, views rendered, a
  // snapshot closed) or warming views, the memory freed meanwhile goes back to the system.
  trimmer_ = std::make_unique<IdleTrimmer>(
      [this] { return connections_->counts().requests_answered + warmer_.snapshots_warmed(); },
      [this] { return connections_->counts().busy_workers > 0 || warmer_.busy(); });
  server_->new_task_queue = [] { return new RunAtOnce; };
  server_->set_read_timeout(options_.read_timeout_seconds, 0);
  server_->set_write_timeout(options_.read_timeout_seconds, 0);
  // SO_REUSEADDR alone: a restarted server can bind while old connections linger, but a second
  // server cannot listen on a port one already serves (httplib's default, SO_REUSEPORT, lets
  // both run and splits the traffic between them).
  server_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // What the Keep-Alive header says: the pool keeps connections so.
  server_->set_keep_alive_max_count(kKeepAliveRequests);
  server_->set_keep_alive_timeout(kKeepAliveSeconds);
  server_->set_payload_max_length(static_cast<size_t>(options_.limits.max_upload_bytes));
  server_->set_tcp_nodelay(true);
  server_->set_default_headers({{"X-Content-Type-Options", "nosniff"},
                                {"Referrer-Policy", "no-referrer"},
                                {"Cache-Control", "no-store"}});
  add_routes();
}

ViewerServer::~ViewerServer() {
  trimmer_.reset();
  connections_->stop();
}

void ViewerServer::add_routes() {
  const HostCheck host_check(options_.host, options_.allowed_hosts);
  server_->set_pre_routing_handler([this, host_check](const httplib::Request& request, httplib::Response& response) {
    prefer_gzip(request);
    if (!host_check.allows(request.get_header_value("Host"))) {
      send_json_error(response, 421, host_check.refusal());
      return httplib::Server::HandlerResponse::Handled;
    }
    if (request.path.rfind("/api/", 0) == 0) {
      std::unique_lock lock(gate_mutex_);
      gate_changed_.wait(lock, [this] { return gate_ != ApiGate::kHeld || stop_requested_; });
      if (gate_ == ApiGate::kRefused || gate_ == ApiGate::kHeld) {
        send_json_error(response, 503, gate_ == ApiGate::kRefused ? refusal_ : "the server is stopping");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // A client that asks first ("Expect: 100-continue", as curl does for big bodies) hears the
  // refusal before it sends a byte of an upload that is too big.
  const uint64_t max_upload = options_.limits.max_upload_bytes;
  server_->set_expect_100_continue_handler([max_upload](const httplib::Request& request, httplib::Response& response) {
    const auto length = parse_unsigned(request.get_header_value("Content-Length"), false);
    if (length && *length > max_upload) {
      send_json_error(response, 413, "upload over the limit of " + std::to_string(max_upload >> 20) +
                                         " MiB (memsnap serve --max-upload-mb)");
      response.set_header("Connection", "close");
      return 413;
    }
    return 100;
  });
  add_api_routes(*server_, store_, warmer_, options_.limits, [this] { return job_.load(); });
  server_->Get(".*", [](const httplib::Request& request, httplib::Response& response) {
    const auto asset = find_asset(request.path);
    if (!asset) {
      send_json_error(response, 404, "not found");
      return;
    }
    response.set_content(std::string(asset->content), std::string(asset->content_type));
    if (asset->path.ends_with(".html")) {
      response.set_header("Content-Security-Policy", kPageSecurityPolicy);
      response.set_header("X-Frame-Options", "DENY");
    }
  });
  // Requests that match no route (other methods, odd paths) and failures outside the handlers.
  server_->set_error_handler([](const httplib::Request&, httplib::Response& response) {
    if (response.body.empty()) {
      const int status = response.status;
      send_json_error(response, status, status == 404 ? "not found" : "request refused (HTTP " + std::to_string(status) + ")");
    }
  });
  server_->set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
    std::string what = "internal error";
    try {
      if (error) std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what += std::string(": ") + e.what();
    } catch (...) {
    }
    send_json_error(response, 500, what);
  });
}

Result<int> ViewerServer::bind() {
  if (options_.port < 0 || options_.port > 65535)
    return Result<int>::failure("port " + std::to_string(options_.port) + " is not between 0 and 65535");
  const int backlog = static_cast<int>(std::min<size_t>(options_.max_connections, SOMAXCONN));
  if (options_.port == 0) {
    const int port = server_->bind_to_any_port(options_.host);
    if (port <= 0) return Result<int>::failure("cannot listen on " + options_.host + " (any port)");
    static_cast<PooledServer&>(*server_).raise_backlog(backlog);
    return port;
  }
  errno = 0;
  if (!server_->bind_to_port(options_.host, options_.port)) {
    const std::string where = options_.host + ":" + std::to_string(options_.port);
    if (errno == EADDRINUSE)
      return Result<int>::failure("cannot listen on " + where +
                                  ": the port is in use (another memsnap serve?); choose another with "
                                  "--port, or --port 0 for a free one");
    return Result<int>::failure("cannot listen on " + where + " (not an address of this machine?)");
  }
  static_cast<PooledServer&>(*server_).raise_backlog(backlog);
  return options_.port;
}

void ViewerServer::run() {
  run_active_ = true;
  if (!stop_requested_) server_->listen_after_bind();
  connections_->stop();  // the requests being answered end first
  run_active_ = false;
}

void ViewerServer::hold_api() {
  std::lock_guard lock(gate_mutex_);
  gate_ = ApiGate::kHeld;
}

void ViewerServer::open_api() {
  {
    std::lock_guard lock(gate_mutex_);
    gate_ = ApiGate::kOpen;
  }
  gate_changed_.notify_all();
}

void ViewerServer::refuse_api(const std::string& why) {
  {
    std::lock_guard lock(gate_mutex_);
    gate_ = ApiGate::kRefused;
    refusal_ = why;
  }
  gate_changed_.notify_all();
}

void ViewerServer::stop() {
  // The library forgets a stop that comes before it listens: a run() that has begun is waited
  // for until it listens, and one that has not will see the request and not listen at all.
  {
    std::lock_guard lock(gate_mutex_);  // held requests see the stop
    stop_requested_ = true;
  }
  gate_changed_.notify_all();
  while (run_active_ && !server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_->stop();
}

bool ViewerServer::running() const { return server_->is_running(); }

}  // namespace memsnap::web
