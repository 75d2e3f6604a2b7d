#include "web/connection_pool.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <httplib.h>

namespace memsnap::web {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr size_t kReceiveChunk = 64 << 10;
// A connection being closed after a refusal or a last response reads (and drops) what the
// client still sends for this long, so that closing does not reset the connection before the
// client has read the answer.
constexpr milliseconds kLinger{1000};

const char* reason_phrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

// The fields of a request's head that decide how its body is framed, read the way cpp-httplib
// reads them: a header line is "Name: value\r\n", the name compared without case and not trimmed.
struct Head {
  std::string_view method, target;
  int content_lengths = 0;
  std::optional<uint64_t> content_length;  // when the one Content-Length is a number
  bool transfer_encoding = false;
  bool expect_continue = false;
};

Head parse_head(std::string_view head) {
  Head parsed;
  const size_t first_end = head.find('\n');
  const std::string_view request_line = head.substr(0, first_end);
  const size_t space = request_line.find(' ');
  parsed.method = request_line.substr(0, space);
  if (space != std::string_view::npos) {
    const std::string_view rest = request_line.substr(space + 1);
    parsed.target = rest.substr(0, rest.find(' '));
  }
  size_t start = first_end == std::string_view::npos ? head.size() : first_end + 1;
  while (start < head.size()) {
    const size_t end = head.find('\n', start);
    if (end == std::string_view::npos) break;
    const std::string_view line = head.substr(start, end + 1 - start);
    start = end + 1;
    if (line.size() < 2 || line[line.size() - 2] != '\r') continue;  // the library skips such lines
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trimmed(line.substr(colon + 1));
    if (equals_ignoring_case(name, "Content-Length")) {
      ++parsed.content_lengths;
      if (!value.empty() && value.size() <= 19 && value.find_first_not_of("0123456789") == std::string_view::npos)
        parsed.content_length = std::stoull(std::string(value));
    } else if (equals_ignoring_case(name, "Transfer-Encoding")) {
      parsed.transfer_encoding = true;
    } else if (equals_ignoring_case(name, "Expect")) {
      parsed.expect_continue |= equals_ignoring_case(value, "100-continue");
    }
  }
  return parsed;
}

Clock::duration at_rate(uint64_t bytes, uint64_t bytes_per_second) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(
      static_cast<double>(bytes) / static_cast<double>(std::max<uint64_t>(bytes_per_second, 1))));
}

// Whether the kernel holds bytes written to `fd` that the client has not acknowledged.
bool unsent(int fd) {
  int bytes = 0;
  return ::ioctl(fd, TIOCOUTQ, &bytes) == 0 && bytes > 0;
}

void address_of(int fd, bool remote, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  const int got = remote ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                         : ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  if (got != 0) return;
  char host[NI_MAXHOST];
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof host, nullptr, 0, NI_NUMERICHOST) == 0)
    ip = host;
  if (address.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  if (address.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
}

}  // namespace

struct ConnectionPool::Connection {
  int fd = -1;
  std::string in;  // received and not yet read by a request, from `pos` on
  size_t pos = 0;
  bool eof = false;  // the client has sent its last byte

  // On the poll thread: waiting for a request (kIdle) or the rest of one (kRequest), sending
  // (kFlush), or closing (kLinger).
  enum class Phase { kIdle, kRequest, kFlush, kLinger } phase = Phase::kIdle;
  Clock::time_point deadline;  // of the phase
  Clock::time_point since;     // when it last came to the poll thread

  // The request being received: how far its head has been scanned, and what it says.
  size_t scanned = 0, line_start = 0, lines = 0;
  size_t head_bytes = 0;  // once the head is whole
  uint64_t body_bytes = 0;
  bool body_from_worker = false;  // holds one of the body readers' places
  Clock::time_point first_byte;

  // The request a worker answers.
  uint64_t read_total = 0;   // bytes read by requests since the connection opened
  uint64_t request_end = 0;  // read_total once the request's head and body are read
  Clock::time_point read_deadline;
  size_t served = 0;
  bool close_after = false;  // once what is in `out` is sent

  // The response being written, and what of it waits in `out` for the poll thread.
  std::string out;
  size_t out_pos = 0;
  uint64_t out_counted = 0;  // bytes of `out` counted in buffered_bytes_
  bool writing = false;
  Clock::time_point write_start;
  uint64_t written = 0;

  size_t unread() const { return in.size() - pos; }
  void next_request(Clock::time_point now, milliseconds keep_alive) {
    phase = Phase::kIdle;
    deadline = now + keep_alive;
    scanned = line_start = lines = head_bytes = 0;
    body_bytes = 0;
    writing = false;
  }
};

// One request's view of its connection for cpp-httplib: what was gathered is read first, the
// rest waited for no longer than the request's deadline; a write the socket cannot take at once
// is left to the poll thread while there is room.
class ConnectionPool::RequestStream final : public httplib::Stream {
 public:
  RequestStream(ConnectionPool& pool, Connection& c) : pool_(pool), c_(c) {}

  bool is_readable() const override { return c_.unread() > 0 || wait(POLLIN, c_.read_deadline); }
  bool is_writable() const override { return wait(POLLOUT, write_deadline()); }

  ssize_t read(char* ptr, size_t size) override {
    c_.writing = false;  // a response's time counts from its first write after the last read
    while (c_.unread() == 0) {
      if (c_.eof) return 0;
      c_.in.clear();
      c_.pos = 0;
      if (!wait(POLLIN, c_.read_deadline)) return -1;
      c_.in.resize(kReceiveChunk);
      const ssize_t n = ::recv(c_.fd, c_.in.data(), kReceiveChunk, MSG_DONTWAIT);
      c_.in.resize(n > 0 ? static_cast<size_t>(n) : 0);
      if (n == 0) c_.eof = true;
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
    const size_t n = std::min(size, c_.unread());
    std::memcpy(ptr, c_.in.data() + c_.pos, n);
    c_.pos += n;
    c_.read_total += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!c_.writing) {
      c_.writing = true;
      c_.write_start = Clock::now();
      c_.written = 0;
    }
    if (c_.out_pos < c_.out.size()) {  // earlier bytes wait: these go after them
      if (buffer(ptr, size)) return static_cast<ssize_t>(size);
      if (!flush()) return -1;
    }
    size_t sent = 0;
    while (sent < size) {
      const ssize_t n = ::send(c_.fd, ptr + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        c_.written += static_cast<uint64_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (buffer(ptr + sent, size - sent)) return static_cast<ssize_t>(size);
        if (!wait(POLLOUT, write_deadline())) return -1;
      } else {
        return -1;
      }
    }
    return static_cast<ssize_t>(size);
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address_of(c_.fd, true, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address_of(c_.fd, false, ip, port); }
  int socket() const override { return c_.fd; }

 private:
  Clock::time_point write_deadline() const {
    return c_.write_start + pool_.limits_.request_deadline + at_rate(c_.written, pool_.limits_.min_bytes_per_second);
  }

  // Until `deadline`, and never longer than the I/O timeout; false when it passes or the pool stops.
  bool wait(short events, Clock::time_point deadline) const {
    for (;;) {
      const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd fds[2] = {{c_.fd, events, 0}, {pool_.stop_fd_, POLLIN, 0}};
      const int ready = ::poll(fds, 2, static_cast<int>(std::min(left, pool_.limits_.io_timeout).count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0 || fds[1].revents != 0) return false;
      return true;
    }
  }

  // Keeps bytes for the poll thread to send, while the pool's room for them lasts.
  bool buffer(const char* ptr, size_t size) {
    uint64_t held = pool_.buffered_bytes_.load();
    do {
      if (held + size > pool_.limits_.max_buffered_response_bytes) return false;
    } while (!pool_.buffered_bytes_.compare_exchange_weak(held, held + size));
    c_.out.append(ptr, size);
    c_.out_counted += size;
    c_.written += size;
    return true;
  }

  // Sends what waits in `out` from this thread.
  bool flush() {
    while (c_.out_pos < c_.out.size()) {
      const ssize_t n = ::send(c_.fd, c_.out.data() + c_.out_pos, c_.out.size() - c_.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c_.out_pos += static_cast<size_t>(n);
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (!wait(POLLOUT, write_deadline())) return false;
      } else {
        return false;
      }
    }
    pool_.buffered_bytes_ -= c_.out_counted;
    c_.out_counted = 0;
    c_.out.clear();
    c_.out_pos = 0;
    return true;
  }

  ConnectionPool& pool_;
  Connection& c_;
};

ConnectionPool::ConnectionPool(ConnectionLimits limits, Handle handle, LargeBodyAllowed large_body_allowed,
                               std::string extra_headers)
    : limits_(limits),
      handle_(std::move(handle)),
      large_body_allowed_(std::move(large_body_allowed)),
      extra_headers_(std::move(extra_headers)) {
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0 || stop_fd_ < 0) throw std::runtime_error("memsnap serve: cannot make an eventfd");
  poller_ = std::thread([this] { poll_loop(); });
  for (size_t i = 0; i < std::max<size_t>(limits_.workers, 1); ++i) workers_.emplace_back([this] { work(); });
}

ConnectionPool::~ConnectionPool() {
  stop();
  ::close(wake_fd_);
  ::close(stop_fd_);
}

void ConnectionPool::adopt(int fd) {
  if (limits_.send_buffer_bytes > 0) {
    const int bytes = static_cast<int>(std::min<size_t>(limits_.send_buffer_bytes, INT32_MAX));
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  }
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  const auto now = Clock::now();
  c->next_request(now, limits_.keep_alive);
  ++connections_;
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      c->since = now;
      inbox_.push_back(std::move(c));
    }
  }
  if (c) close(std::move(c));
  wake_poller();
}

void ConnectionPool::stop() {
  std::call_once(stopped_, [this] {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t ignored = ::write(stop_fd_, &one, sizeof one);
    wake_poller();
    ready_changed_.notify_all();
    if (poller_.joinable()) poller_.join();
    for (std::thread& worker : workers_) worker.join();
    std::lock_guard lock(mutex_);
    for (auto& c : inbox_) close(std::move(c));
    for (auto& c : ready_) close(std::move(c));
    inbox_.clear();
    ready_.clear();
  });
}

ConnectionCounts ConnectionPool::counts() const {
  ConnectionCounts counts;
  counts.connections = connections_.load();
  counts.busy_workers = busy_workers_.load();
  counts.body_readers = body_readers_.load();
  counts.requests_answered = requests_answered_.load();
  counts.buffered_response_bytes = buffered_bytes_.load();
  std::lock_guard lock(mutex_);
  counts.polled = polled_;
  return counts;
}

void ConnectionPool::wake_poller() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
}

void ConnectionPool::close(std::unique_ptr<Connection> c, bool reset) {
  if (!c) return;
  // Reset: what the client has not read is dropped at once, rather than kept by the kernel for
  // a client that may never read it.
  if (reset) {
    const linger abort{1, 0};
    ::setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  }
  ::close(c->fd);
  buffered_bytes_ -= c->out_counted;
  if (c->body_from_worker) --body_readers_;
  --connections_;
}

void ConnectionPool::refuse(Connection& c, int status, const std::string& message) {
  const std::string body = "{\"error\":" + json_string(message) + "}\n";
  c.out.append("HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
               "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\nConnection: close\r\n" + (status == 503 ? "Retry-After: 5\r\n" : "") + extra_headers_ + "\r\n" +
               body);
  c.close_after = true;
  c.phase = Connection::Phase::kFlush;
  c.write_start = Clock::now();
  c.written = c.out.size();
  c.deadline = c.write_start + limits_.request_deadline;
}

ConnectionPool::Next ConnectionPool::advance(Connection& c) {
  using Phase = Connection::Phase;
  if (c.unread() == 0) return c.eof ? Next::kClose : Next::kMore;
  const auto now = Clock::now();
  if (c.phase == Phase::kIdle) {
    c.phase = Phase::kRequest;
    c.first_byte = now;
    c.deadline = now + limits_.request_deadline;
  }
  const std::string_view data(c.in.data() + c.pos, c.unread());
  const auto ready = [&](uint64_t bytes, Clock::time_point read_deadline) {
    c.request_end = c.read_total + bytes;
    c.read_deadline = read_deadline;
    return Next::kReady;
  };
  if (c.head_bytes == 0) {
    // The head ends with the first empty line ("\r\n") after the request line.
    for (size_t i = c.scanned; i < data.size(); ++i) {
      if (data[i] != '\n') continue;
      if (c.lines > 0 && i == c.line_start + 1 && data[c.line_start] == '\r') {
        c.head_bytes = i + 1;
        break;
      }
      ++c.lines;
      c.line_start = i + 1;
    }
    c.scanned = c.head_bytes != 0 ? c.head_bytes : data.size();
    if (c.head_bytes > limits_.max_head_bytes || (c.head_bytes == 0 && data.size() > limits_.max_head_bytes)) {
      refuse(c, 431, "the request line and headers are over " + std::to_string(limits_.max_head_bytes >> 10) + " KiB");
      return Next::kRefused;
    }
    if (c.head_bytes == 0) {
      // A client that has sent its last byte has its partial request answered by the library.
      return c.eof ? ready(data.size(), now) : Next::kMore;
    }
    const Head head = parse_head(data.substr(0, c.head_bytes));
    if (head.transfer_encoding) {
      refuse(c, 411, "send a request's body with a Content-Length (no Transfer-Encoding)");
      return Next::kRefused;
    }
    if (head.content_lengths > 1 || (head.content_lengths == 1 && !head.content_length)) {
      refuse(c, 400, "a request needs one Content-Length, a decimal number");
      return Next::kRefused;
    }
    c.body_bytes = head.content_length.value_or(0);
    if (c.body_bytes > limits_.gathered_body_bytes || (head.expect_continue && c.body_bytes > 0)) {
      if (c.body_bytes > limits_.gathered_body_bytes && !(large_body_allowed_ && large_body_allowed_(head.method, head.target))) {
        refuse(c, 413, "a request body over " + std::to_string(limits_.gathered_body_bytes >> 10) +
                           " KiB is accepted only as an upload (POST /api/snapshots)");
        return Next::kRefused;
      }
      size_t readers = body_readers_.load();
      do {
        if (readers >= limits_.max_body_readers) {
          refuse(c, 503, std::to_string(limits_.max_body_readers) +
                             " uploads are being received; send this one when one of them ends");
          return Next::kRefused;
        }
      } while (!body_readers_.compare_exchange_weak(readers, readers + 1));
      c.body_from_worker = true;
      return ready(c.head_bytes + c.body_bytes,
                   c.first_byte + limits_.request_deadline + at_rate(c.body_bytes, limits_.min_bytes_per_second));
    }
  }
  if (data.size() < c.head_bytes + c.body_bytes && !c.eof) return Next::kMore;
  return ready(c.head_bytes + c.body_bytes, c.deadline);
}

void ConnectionPool::dispatch(std::unique_ptr<Connection> c) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      ready_.push_back(std::move(c));
    }
  }
  if (c) {
    close(std::move(c));
    return;
  }
  ready_changed_.notify_one();
}

void ConnectionPool::to_poller(std::unique_ptr<Connection> c) {
  c->since = Clock::now();
  {
    std::lock_guard lock(mutex_);
    inbox_.push_back(std::move(c));  // closed by stop() if the poll thread has ended
  }
  wake_poller();
}

void ConnectionPool::work() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock lock(mutex_);
      ready_changed_.wait(lock, [this] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      c = std::move(ready_.front());
      ready_.pop_front();
    }
    ++busy_workers_;
    serve(std::move(c));
    --busy_workers_;
  }
}

void ConnectionPool::serve(std::unique_ptr<Connection> c) {
  using Phase = Connection::Phase;
  for (;;) {
    bool closed = false;
    const bool last = ++c->served >= limits_.keep_alive_requests;
    bool answered = false;
    {
      RequestStream stream(*this, *c);
      answered = handle_(stream, last, closed);
    }
    ++requests_answered_;
    if (c->body_from_worker) {
      c->body_from_worker = false;
      --body_readers_;
    }
    bool stopping = false;
    {
      std::lock_guard lock(mutex_);
      stopping = stopping_;
    }
    // A body the handler did not read (a refused upload) cannot be told from the next request.
    if (!answered || closed || last || stopping || c->read_total < c->request_end) c->close_after = true;
    const auto now = Clock::now();
    if (c->out_pos < c->out.size()) {
      c->phase = Phase::kFlush;
      c->deadline = c->write_start + limits_.request_deadline + at_rate(c->written, limits_.min_bytes_per_second);
      return to_poller(std::move(c));
    }
    if (c->close_after) {
      if (c->eof || !answered) return close(std::move(c));
      ::shutdown(c->fd, SHUT_WR);
      c->phase = Phase::kLinger;
      c->deadline = now + kLinger;
      return to_poller(std::move(c));
    }
    c->next_request(now, limits_.keep_alive);
    switch (advance(*c)) {
      case Next::kReady: continue;
      case Next::kClose: return close(std::move(c));
      case Next::kMore:
      case Next::kRefused: return to_poller(std::move(c));
    }
  }
}

void ConnectionPool::poll_loop() {
  using Phase = Connection::Phase;
  std::vector<std::unique_ptr<Connection>> polled;
  std::vector<pollfd> fds;
  const size_t gather_cap = limits_.max_head_bytes + limits_.gathered_body_bytes + 1;
  // Receives what the client sent, up to what a request may gather; false on an error.
  const auto receive = [&](Connection& c, size_t cap) {
    while (c.unread() < cap && !c.eof) {
      if (c.pos > 0 && (c.pos == c.in.size() || c.pos >= kReceiveChunk)) {
        c.in.erase(0, c.pos);
        c.pos = 0;
      }
      const size_t want = std::min(cap - c.unread(), kReceiveChunk);
      const size_t had = c.in.size();
      c.in.resize(had + want);
      const ssize_t n = ::recv(c.fd, c.in.data() + had, want, MSG_DONTWAIT);
      c.in.resize(had + (n > 0 ? static_cast<size_t>(n) : 0));
      if (n == 0) c.eof = true;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      if (static_cast<size_t>(n) < want) break;
    }
    return true;
  };
  // Sends what waits in `out`; false on an error. Once all is sent, the connection waits for its
  // next request, or lingers before closing.
  const auto send_out = [&](Connection& c) {
    while (c.out_pos < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_pos, c.out.size() - c.out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_pos += static_cast<size_t>(n);
        continue;
      }
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    }
    buffered_bytes_ -= c.out_counted;
    c.out_counted = 0;
    std::string().swap(c.out);
    c.out_pos = 0;
    const auto now = Clock::now();
    if (c.close_after) {
      ::shutdown(c.fd, SHUT_WR);
      c.phase = Phase::kLinger;
      c.deadline = now + kLinger;
    } else {
      c.next_request(now, limits_.keep_alive);
    }
    return true;
  };
  std::vector<std::unique_ptr<Connection>> to_close, to_reset, to_dispatch;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      for (auto& c : inbox_) polled.push_back(std::move(c));
      inbox_.clear();
    }
    // Over the limit: close the connections that have waited here longest (those closing first);
    // a client that sends its request at once is never the oldest.
    while (connections_.load() > limits_.max_connections && !polled.empty()) {
      const auto oldest = std::min_element(polled.begin(), polled.end(), [](const auto& a, const auto& b) {
        const bool a_lingers = a->phase == Phase::kLinger, b_lingers = b->phase == Phase::kLinger;
        return a_lingers != b_lingers ? a_lingers : a->since < b->since;
      });
      close(std::move(*oldest), /*reset=*/true);
      polled.erase(oldest);
    }
    // Deadlines: a request cut short hears why. A response the kernel still holds unsent keeps
    // its connection until the response's own deadline, and is dropped (reset) past it.
    auto now = Clock::now();
    for (auto& c : polled) {
      if (now < c->deadline) continue;
      if ((c->phase == Phase::kIdle || c->phase == Phase::kLinger) && unsent(c->fd)) {
        const auto sent_by = c->write_start + limits_.request_deadline + at_rate(c->written, limits_.min_bytes_per_second);
        if (now < sent_by) {
          c->deadline = sent_by;
          continue;
        }
        to_reset.push_back(std::move(c));
        continue;
      }
      if (c->phase == Phase::kRequest) {
        refuse(*c, 408, "the request did not arrive within " + std::to_string(limits_.request_deadline.count()) +
                            " ms of its first byte");
        c->deadline = now + kLinger;
        if (send_out(*c)) continue;
      }
      (c->phase == Phase::kFlush ? to_reset : to_close).push_back(std::move(c));
    }
    const auto polled_end = std::remove(polled.begin(), polled.end(), nullptr);
    polled.erase(polled_end, polled.end());
    for (auto& c : to_close) close(std::move(c));
    for (auto& c : to_reset) close(std::move(c), /*reset=*/true);
    to_close.clear();
    to_reset.clear();

    fds.assign(1, pollfd{wake_fd_, POLLIN, 0});
    auto next_deadline = now + std::chrono::seconds(1);
    for (const auto& c : polled) {
      short events = 0;
      if (c->phase == Phase::kFlush) events = POLLOUT;
      else if (c->phase == Phase::kLinger || c->unread() < gather_cap) events = POLLIN;
      fds.push_back(pollfd{c->fd, events, 0});
      next_deadline = std::min(next_deadline, c->deadline);
    }
    {
      std::lock_guard lock(mutex_);
      polled_ = polled.size();
    }
    const auto wait = std::chrono::ceil<milliseconds>(next_deadline - now);
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(wait.count(), 0)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    if (fds[0].revents != 0) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t ignored = ::read(wake_fd_, &count, sizeof count);
    }
    for (size_t i = 0; i < polled.size(); ++i) {
      if (fds[i + 1].revents == 0) continue;
      Connection& c = *polled[i];
      bool ok = true;
      if (c.phase == Phase::kLinger) {
        char sink[4096];
        const ssize_t n = ::recv(c.fd, sink, sizeof sink, MSG_DONTWAIT);
        ok = n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
      } else if (c.phase == Phase::kFlush) {
        ok = send_out(c);
        if (ok && c.phase == Phase::kIdle) ok = receive(c, gather_cap);  // a request may have come meanwhile
      } else {
        ok = receive(c, gather_cap);
      }
      if (ok && (c.phase == Phase::kIdle || c.phase == Phase::kRequest)) {
        switch (advance(c)) {
          case Next::kReady: to_dispatch.push_back(std::move(polled[i])); break;
          case Next::kClose: ok = false; break;
          case Next::kRefused: ok = send_out(c); break;
          case Next::kMore: break;
        }
      }
      if (!ok) to_close.push_back(std::move(polled[i]));
    }
    const auto handled_end = std::remove(polled.begin(), polled.end(), nullptr);
    polled.erase(handled_end, polled.end());
    for (auto& c : to_close) close(std::move(c));
    to_close.clear();
    for (auto& c : to_dispatch) dispatch(std::move(c));
    to_dispatch.clear();
  }
  for (auto& c : polled) close(std::move(c));
  std::lock_guard lock(mutex_);
  polled_ = 0;
}

}  // namespace memsnap::web
