#include "web/response_encoding.h"

namespace memsnap::web {
namespace {

// The request object is the library's own non-const one, handed to handlers by const
// reference; its Accept-Encoding is what the library reads when it writes the response.
httplib::Headers& headers_of(const httplib::Request& request) { return const_cast<httplib::Headers&>(request.headers); }

bool accepts_gzip(const httplib::Request& request) {
  return request.get_header_value("Accept-Encoding").find("gzip") != std::string::npos;
}

}  // namespace

void prefer_gzip(const httplib::Request& request) {
  auto& headers = headers_of(request);
  for (auto it = headers.find("Accept-Encoding"); it != headers.end() && it->first == "Accept-Encoding"; ++it) {
    std::string kept;
    size_t start = 0;
    const std::string& value = it->second;
    while (start <= value.size()) {
      const size_t comma = std::min(value.find(',', start), value.size());
      std::string item = value.substr(start, comma - start);
      item.erase(0, item.find_first_not_of(' '));
      if (!item.empty() && item.rfind("br", 0) != 0) kept += (kept.empty() ? "" : ", ") + item;
      start = comma + 1;
    }
    it->second = kept;
  }
}

void send_body(const httplib::Request& request, httplib::Response& response, const RenderedBody& body,
               const char* content_type) {
  constexpr size_t kWorthCompressing = 1024;
  if (body.text().size() < kWorthCompressing || !accepts_gzip(request)) {
    response.set_content(body.text(), content_type);
    return;
  }
  response.set_content(body.gzip(), content_type);
  response.set_header("Content-Encoding", "gzip");
  response.set_header("Vary", "Accept-Encoding");
  // Already encoded: the library must not compress it again.
  headers_of(request).erase("Accept-Encoding");
}

}  // namespace memsnap::web
