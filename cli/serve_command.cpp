// memsnap-serve (run as `memsnap serve`) [--host H] [--allow-host NAME]... [--port P] [--max-upload-mb N] [--max-snapshots N] [--cache-mb N] [--rank-pattern RE] FILE_OR_DIR...
#include "cli/serve_command.h"

#include <pthread.h>
#include <signal.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include <filesystem>
#include <map>
#include <optional>

#include "cli/snapshot_input.h"
#include "snapshot/snapshot_files.h"
#include "viewer/job_ranks.h"
#include "web/job_catalog.h"
#include "web/host_check.h"
#include "web/viewer_server.h"

namespace memsnap::cli {
namespace {

// Ctrl-C and SIGTERM stop the server cleanly: the signals are blocked in every thread and one
// watcher thread waits for them, so no handler runs inside the server's code.
class StopOnSignal {
 public:
  // While `loading` (the files given are still being read), a signal ends the process at once,
  // as it would before the server existed.
  StopOnSignal(web::ViewerServer& server, const std::atomic<bool>& loading) {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    watcher_ = std::thread([this, &server, &loading] {
      int signal = 0;
      sigwait(&signals_, &signal);
      if (done_) return;
      std::fprintf(stderr, "\nmemsnap serve: stopping\n");
      if (loading) std::_Exit(128 + signal);
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

CommandRunner add_serve_options(CLI::App& app) {
  struct Options {
    std::vector<std::string> files;
    std::string host = "127.0.0.1";
    int port = 8080;
    uint64_t max_upload_mb = 512;
    size_t max_snapshots = 32;
    uint64_t cache_mb = web::ResponseCache::kDefaultBudgetBytes >> 20;
    std::string rank_pattern;
    std::vector<std::string> allowed_hosts;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = &app;
  command->add_option("FILE_OR_DIR", options->files, "snapshot files to open, or folders of a job's rank snapshots");
  command->add_option("--rank-pattern", options->rank_pattern,
                      "regular expression whose first group is the rank in a file name (as memsnap ranks)");
  command->add_option("--host", options->host,
                      "address to listen on (default 127.0.0.1; anything else exposes your snapshots to the network)");
  command->add_option("--allow-host", options->allowed_hosts,
                      "with --host beyond loopback, also answer requests addressed to this name (this "
                      "machine's host name, --host's and IP addresses always are); repeatable");
  command->add_option("--port", options->port, "port (default 8080; 0 picks a free one)")->check(CLI::Range(0, 65535));
  command->add_option("--max-upload-mb", options->max_upload_mb, "largest upload accepted, in MiB (default 512)")
      ->check(CLI::Range(1, 2048));
  command->add_option("--max-snapshots", options->max_snapshots, "most snapshots held at once (default 32)")
      ->check(CLI::Range(1, 1000));
  command->add_option("--cache-mb", options->cache_mb,
                      "memory for the rendered views kept to answer again, in MiB, all snapshots together; the "
                      "least recently used are dropped past it (default 256; 0 keeps none)")
      ->check(CLI::Range(0, 1 << 20));
  return [command, options] {
    if (!command->parsed()) return;
#if defined(__GLIBC__)
    // Snapshots are loaded and dropped by whichever server thread takes the request; with glibc's
    // default of one malloc arena per thread, each arena keeps the high-water mark of what passed
    // through it and a long-running viewer's footprint grows with uploads it no longer holds.
    mallopt(M_ARENA_MAX, 2);
#endif
    Result<std::vector<std::string>> files = expand_snapshot_paths(options->files);
    if (!files) throw CommandError(files.error());
    bool any_folder = false;
    for (const std::string& path : options->files) {
      std::error_code error;
      any_folder |= std::filesystem::is_directory(path, error);
    }
    // Listening comes first, so the page loads while the files are read: its API requests wait
    // for them (ViewerServer::hold_api). A folder is a job: its ranks are summarized now and
    // each opened when asked for. Files named one by one are opened now; a file that cannot be
    // read is listed (stderr, and the page), not fatal. They are compared as ranks too when at
    // least two of them name different ranks (ranks_of_one_job).
    web::SnapshotStore store(any_folder ? options->max_snapshots : std::max(options->max_snapshots, files.value().size()),
                             options->cache_mb << 20);
    std::unique_ptr<web::JobCatalog> job;  // outlives the server, which points at it
    web::ServerOptions server_options;
    server_options.host = options->host;
    server_options.port = options->port;
    for (const std::string& name : options->allowed_hosts)
      if (!web::is_host_name(name)) throw CommandError("--allow-host " + name + ": not a host name (letters, digits, '-' and '.')");
    server_options.allowed_hosts = options->allowed_hosts;
    server_options.limits.max_upload_bytes = options->max_upload_mb << 20;
    web::ViewerServer server(store, server_options);
    server.hold_api();
    if (!web::is_loopback_host(options->host))
      std::fprintf(stderr, "memsnap serve: warning: listening on %s: anyone who can reach this machine can read "
                           "the snapshots and upload files\n", options->host.c_str());
    std::atomic<bool> loading{true};
    StopOnSignal stop_on_signal(server, loading);
    auto port = server.bind();
    if (!port) throw CommandError(port.error());
    const bool ipv6 = options->host.find(':') != std::string::npos;
    std::printf("memsnap serve: http://%s%s%s:%d/  (Ctrl-C to stop)\n", ipv6 ? "[" : "", options->host.c_str(),
                ipv6 ? "]" : "", port.value());
    std::fflush(stdout);
    std::thread serving([&server] { server.run(); });
    try {
      std::map<std::string, std::shared_ptr<const web::StoredSnapshot>> opened;
      std::vector<std::string> job_files = files.value();
      if (!any_folder) {
        job_files.clear();
        for (const std::string& file : files.value()) {
          auto added = store.add_file(file);
          if (!added) {
            std::fprintf(stderr, "memsnap serve: not opened: %s\n", added.error().c_str());
            store.note_unopened({file, added.error()});
            continue;
          }
          opened[file] = added.value();
          job_files.push_back(file);
          server.warm_up(added.value());
          std::fprintf(stderr, "memsnap serve: loaded %s (%llu trace events)\n", file.c_str(),
                       static_cast<unsigned long long>(added.value()->trace_events));
        }
        // Files were named and none could be read: nothing to serve. None named: an empty
        // server, for uploads.
        if (opened.empty() && !store.unopened().empty()) throw CommandError(store.unopened().front().error);
      }
      if (any_folder || job_files.size() > 1) {
        JobRanksOptions job_options;
        job_options.rank_pattern = options->rank_pattern;
        job_options.progress = files_progress(job_files.size());
        const PickleReadOptions read = job_read_options(job_files.size(), job_options);
        const SnapshotLoader load = [&opened, read](const std::string& file) -> Result<std::shared_ptr<const Snapshot>> {
          if (auto it = opened.find(file); it != opened.end())
            return std::shared_ptr<const Snapshot>(it->second, &it->second->loaded.snapshot);
          Result<LoadedSnapshot> loaded = load_snapshot(file, read);
          if (!loaded) return Result<std::shared_ptr<const Snapshot>>::failure(loaded.error());
          return std::make_shared<const Snapshot>(std::move(std::move(loaded).value().snapshot));
        };
        Result<JobRanks> ranks = summarize_job(job_files, load, job_options);
        if (!ranks) throw CommandError(ranks.error());
        std::optional<JobRanks> job_ranks = std::move(ranks).value();
        if (!any_folder) {
          const size_t given = job_ranks->ranks.size();
          job_ranks = ranks_of_one_job(std::move(*job_ranks), job_options);
          if (!job_ranks)
            std::fprintf(stderr, "memsnap serve: %zu snapshots, not the ranks of one job (no two name different ranks)\n",
                         given);
          else if (job_ranks->ranks.size() < given)
            std::fprintf(stderr, "memsnap serve: %zu of the snapshots name no rank: not in the Ranks view\n",
                         given - job_ranks->ranks.size());
        }
        if (job_ranks) {
          for (const SkippedFile& skipped : job_ranks->skipped)
            std::fprintf(stderr, "memsnap serve: not a rank: %s\n", skipped.error.c_str());
          std::fprintf(stderr, "memsnap serve: %zu ranks (the Ranks view)\n", job_ranks->ranks.size());
          job = std::make_unique<web::JobCatalog>(store, std::move(*job_ranks));
          for (const auto& [file, stored] : opened) job->note_open(file, stored->id);
        }
      }
    } catch (const std::exception& e) {
      server.refuse_api(std::string("memsnap serve could not open what it was given: ") + e.what());
      server.stop();
      serving.join();
      throw;
    }
    loading = false;
    server.set_job(job.get());
    server.open_api();
    serving.join();
  };
}

}  // namespace memsnap::cli
