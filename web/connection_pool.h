// The connections of `memsnap serve`, between cpp-httplib's accept loop and its request
// handling (viewer_server.cpp hands each accepted socket here). A worker thread only ever sees a
// request that has arrived: one poll thread receives each request's line and headers (and a
// small body) within a total deadline counted from its first byte, keeps idle keep-alive
// connections, and finishes sending responses that did not fit in the socket at once. So
// clients that send a byte every few seconds, or never read, hold no worker however many they
// are; the library's per-read timeout alone let 40 of them stall every request.
//
// The only requests a worker reads from the network are those with a body too big to gather
// (an upload) or that ask for `Expect: 100-continue`: at most `max_body_readers` at once (the
// others are answered 503), each within the deadline plus its Content-Length at
// `min_bytes_per_second`. A response is likewise sent within the deadline plus its size at
// that rate, wherever it is sent from.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace httplib {
class Stream;
}

namespace memsnap::web {

struct ConnectionLimits {
  size_t workers = 32;
  // A request's line, headers and gathered body arrive within this of its first byte; it is
  // also the grace a body or a response gets before min_bytes_per_second counts.
  std::chrono::milliseconds request_deadline{10'000};
  // One read or write that makes no progress for this long ends the connection.
  std::chrono::milliseconds io_timeout{10'000};
  std::chrono::milliseconds keep_alive{5'000};  // an idle connection waits this long for a request
  size_t keep_alive_requests = 100;
  uint64_t min_bytes_per_second = 64 << 10;
  size_t max_connections = 512;  // past it, the connection waiting longest for its request is closed
  size_t max_body_readers = 4;
  size_t max_head_bytes = 64 << 10;      // request line and headers (431 past it)
  size_t gathered_body_bytes = 64 << 10;  // bodies up to this arrive before a worker sees them
  uint64_t max_buffered_response_bytes = 64 << 20;  // responses left for the poll thread to send
  size_t send_buffer_bytes = 0;  // each connection's kernel send buffer; 0: the kernel's (autotuned)
};

// What the pool holds at a moment (tests, and a debugger).
struct ConnectionCounts {
  size_t connections = 0;  // open
  size_t polled = 0;       // waiting for a request, or sending a response, on the poll thread
  size_t busy_workers = 0;
  size_t body_readers = 0;
  uint64_t requests_answered = 0;
  uint64_t buffered_response_bytes = 0;
};

class ConnectionPool {
 public:
  // `handle` answers one request read from the stream (httplib::Server::process_request);
  // `large_body_allowed` says whether a request (method, target) may send a body too big to
  // gather: the others are refused with 413 before it is read. `extra_headers` ("Name: value\r\n"
  // lines) go on the refusals this pool writes itself.
  using Handle = std::function<bool(httplib::Stream& stream, bool last_request, bool& connection_closed)>;
  using LargeBodyAllowed = std::function<bool(std::string_view method, std::string_view target)>;
  ConnectionPool(ConnectionLimits limits, Handle handle, LargeBodyAllowed large_body_allowed, std::string extra_headers);
  ~ConnectionPool();
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // Takes an accepted socket (from any thread); the pool closes it.
  void adopt(int fd);
  // Closes every connection once the requests being answered end; joins the threads. Idempotent.
  void stop();
  ConnectionCounts counts() const;

  struct Connection;

 private:
  class RequestStream;
  enum class Next { kMore, kReady, kRefused, kClose };

  void poll_loop();
  void work();
  void serve(std::unique_ptr<Connection> c);
  // Looks at what has arrived on `c`: a whole request (kReady), not yet (kMore), or a refusal
  // queued on `c` (kRefused); kClose when the connection is spent.
  Next advance(Connection& c);
  void refuse(Connection& c, int status, const std::string& message);
  void to_poller(std::unique_ptr<Connection> c);
  void dispatch(std::unique_ptr<Connection> c);
  void close(std::unique_ptr<Connection> c, bool reset = false);
  void wake_poller();

  const ConnectionLimits limits_;
  const Handle handle_;
  const LargeBodyAllowed large_body_allowed_;
  const std::string extra_headers_;
  int wake_fd_ = -1;  // eventfd: the poll thread has mail
  int stop_fd_ = -1;  // eventfd: readable for good once stop() begins

  mutable std::mutex mutex_;
  std::condition_variable ready_changed_;
  std::vector<std::unique_ptr<Connection>> inbox_;   // for the poll thread: new, or back from a worker
  std::deque<std::unique_ptr<Connection>> ready_;    // whole requests, for the workers
  size_t polled_ = 0;  // written by the poll thread, under mutex_
  bool stopping_ = false;

  std::atomic<size_t> connections_{0};
  std::atomic<size_t> busy_workers_{0};
  std::atomic<size_t> body_readers_{0};
  std::atomic<uint64_t> requests_answered_{0};
  std::atomic<uint64_t> buffered_bytes_{0};
  std::atomic<uint64_t> next_serial_{0};

  std::thread poller_;
  std::vector<std::thread> workers_;
  std::once_flag stopped_;
};

}  // namespace memsnap::web
