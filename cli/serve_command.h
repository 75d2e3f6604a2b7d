// `memsnap serve`: the web viewer. It runs as a program of its own, memsnap-serve, built beside
// memsnap, which `memsnap serve` replaces itself with (serve_forward.cpp): the HTTP server's
// libraries (cpp-httplib and the OpenSSL, brotli and zlib it was built with, over 6 MiB once
// loaded) are then loaded by the command that serves, not by every `memsnap stats`.
#pragma once

#include "cli/command.h"

namespace memsnap::cli {

inline constexpr const char* kServeDescription =
    "Serve the web viewer: flamegraph, segments, timeline, trace, compare and stats views of the "
    "given snapshots (more can be uploaded from the page) at http://127.0.0.1:PORT/; a file that "
    "cannot be read is listed with its reason. Given a folder of a distributed job's snapshots, or "
    "files that name two ranks or more, a Ranks view compares the ranks and opens each on demand. "
    "Ctrl-C stops it.";

// memsnap-serve's options, on its own command line (`app`).
CommandRunner add_serve_options(CLI::App& app);

}  // namespace memsnap::cli
