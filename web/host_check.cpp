#include "web/host_check.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <optional>

namespace memsnap::web {
namespace {

enum class HostKind { kName, kIPv4, kIPv6 };

struct Host {
  HostKind kind = HostKind::kName;
  std::string name;  // lower case, no trailing dot
  bool loopback = false;
};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string without_trailing_dot(std::string name) {
  if (!name.empty() && name.back() == '.') name.pop_back();
  return name;
}

bool is_port(std::string_view text) {
  if (text.empty() || text.size() > 5) return false;
  if (!std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  return std::stoul(std::string(text)) <= 65535;
}

// The host of a Host header, or nothing when the header is not `host[:port]`.
std::optional<Host> parse_host(std::string_view header) {
  Host host;
  std::string_view rest;
  if (!header.empty() && header.front() == '[') {
    const size_t close = header.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    const std::string address(header.substr(1, close - 1));
    in6_addr parsed{};
    if (inet_pton(AF_INET6, address.c_str(), &parsed) != 1) return std::nullopt;
    host.kind = HostKind::kIPv6;
    host.name = "[" + lower(address) + "]";
    host.loopback = std::memcmp(&parsed, &in6addr_loopback, sizeof parsed) == 0;
    rest = header.substr(close + 1);
  } else {
    const size_t colon = header.find(':');
    const std::string_view name = header.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : header.substr(colon);
    in_addr parsed{};
    const std::string text(name);
    if (inet_pton(AF_INET, text.c_str(), &parsed) == 1) {
      host.kind = HostKind::kIPv4;
      host.loopback = (ntohl(parsed.s_addr) >> 24) == 127;
    } else if (!is_host_name(name)) {
      return std::nullopt;
    }
    host.name = without_trailing_dot(lower(name));
    if (host.name == "localhost") host.loopback = true;
  }
  if (!rest.empty() && (rest.front() != ':' || !is_port(rest.substr(1)))) return std::nullopt;
  return host;
}

bool listens_on_loopback_only(const std::string& listen_host) {
  const std::optional<Host> host = parse_host(listen_host.find(':') != std::string::npos && listen_host.front() != '['
                                                  ? "[" + listen_host + "]"
                                                  : listen_host);
  return host && host->loopback;
}

}  // namespace

bool is_host_name(std::string_view name) {
  if (name.empty() || name.size() > 253 || name.front() == '.' || name.front() == '-') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
  });
}

HostCheck::HostCheck(const std::string& listen_host, const std::vector<std::string>& extra_names)
    : loopback_only_(listens_on_loopback_only(listen_host)) {
  if (loopback_only_) {
    refusal_ = "this server answers only requests addressed to localhost";
    return;
  }
  char machine[HOST_NAME_MAX + 1] = {};
  if (gethostname(machine, sizeof machine - 1) == 0 && is_host_name(machine))
    names_.push_back(without_trailing_dot(lower(machine)));
  if (is_host_name(listen_host)) names_.push_back(without_trailing_dot(lower(listen_host)));
  for (const std::string& name : extra_names)
    if (is_host_name(name)) names_.push_back(without_trailing_dot(lower(name)));
  std::sort(names_.begin(), names_.end());
  names_.erase(std::unique(names_.begin(), names_.end()), names_.end());
  refusal_ = "this server answers requests addressed to localhost, an IP address";
  for (const std::string& name : names_) refusal_ += ", " + name;
  refusal_ += " (memsnap serve --allow-host NAME adds a name)";
}

bool HostCheck::allows(std::string_view host_header) const {
  const std::optional<Host> host = parse_host(host_header);
  if (!host) return false;
  if (host->loopback) return true;
  if (loopback_only_) return false;
  if (host->kind != HostKind::kName) return true;
  return std::binary_search(names_.begin(), names_.end(), host->name);
}

}  // namespace memsnap::web
