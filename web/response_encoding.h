// How responses are encoded for the browser: gzip rather than brotli, and bodies that are kept
// (rendered views) sent in the gzip made once for them instead of compressed again per request.
#pragma once

#include <httplib.h>

#include "web/rendered_body.h"

namespace memsnap::web {

// Debian's cpp-httplib answers "Accept-Encoding: br" (every browser sends it) with brotli at
// its highest quality: seconds for a 2 MB timeline where gzip takes milliseconds. The library
// has no switch for it, so "br" is taken out of the request's list before it sees it.
void prefer_gzip(const httplib::Request& request);

// Sets `body` as the response: its kept gzip when the client accepts gzip and the body is big
// enough to gain from it, else the text (which the library may still compress).
void send_body(const httplib::Request& request, httplib::Response& response, const RenderedBody& body,
               const char* content_type);

}  // namespace memsnap::web
