// Which Host headers `memsnap serve` answers, against DNS rebinding: a page on another site
// that makes its own name resolve to this machine must not reach the server through the
// visitor's browser. A request is answered when its Host header is well formed (a name, an
// IPv4 address or a bracketed IPv6 address, then optionally ':' and a port of digits; nothing
// else, so "127.0.0.1:80@evil.com", "[::1]evil" and "localhost:abc" are refused) and names:
// - a loopback address or "localhost", always;
// - when the server listens beyond loopback (--host 0.0.0.0, an address, a name): also any IP
//   address (a rebinding page cannot make a browser send one: its Host is its own name), this
//   machine's host name, the name given as --host, and every name given with --allow-host.
// Names are compared without case and without a trailing dot.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace memsnap::web {

class HostCheck {
 public:
  // `listen_host`: what the server binds (ServerOptions::host); `extra_names`: --allow-host.
  HostCheck(const std::string& listen_host, const std::vector<std::string>& extra_names);

  bool allows(std::string_view host_header) const;
  // The 421 response's message: the names this server answers to.
  const std::string& refusal() const { return refusal_; }

 private:
  bool loopback_only_ = true;
  std::vector<std::string> names_;  // lower case, no trailing dot
  std::string refusal_;
};

// Whether `name` is a valid --allow-host value (a host name: letters, digits, '-' and '.').
bool is_host_name(std::string_view name);

}  // namespace memsnap::web
