// libmemsnap_record.so: the recorder `memsnap record` puts into a CUDA program. The CUDA driver
// loads the library named by CUDA_INJECTION64_PATH when the program initializes CUDA and calls
// its InitializeInjection, so the recorder sees every CUDA process the command starts — with
// the runtime linked statically or not, whatever loads the driver — without touching the program.
//
// It subscribes to CUPTI's callbacks for the allocation calls (cuda_calls.h) and writes
// snapshots: at exit, at a failed allocation, and on the signal asked for. Whatever goes wrong
// is one line on stderr and the program runs on unrecorded: nothing here may change what the
// program does. A forked child records nothing (CUDA does not survive a fork; a child that
// execs another CUDA program is recorded by the new program's own injection).
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "allocator/device_stats.h"
#include "allocator/nvml_processes.h"
#include "record/allocation_ledger.h"
#include "record/call_recorder.h"
#include "record/call_stack_trim.h"
#include "record/cuda_driver_queries.h"
#include "record/cupti_library.h"
#include "record/record_settings.h"
#include "snapshot/snapshot_file.h"

namespace memsnap {
namespace {

class Injection {
 public:
  Injection(RecordSettings settings, CuptiLibrary cupti)
      : settings_(std::move(settings)),
        cupti_(std::move(cupti)),
        driver_(CudaDriverQueries::from_loaded_driver()),
        ledger_(LedgerSettings{settings_.max_entries}),
        pid_(getpid()) {}

  // Subscribes and enables the callbacks; a one-line error if CUPTI refuses.
  std::optional<std::string> start();
  void write_at_exit();
  void stop() { recorder_->stop(); }
  // Writes the snapshot asked for by the signal; `ends` waits for it (the handler's side).
  void start_signal_thread();
  static void on_signal(int signal);

 private:
  static void CUPTIAPI on_callback(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                   const void* data) {
    static_cast<CallRecorder*>(user)->on_callback(domain, id, *static_cast<const CUpti_CallbackData*>(data));
  }
  void write(const std::string& pattern, int device, const char* why);
  // The driver's figures for each device the program used (total, free, NVML's processes), so
  // the snapshot tells the program's allocations from the rest of what it held (its context).
  void sample_device_memory(Snapshot& snapshot) const;
  // A line for `memsnap record` (MEMSNAP_RECORD_REPORT): a snapshot's path, or "!" and why one was lost.
  void report(std::string line) const;

  const RecordSettings settings_;
  const CuptiLibrary cupti_;
  const CudaDriverQueries driver_;
  AllocationLedger ledger_;
  std::unique_ptr<CallRecorder> recorder_;
  const pid_t pid_;
  std::mutex write_mutex_;
  uint64_t written_ = 0;  // snapshots written, for {n}; under write_mutex_
  std::atomic<uint64_t> out_of_memory_errors_{0};
  bool at_exit_done_ = false;
  int request_pipe_[2] = {-1, -1};  // signal handler -> writer thread
  int done_pipe_[2] = {-1, -1};     // writer thread -> handler, for signals that end the program
  struct sigaction previous_ {};
};

// Set once by InitializeInjection and never freed: callbacks, atexit and signal handlers may
// run to the process's very end.
std::atomic<Injection*> injection{nullptr};

std::optional<std::string> Injection::start() {
  CallStackTrim trim;
  trim.add_tool_module_at(reinterpret_cast<const void*>(&Injection::on_signal));
  trim.add_tool_modules_named("libcupti");
  trim.add_tool_modules_named("libcuda.so");
  trim.add_runtime_modules_named("libcudart");
  CallRecorderHooks hooks;
  hooks.device_of = [this](CUcontext context) {
    uint32_t device = 0;
    return cupti_.get_device_id(context, &device) == CUPTI_SUCCESS ? static_cast<int>(device) : -1;
  };
  hooks.describe_device = [this](int device, AllocationLedger& ledger) {
    ledger.describe_device(device, driver_.device_name(device), driver_.total_memory(device));
  };
  hooks.device_free_bytes = [this] { return driver_.current_device_free_bytes(); };
  hooks.out_of_memory = [this](int device) {
    if (settings_.oom_output.empty()) return;
    const uint64_t n = ++out_of_memory_errors_;
    if (n <= settings_.oom_limit) {
      write(settings_.oom_output, device, "out of memory:");
    } else if (n == settings_.oom_limit + 1) {
      std::fprintf(stderr, "memsnap record: more than %zu out-of-memory errors: the later ones are in the "
                   "trace, without snapshots of their own (--oom-limit)\n", settings_.oom_limit);
    }
  };
  recorder_ = std::make_unique<CallRecorder>(ledger_, std::move(hooks), settings_.stacks, std::move(trim));

  CUpti_SubscriberHandle subscriber = nullptr;
  CUptiResult result = cupti_.subscribe(&subscriber, &Injection::on_callback, recorder_.get());
  if (result != CUPTI_SUCCESS)
    return "CUPTI refused the subscription (" + cupti_.describe(result) +
           "; another tool, such as a profiler, may hold it)";
  for (const RecordedApi& api : recorded_apis()) {
    result = cupti_.enable_callback(1, subscriber, api.domain, api.id);
    if (result != CUPTI_SUCCESS) {
      cupti_.unsubscribe(subscriber);
      return std::string("CUPTI cannot report ") + api.name + " (" + cupti_.describe(result) + ")";
    }
  }
  return std::nullopt;
}

// A line for `memsnap record` in the MEMSNAP_RECORD_REPORT file: a snapshot's path, or "!" and
// why one was lost.
void append_report(const std::string& report, std::string line) {
  if (report.empty()) return;
  for (char& c : line)
    if (c == '\n') c = ' ';
  // memsnap record made the file (mkstemp) and keeps it while the program runs.
  const int fd = open(report.c_str(), O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  line += '\n';
  (void)!::write(fd, line.data(), line.size());  // one write: lines from many processes stay whole
  close(fd);
}

void Injection::report(std::string line) const { append_report(settings_.report, std::move(line)); }

void Injection::write(const std::string& pattern, int device, const char* why) {
  std::lock_guard lock(write_mutex_);
  const std::string path = expand_dump_path(pattern, device, ++written_);
  try {
    Snapshot snapshot = ledger_.snapshot();
    sample_device_memory(snapshot);
    if (auto error = write_snapshot_file(snapshot, path)) {
      std::fprintf(stderr, "memsnap record: %s snapshot not written: %s\n", why, error->c_str());
      report("!" + *error);
      return;
    }
    uint64_t live_bytes = 0;
    for (const SnapshotSegment& segment : snapshot.segments) live_bytes += segment.total_size;
    const LedgerCounts counts = ledger_.counts();
    std::fprintf(stderr, "memsnap record: %s snapshot written to %s (%llu allocations, %llu frees, %zu live holding %s)\n",
                 why, path.c_str(), static_cast<unsigned long long>(counts.allocations),
                 static_cast<unsigned long long>(counts.frees), snapshot.segments.size(),
                 format_bytes(static_cast<int64_t>(live_bytes)).c_str());
    report(path);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "memsnap record: %s snapshot not written to %s: %s\n", why, path.c_str(), error.what());
    report("!" + path + ": " + error.what());
  }
}

void Injection::sample_device_memory(Snapshot& snapshot) const {
  for (const DeviceInfo& info : snapshot.devices) {
    const int device = static_cast<int>(info.index);
    size_t free_bytes = 0, total_bytes = 0;
    if (!driver_.memory_info(device, free_bytes, total_bytes)) continue;
    DeviceMemorySample& sample = snapshot.device_memory.emplace_back();
    sample.device = device;
    sample.total_bytes = total_bytes;
    sample.free_bytes = free_bytes;
    const std::string bus_id = driver_.pci_bus_id(device);
    if (!bus_id.empty())
      for (const DeviceProcess& process : nvml_processes_at_bus_id(bus_id.c_str(), total_bytes))
        sample.processes.emplace_back(process.pid, process.bytes);
  }
}

void Injection::write_at_exit() {
  if (getpid() != pid_) return;
  stop();  // what the runtime frees while tearing down is not the program's doing
  {
    std::lock_guard lock(write_mutex_);
    if (at_exit_done_) return;
    at_exit_done_ = true;
  }
  // A process that made no allocation (a launcher that only asked CUDA how many devices there
  // are) writes nothing: its empty snapshot would only take a name a worker's could need.
  const LedgerCounts counts = ledger_.counts();
  if (counts.allocations == 0 && counts.frees == 0 && counts.out_of_memory == 0) return;
  if (!settings_.output.empty()) write(settings_.output, 0, "at exit:");
}

void Injection::start_signal_thread() {
  if (settings_.signal == 0) return;
  if (pipe2(request_pipe_, O_CLOEXEC) != 0 || pipe2(done_pipe_, O_CLOEXEC) != 0) {
    std::fprintf(stderr, "memsnap record: no snapshot on SIG%s: cannot make a pipe\n",
                 std::string(record_signal_name(settings_.signal)).c_str());
    return;
  }
  std::thread([this] {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);  // the handler never runs on this thread
    for (;;) {
      char byte = 0;
      const ssize_t n = read(request_pipe_[0], &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      const std::string why = "on SIG" + std::string(record_signal_name(settings_.signal)) + ":";
      write(settings_.output, 0, why.c_str());
      (void)!::write(done_pipe_[1], &byte, 1);
    }
  }).detach();
  struct sigaction action {};
  action.sa_handler = &Injection::on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(settings_.signal, &action, &previous_);
}

// Async-signal-safe: a byte down a pipe, and for a signal that ends the program a bounded wait
// for the snapshot, then the signal's previous disposition.
void Injection::on_signal(int signal) {
  const int saved_errno = errno;
  Injection* self = injection.load();
  if (self == nullptr) return;
  const bool ends = record_signal_ends_program(signal);
  if (getpid() == self->pid_) {
    char byte = 1;
    (void)!::write(self->request_pipe_[1], &byte, 1);
    if (ends) {
      pollfd done{self->done_pipe_[0], POLLIN, 0};
      if (poll(&done, 1, 60000) > 0) (void)!read(self->done_pipe_[0], &byte, 1);
    }
  }
  if (ends || getpid() != self->pid_) {
    sigaction(signal, &self->previous_, nullptr);
    raise(signal);  // delivered when this handler returns, to the previous disposition
  }
  errno = saved_errno;
}

void start_injection() {
  Result<RecordSettings> settings = record_settings();
  if (!settings) {
    std::fprintf(stderr, "memsnap record: %s; the program runs unrecorded\n", settings.error().c_str());
    return;
  }
  // Where the snapshots go is checked now, not when the first one is lost at exit.
  for (const auto& [name, pattern] : {std::pair{"MEMSNAP_RECORD_OUTPUT", &settings->output},
                                      std::pair{"MEMSNAP_RECORD_OOM", &settings->oom_output}}) {
    if (pattern->empty()) continue;
    if (auto problem = dump_pattern_problem(*pattern)) {
      std::fprintf(stderr, "memsnap record: %s: %s; the program runs unrecorded\n", name, problem->c_str());
      append_report(settings->report, "!" + *problem);
      return;
    }
  }
  Result<CuptiLibrary> cupti = load_cupti(settings->cupti_library);
  if (!cupti) {
    std::fprintf(stderr, "memsnap record: %s; the program runs unrecorded\n", cupti.error().c_str());
    return;
  }
  auto* self = new Injection(std::move(settings).value(), std::move(cupti).value());
  if (auto error = self->start()) {
    std::fprintf(stderr, "memsnap record: %s; the program runs unrecorded\n", error->c_str());
    // Kept, stopped: a callback already under way in another thread may still reach it.
    self->stop();
    static std::atomic<Injection*> refused{nullptr};
    refused.store(self);
    return;
  }
  injection.store(self);
  std::atexit([] { injection.load()->write_at_exit(); });
  pthread_atfork(nullptr, nullptr, [] { injection.load()->stop(); });
  self->start_signal_thread();
}

}  // namespace
}  // namespace memsnap

// Called by the CUDA driver once, when the program initializes CUDA. Always reports success:
// a recorder that cannot record must not fail the program's CUDA.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  static std::once_flag once;
  try {
    std::call_once(once, memsnap::start_injection);
  } catch (...) {
    std::fprintf(stderr, "memsnap record: cannot start; the program runs unrecorded\n");
  }
  return 1;
}
