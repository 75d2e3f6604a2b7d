// The HTTP server behind `memsnap serve`: the embedded UI and the JSON API (api_routes.h)
// on one port, bound to 127.0.0.1 unless told otherwise. On a loopback address it answers
// only requests addressed to a loopback name, so a web page elsewhere cannot reach it by DNS
// rebinding; nothing outside the embedded assets and the loaded snapshots is ever served.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocator/result.h"
#include "web/api_routes.h"
#include "web/connection_pool.h"
#include "web/memory_release.h"
#include "web/snapshot_store.h"

namespace httplib {
class Server;
}

namespace memsnap::web {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  ApiLimits limits;
  size_t threads = 32;  // workers: each answers one request at a time (connection_pool.h)
  int read_timeout_seconds = 10;  // a client that stalls mid-request is dropped after this
  // A request's line and headers (and a body of up to 64 KiB) arrive within this of its first
  // byte, however slowly they trickle, or it is answered 408 and closed; no worker waits for
  // them meanwhile. A bigger body (an upload) and a response get this long plus their size at
  // min_transfer_bytes_per_second.
  int request_deadline_seconds = 10;
  uint64_t min_transfer_bytes_per_second = 64 << 10;
  size_t max_connections = 512;  // past it, the connection waiting longest for its request is closed
  size_t socket_send_buffer_bytes = 0;  // 0: the kernel's, autotuned (up to 4 MiB a connection on Linux)
  std::vector<std::string> allowed_hosts;  // names answered beyond loopback (web/host_check.h)
};

bool is_loopback_host(const std::string& host);

class ViewerServer {
 public:
  // `job` (may be null): the ranks of a job, for the Ranks view; it must outlive the server.
  ViewerServer(SnapshotStore& store, ServerOptions options, JobCatalog* job = nullptr);
  ~ViewerServer();
  ViewerServer(const ViewerServer&) = delete;
  ViewerServer& operator=(const ViewerServer&) = delete;

  // Binds the address; returns the port (useful with port 0).
  Result<int> bind();
  // Serves until stop(); call after bind().
  void run();
  // From any thread (a signal watcher, a test): run() returns soon after, or at once when it
  // is called later.
  void stop();
  bool running() const;
  const ServerOptions& options() const { return options_; }
  ConnectionCounts connection_counts() const { return connections_->counts(); }
  // How often the memory freed since the last time was given back (memory_release.h).
  uint64_t memory_releases() const { return trimmer_->releases(); }

  // Makes `snapshot`'s first views in the background (uploads are warmed the same way).
  void warm_up(const std::shared_ptr<const StoredSnapshot>& snapshot) { warmer_.warm(snapshot); }

  // For a server that listens while the files it was given load: from hold_api() on, API
  // requests wait (the page itself is served) until open_api(); after refuse_api() they are
  // answered 503 with `why`. set_job names the job made meanwhile, before open_api().
  void hold_api();
  void set_job(JobCatalog* job) { job_ = job; }
  void open_api();
  void refuse_api(const std::string& why);
  ViewWarmer& warmer() { return warmer_; }

 private:
  void add_routes();

  SnapshotStore& store_;
  ServerOptions options_;
  std::atomic<JobCatalog*> job_{nullptr};
  enum class ApiGate { kOpen, kHeld, kRefused };
  std::mutex gate_mutex_;
  std::condition_variable gate_changed_;
  ApiGate gate_ = ApiGate::kOpen;
  std::string refusal_;
  ViewWarmer warmer_;
  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<ConnectionPool> connections_;  // calls into server_: destroyed first
  std::unique_ptr<IdleTrimmer> trimmer_;          // watches connections_ and warmer_
  std::atomic<bool> run_active_{false}, stop_requested_{false};
};

}  // namespace memsnap::web
