// memsnap serve [--host H] [--port P] [--max-upload-mb N] [--max-snapshots N] FILE...
#include "cli/command.h"

#include <pthread.h>
#include <signal.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "web/cached_views.h"
#include "web/viewer_server.h"

namespace memsnap::cli {
namespace {

// Ctrl-C and SIGTERM stop the server cleanly: the signals are blocked in every thread and one
// watcher thread waits for them, so no handler runs inside the server's code.
class StopOnSignal {
 public:
  explicit StopOnSignal(web::ViewerServer& server) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    watcher_ = std::thread([this, &server] {
      int signal = 0;
      sigwait(&signals_, &signal);
      if (!done_) std::fprintf(stderr, "\nmemsnap serve: stopping\n");
      server.stop();
    });
  }
  ~StopOnSignal() {
    done_ = true;
    pthread_kill(watcher_.native_handle(), SIGTERM);  // wakes the watcher if the server stopped otherwise
    watcher_.join();
  }

 private:
  sigset_t signals_{};
  std::thread watcher_;
  std::atomic<bool> done_{false};
};

}  // namespace

CommandRunner add_serve_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> files;
    std::string host = "127.0.0.1";
    int port = 8080;
    uint64_t max_upload_mb = 512;
    size_t max_snapshots = 32;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "serve",
      "Serve the web viewer: flamegraph, segments, timeline, trace, compare and stats views of the "
      "given snapshots (more can be uploaded from the page) at http://127.0.0.1:PORT/. Ctrl-C stops it.");
  command->add_option("FILE", options->files, "snapshot files to open");
  command->add_option("--host", options->host,
                      "address to listen on (default 127.0.0.1; anything else exposes your snapshots to the network)");
  command->add_option("--port", options->port, "port (default 8080; 0 picks a free one)")->check(CLI::Range(0, 65535));
  command->add_option("--max-upload-mb", options->max_upload_mb, "largest upload accepted, in MiB (default 512)")
      ->check(CLI::Range(1, 2048));
  command->add_option("--max-snapshots", options->max_snapshots, "most snapshots held at once (default 32)")
      ->check(CLI::Range(1, 1000));
  return [command, options] {
    if (!command->parsed()) return;
#if defined(__GLIBC__)
    // Snapshots are loaded and dropped by whichever server thread takes the request; with glibc's
    // default of one malloc arena per thread, each arena keeps the high-water mark of what passed
    // through it and a long-running viewer's footprint grows with uploads it no longer holds.
    mallopt(M_ARENA_MAX, 2);
#endif
    web::SnapshotStore store(std::max(options->max_snapshots, options->files.size()));
    for (const std::string& file : options->files) {
      auto added = store.add_file(file);
      if (!added) throw CommandError(added.error());
      web::warm_up(*added.value());
      std::fprintf(stderr, "memsnap serve: loaded %s (%llu trace events)\n", file.c_str(),
                   static_cast<unsigned long long>(added.value()->trace_events));
    }
    web::ServerOptions server_options;
    server_options.host = options->host;
    server_options.port = options->port;
    server_options.limits.max_upload_bytes = options->max_upload_mb << 20;
    web::ViewerServer server(store, server_options);
    if (!web::is_loopback_host(options->host))
      std::fprintf(stderr, "memsnap serve: warning: listening on %s: anyone who can reach this machine can read "
                           "the snapshots and upload files\n", options->host.c_str());
    StopOnSignal stop_on_signal(server);
    auto port = server.bind();
    if (!port) throw CommandError(port.error());
    const bool ipv6 = options->host.find(':') != std::string::npos;
    std::printf("memsnap serve: http://%s%s%s:%d/  (Ctrl-C to stop)\n", ipv6 ? "[" : "", options->host.c_str(),
                ipv6 ? "]" : "", port.value());
    std::fflush(stdout);
    server.run();
  };
}

}  // namespace memsnap::cli
