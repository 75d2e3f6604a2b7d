#include "tests/verdicts/program_runtime.h"

#include <algorithm>

#include "snapshot/snapshot_builder.h"

namespace memsnap::truth {
namespace {

// Token payload: the site's id, then the depth (0 the site's line, 1 its caller, 2 the script).
constexpr uintptr_t kDepths = 4;
constexpr const char* kScript = "train.py";

uintptr_t token(size_t site, uintptr_t depth) {
  return kInterpreterTokenBit | kInterpreterFrameBit | (static_cast<uintptr_t>(site) * kDepths + depth);
}

// Spins until the steady clock's microsecond turns, so what comes next lies in a later one.
void next_microsecond() {
  const int64_t now = steady_time_us();
  while (steady_time_us() == now) {
  }
}

}  // namespace

void ScriptedFrames::enter(const Site& site) {
  const std::string key = site.function + "\n" + std::to_string(site.line) + "\n" + site.caller + "\n" +
                          std::to_string(site.caller_line);
  auto [it, fresh] = ids_.emplace(key, sites_.size());
  if (fresh) sites_.push_back(site);
  current_ = static_cast<int64_t>(it->second);
}

size_t ScriptedFrames::capture(uintptr_t* tokens, size_t max) {
  if (current_ < 0 || max < 4) return 0;
  const auto site = static_cast<size_t>(current_);
  tokens[0] = token(site, 0);
  tokens[1] = token(site, 1);
  tokens[2] = token(site, 2);
  tokens[3] = kInterpreterRunEnd;
  return 4;
}

SourceFrame ScriptedFrames::resolve(uintptr_t word) {
  const uintptr_t payload = word & kInterpreterPayloadMask;
  const size_t id = payload / kDepths;
  if (id >= sites_.size()) return {"??", "", 0};
  const Site& site = sites_[id];
  switch (payload % kDepths) {
    case 0: return {site.function, kScript, site.line};
    case 1: return {site.caller, kScript, site.caller_line ? site.caller_line : 200};
    default: return {"<module>", kScript, 300};
  }
}

Runtime::Runtime(const RunOptions& options) : options_(options) {
  SimulatedBackend::Options device;
  device.capacity_bytes = options.capacity_bytes;
  device.events_complete_immediately = false;
  backend_ = std::make_shared<SimulatedBackend>(device);
  allocator_ = std::make_unique<CachingAllocator>(backend_, options.config);
  if (options.record) {
    recorder_ = std::make_unique<HistoryRecorder>(*allocator_);
    recorder_->set_interpreter_frames(&frames_);
    HistorySettings settings;
    settings.level = options.level;
    settings.max_entries = options.max_entries;
    settings.cpp_stacks = false;
    settings.interpreter_stacks = true;
    recorder_->configure(settings);
  }
  started_us_ = steady_time_us();
}

Runtime::~Runtime() {
  for (void* p : live_) allocator_->deallocate(p);
  recorder_.reset();
}

void* Runtime::alloc(const Site& site, size_t bytes, StreamId stream) {
  frames_.enter(site);
  void* p = nullptr;
  try {
    p = allocator_->allocate(bytes, 0, stream);
  } catch (const OutOfMemoryError&) {
    out_of_memory_ = true;
  }
  frames_.leave();
  if (p != nullptr) live_.push_back(p);
  return p;
}

void Runtime::free(void* p) {
  if (p == nullptr) return;
  auto it = std::find(live_.rbegin(), live_.rend(), p);
  if (it != live_.rend()) live_.erase(std::next(it).base());
  allocator_->deallocate(p);
}

void Runtime::release_all() {
  for (void* p : live_) allocator_->deallocate(p);
  live_.clear();
}

void Runtime::record_stream(void* p, StreamId stream) {
  if (p != nullptr) allocator_->record_stream(p, stream);
}

StreamId Runtime::new_stream() { return backend_->create_stream(0); }

void Runtime::complete(StreamId stream) { backend_->complete_events(stream); }

void Runtime::start(const std::string& name) {
  if (!recorder_) return;
  next_microsecond();
  recorder_->annotate(name, true);
  next_microsecond();
}

void Runtime::end(const std::string& name) {
  if (!recorder_) return;
  next_microsecond();
  recorder_->annotate(name, false);
  next_microsecond();
}

void Runtime::set_memory_fraction(double fraction) { allocator_->set_memory_fraction(fraction, 0); }

uintptr_t Runtime::outside_alloc(size_t bytes, const std::string& library, bool recorded) {
  const std::optional<uintptr_t> address = backend_->reserve(0, bytes);
  if (!address) return 0;
  outside_recorded_ = outside_recorded_ || recorded;
  if (recorded) {
    next_microsecond();
    OutsideAllocation a{0, *address, bytes, OutsideKind::kDevice, "cudaMalloc", library, kNoStackIndex, steady_time_us()};
    outside_live_.push_back(a);
    outside_events_.push_back({OutsideAction::kAlloc, a});
    next_microsecond();
  }
  return *address;
}

void Runtime::begin_pool(MempoolId pool) {
  allocator_->device(0).begin_allocate_to_pool(pool, [](StreamId) { return true; });
}

void Runtime::end_pool(MempoolId pool) { allocator_->device(0).end_allocate_to_pool(pool); }

Outcome Runtime::outcome() const {
  const DeviceStats stats = allocator_->device_stats(0);
  return {out_of_memory_, static_cast<uint64_t>(stats.reserved_bytes[kAggregate].peak),
          static_cast<uint64_t>(stats.allocated_bytes[kAggregate].peak)};
}

Snapshot Runtime::snapshot() {
  SnapshotOptions options;
  if (options_.rank >= 0) {
    options.job.rank = options_.rank;
    options.job.world_size = options_.world_size;
    options.job.local_rank = options_.rank;
  }
  Snapshot s = take_snapshot(*allocator_, recorder_.get(), options);
  if (outside_recorded_) {
    OutsideMemory outside;
    outside.live = outside_live_;
    outside.events = outside_events_;
    outside.recorded_since_us = started_us_;
    s.outside_memory = std::move(outside);
  }
  return s;
}

}  // namespace memsnap::truth
