#include "replay/device_replay.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "allocator/allocator_observer.h"
#include "allocator/caching_allocator.h"
#include "allocator/policy.h"
#include "allocator/simulated_backend.h"
#include "replay/capacity_over_time.h"
#include "replay/recorded_caps.h"
#include "snapshot/segment_pools.h"

namespace memsnap {

bool is_segment_growth(TraceAction action) {
  return action == TraceAction::kSegmentAlloc || action == TraceAction::kSegmentMap;
}
bool is_segment_shrink(TraceAction action) {
  return action == TraceAction::kSegmentFree || action == TraceAction::kSegmentUnmap;
}

namespace {

// Streams no program uses: each deferred free waits on its own, completed at its
// free_completed event.
constexpr StreamId kFirstDeferredStream = StreamId{1} << 63;
constexpr size_t kDefaultCapacity = size_t{80} << 30;


bool erase_one(std::unordered_multiset<uint64_t>& set, uint64_t value) {
  auto it = set.find(value);
  if (it == set.end()) return false;
  set.erase(it);
  return true;
}

class SegmentWatcher final : public AllocatorObserver {
 public:
  void on_segment_alloc(int, const Segment& segment) override {
    sizes.push_back(segment.size);
    addresses.push_back(segment.address);
  }
  void on_segment_free(int, const Segment& segment) override {
    released.insert(segment.address);
    ++frees;
  }
  // Expandable segments: a mapping is a device allocation, an unmapping a release.
  void on_segment_map(int, const Segment&, uintptr_t address, size_t bytes) override {
    sizes.push_back(bytes);
    addresses.push_back(address);
  }
  void on_segment_unmap(int, const Segment&, uintptr_t address, size_t) override {
    released.insert(address);
    ++frees;
  }
  std::vector<uint64_t> sizes;
  std::vector<uint64_t> addresses;
  // Drops the releases left unmatched. A new set rather than clear(), which zeroes every
  // bucket: after one recovery released thousands of segments, clearing the set on each
  // event cost time in proportion to those thousands, event after event.
  void forget_released() {
    if (!released.empty()) std::unordered_multiset<uint64_t>().swap(released);
  }
  std::unordered_multiset<uint64_t> released;  // not yet matched with the trace's
  size_t frees = 0;
};

// Reserved bytes as the recording had them at each event, from the start state and the
// segment events: the peak, and what the allocator could have had at the first OOM.
struct RecordedReserve {
  uint64_t peak = 0;
  std::optional<uint64_t> capacity_at_oom;
  int64_t oom_time_us = 0;
  bool capped = false;  // the device had room at the OOM: a memory cap refused the request
};

RecordedReserve recorded_reserve(const DeviceTrace& trace, const StartState& start,
                                 const AllocatorConfig& recorded, const RecordedCaps& caps) {
  RecordedReserve out;
  int64_t reserved = static_cast<int64_t>(start.reserved_bytes);
  out.peak = start.reserved_bytes;
  for (size_t i = 0; i < trace.size(); ++i) {
    const TraceEntry& e = trace[i];
    if (is_segment_growth(e.action)) reserved += static_cast<int64_t>(e.size);
    if (is_segment_shrink(e.action)) reserved -= static_cast<int64_t>(e.size);
    const auto now = static_cast<uint64_t>(std::max<int64_t>(reserved, 0));
    out.peak = std::max(out.peak, now);
    // An oom entry's address is the device's free bytes then (PyTorch's and memsnap's; 0 when
    // the device was full).
    if (e.action == TraceAction::kOom && !out.capacity_at_oom) {
      const size_t needed = segment_size_for(round_size(std::max<uint64_t>(e.size, 1), recorded),
                                             recorded);
      out.oom_time_us = e.time_us;
      if (caps.known()) {
        // The cap is known: the device's room is what it was, and the replay runs under the cap.
        out.capped = caps.at(i) && now + needed > caps.at(i)->bytes && e.address >= needed;
        out.capacity_at_oom = now + e.address;
        continue;
      }
      out.capped = e.address >= needed;
      // Under a cap not recorded, all that is known is that it was at least the peak so far
      // and below what the request needed on top of the reserved bytes; the replay takes the
      // lower bound, so other settings are not credited with room the recording may not have had.
      out.capacity_at_oom = out.capped ? std::max(out.peak, now) : now + e.address;
    }
  }
  return out;
}

// The settings changes a device's trace records (trace_state.h), in event order.
std::vector<TraceStateChange> settings_changes(const Snapshot& snapshot, int device) {
  std::vector<TraceStateChange> out;
  if (static_cast<size_t>(device) < snapshot.trace_state_changes.size())
    for (const TraceStateChange& change : snapshot.trace_state_changes[static_cast<size_t>(device)])
      if (change.kind == TraceStateKind::kSettings) out.push_back(change);
  return out;
}

// The recorded settings in effect at the trace's first event: the final ones unless the program
// changed them while the trace ran (then the trace starts with the earlier ones).
AllocatorConfig settings_at_start(const std::vector<TraceStateChange>& changes, const AllocatorConfig& recorded) {
  if (changes.empty() || changes.front().event_index != 0) return recorded;
  Result<AllocatorConfig> start = parse_allocator_config(changes.front().value);
  if (!start) return recorded;
  start.value().caching = recorded.caching;
  return start.value();
}

// The settings a replay's allocator is made with: a memory cap comes from the recording's caps
// (RecordedCaps), never from the settings' fraction of the simulated device.
AllocatorConfig without_fraction(AllocatorConfig config) {
  config.per_process_memory_fraction = 1.0;
  return config;
}

class DeviceReplayer {
 public:
  DeviceReplayer(const Snapshot& snapshot, int device, const SnapshotReplayOptions& options,
                 const AllocatorConfig& recorded)
      : trace_(snapshot.device_traces[static_cast<size_t>(device)]),
        options_(options),
        recorded_caching_(recorded.caching),
        settings_changes_(settings_changes(snapshot, device)),
        follows_recording_(without_fraction(options.config) == without_fraction(recorded)),
        start_config_(without_fraction(follows_recording_ ? settings_at_start(settings_changes_, recorded)
                                                          : options.config)),
        caps_(snapshot, device, recorded) {
    const AllocatorConfig recorded_start = settings_at_start(settings_changes_, recorded);
    out_.device = device;
    out_.start = reconstruct_start_state(snapshot, device, recorded_start);
    // A capacity given is the limit asked about: the recording's cap does not apply then.
    if (!options.capacity_bytes && caps_.known()) {
      out_.memory_cap = caps_.at(0);
      out_.memory_cap_changes = caps_.changes();
    }
    for (const SnapshotSegment& s : snapshot.segments) {
      if (s.device != device) continue;
      out_.recorded_final_reserved += s.total_size;
      final_segments_.push_back(&s);
    }
    const RecordedReserve reserve = recorded_reserve(trace_, out_.start, recorded_start, caps_);
    out_.recorded_peak_reserved = reserve.peak;
    size_t capacity = kDefaultCapacity;
    out_.capacity_source = "default";
    if (options.capacity_bytes) {
      capacity = *options.capacity_bytes;
      out_.capacity_source = "given";
    } else if (reserve.capacity_at_oom) {
      capacity = *reserve.capacity_at_oom;
      out_.capacity_source = caps_.known()   ? "reserved + device free at the recorded OOM"
                             : reserve.capped ? "memory cap at the recorded OOM"
                                              : "reserved + device free at the recorded OOM";
    } else {
      for (const DeviceInfo& info : snapshot.devices)
        if (info.index == device && info.total_memory > 0) {
          capacity = info.total_memory;
          out_.capacity_source = "recorded device";
        }
      capacity = std::max<size_t>(capacity, reserve.peak);
    }
    out_.capacity_bytes = capacity;
    out_.least_capacity_bytes = out_.most_capacity_bytes = capacity;
    if (!options.capacity_bytes && reserve.capacity_at_oom && !reserve.capped) {
      capacity_over_time_ = std::make_unique<CapacityOverTime>(snapshot, device, trace_, capacity, reserve.oom_time_us);
      out_.capacity_over_time = capacity_over_time_->description();
      out_.least_capacity_bytes = capacity_over_time_->least_bytes();
      out_.most_capacity_bytes = capacity_over_time_->most_bytes();
    }
    // Each allocation in a private pool's segment replays in that pool (segment_pools.h).
    allocation_pools_ = SegmentPools(snapshot, device).allocation_pools(trace_);
    // The completions and releases right before each recorded oom are its own recovery's.
    in_recovery_.assign(trace_.size(), false);
    for (size_t i = trace_.size(); i-- > 0;) {
      if (trace_[i].action != TraceAction::kOom) continue;
      for (size_t j = i; j-- > 0;) {
        const TraceAction a = trace_[j].action;
        if (a != TraceAction::kFreeCompleted && !is_segment_shrink(a)) break;
        in_recovery_[j] = true;
      }
    }
    for (const TraceEntry& e : trace_) {
      if (is_segment_growth(e.action)) {
        out_.recorded_segment_allocs.push_back(e.size);
        recorded_segment_addresses_.push_back(e.address);
      }
      if (is_segment_shrink(e.action)) ++out_.recorded_segment_frees;
      has_free_completed_ = has_free_completed_ || e.action == TraceAction::kFreeCompleted;
    }
  }

  DeviceReplay run() {
    SimulatedBackend::Options device;
    size_t end = options_.stop_after_entry ? std::min(*options_.stop_after_entry + 1, trace_.size())
                                           : trace_.size();
    // The state right after a segment_alloc (or segment_map) holds the new memory, free: the
    // replay reserves it for the allocation that follows, so it runs through that allocation
    // and gives it back.
    std::optional<size_t> undo_alloc;
    if (options_.stop_after_entry && end < trace_.size() && is_segment_growth(trace_[end - 1].action))
      for (size_t j = end; j < trace_.size() && !is_segment_growth(trace_[j].action); ++j)
        if (trace_[j].action == TraceAction::kAlloc) {
          undo_alloc = j;
          end = j + 1;
          break;
        }
    device.capacity_bytes = out_.capacity_bytes;
    device.events_complete_immediately = false;  // deferred frees complete when the trace says
    backend_ = std::make_shared<SimulatedBackend>(device);
    CachingAllocator allocator(backend_, start_config_);
    allocator_ = &allocator;
    restore_start_state();
    // After the start state: the cap is checked when memory is reserved, and what the trace
    // began with was reserved before.
    const bool capped = !options_.capacity_bytes && caps_.known();
    size_t next_cap = 0;
    allocator.set_observer(&watcher_);
    size_t next_change = 0;
    size_t failed_before = 0;
    std::optional<CapacityOverTime::Walk> capacity_walk;
    if (capacity_over_time_ && capacity_over_time_->varies()) capacity_walk.emplace(*capacity_over_time_);
    for (index_ = 0; index_ < end; ++index_) {
      const TraceEntry& e = trace_[index_];
      ++out_.events;
      if (capacity_walk) backend_->set_capacity_bytes(capacity_walk->at(e.time_us));
      while (next_change < settings_changes_.size() && settings_changes_[next_change].event_index <= index_)
        change_settings(settings_changes_[next_change++]);
      for (; capped && next_cap < caps_.list().size() && caps_.list()[next_cap].first <= index_; ++next_cap)
        allocator.device(0).set_memory_cap(caps_.list()[next_cap].second);
      // The replay's own releases are matched with the recorded ones that follow the event
      // which made them (a free with caching off, an allocation's recovery).
      if (!is_segment_shrink(e.action)) watcher_.forget_released();
      switch (e.action) {
        case TraceAction::kAlloc: alloc(e); break;
        case TraceAction::kFreeRequested: free_requested(e); break;
        case TraceAction::kFreeCompleted: free_completed(e); break;
        case TraceAction::kSegmentFree:
        case TraceAction::kSegmentUnmap: segment_released(e); break;
        case TraceAction::kOom: oom(e); break;
        default: break;  // segment_alloc/map: the replay reserves for itself; snapshot
      }
      if (options_.after_entry) {
        // An allocation that failed here, or a recorded out-of-memory error that fails again.
        const size_t failures = out_.failed_allocs + out_.reproduced_ooms;
        const bool failed = failures > failed_before;
        failed_before = failures;
        if (!options_.after_entry(out_.device, index_, allocator.device_stats(0), failed)) break;
      }
    }
    allocator.set_observer(nullptr);
    if (undo_alloc) {
      if (auto it = live_.find(trace_[*undo_alloc].address); it != live_.end()) {
        holders_.erase(reinterpret_cast<uint64_t>(it->second));
        allocator.deallocate(it->second);
        live_.erase(it);
      }
    }
    out_.stats = allocator.device_stats(0);
    if (options_.stop_after_entry) {
      out_.replayed_segment_allocs = watcher_.sizes;
      out_.state_segments = state_segments(allocator.device(0).segment_records());
      allocator_ = nullptr;
      return std::move(out_);
    }
    out_.replayed_segment_allocs = watcher_.sizes;  // a copy: the final comparison still pairs them
    out_.replayed_segment_frees = watcher_.frees;
    compare_segment_allocs();
    compare_final_state(allocator.device(0).segment_records());
    if (options_.check_invariants) out_.invariant_problems = allocator.check_invariants();
    allocator_ = nullptr;
    return std::move(out_);
  }

 private:
  // Routes one request to a private pool as the recorded run did, keeping the pool's use
  // count at one (the graph or MemPool that holds it) until its memory is seen released.
  void* allocate_in_pool(uint64_t size, StreamId stream, MempoolId pool) {
    DeviceCachingAllocator& device = allocator_->device(0);
    if (!pools_in_use_.count(pool)) {
      try {
        device.create_or_incref_pool(pool);
        pools_in_use_.insert(pool);
      } catch (const std::invalid_argument&) {
        return allocator_->allocate(size, 0, stream);  // released, still holding memory
      }
    }
    device.begin_allocate_to_pool(pool, [](StreamId) { return true; });
    struct EndScope {
      DeviceCachingAllocator& device;
      MempoolId pool;
      ~EndScope() {
        device.end_allocate_to_pool(pool);
        device.release_pool(pool);
      }
    } end{device, pool};
    return allocator_->allocate(size, 0, stream);
  }

  // The recording released a private pool's segment: the pool's graphs or MemPool were gone.
  // Every pool a run of releases touches is let go before the first of them is replayed, so
  // the empty_cache that stands for the run frees them all.
  void release_pools_of_run() {
    std::map<uint64_t, const SegmentRecord*> private_segments;  // by address
    const std::vector<SegmentRecord> records = allocator_->device(0).segment_records();
    for (const SegmentRecord& r : records)
      if (!r.pool_id.is_global()) private_segments[r.address] = &r;
    for (size_t j = index_; j < trace_.size() && is_segment_shrink(trace_[j].action); ++j) {
      auto it = private_segments.upper_bound(trace_[j].address);
      if (it == private_segments.begin()) continue;
      const SegmentRecord& r = *std::prev(it)->second;
      if (trace_[j].address - r.address >= r.size) continue;
      if (pools_in_use_.erase(r.pool_id)) allocator_->device(0).release_pool(r.pool_id);
    }
  }

  // The program changed the allocator's settings before this event. Under the recorded settings
  // the replay takes what the recording had from here on; under other settings, what the
  // program's request does to them (as PyTorch applies it), or the recorded result when the
  // request is not known. The state the trace starts in (event 0, no request) is the replay's
  // own starting settings.
  void change_settings(const TraceStateChange& change) {
    if (change.event_index == 0 && change.request.empty()) return;
    const AllocatorConfig current = allocator_->config();
    Result<AllocatorConfig> next = follows_recording_ || change.request.empty()
                                       ? parse_allocator_config(change.value)
                                       : update_allocator_config(current, change.request);
    if (!next) next = parse_allocator_config(change.value);
    if (!next) {
      out_.start.problems.push_back("a recorded settings change cannot be read: " + next.error());
      return;
    }
    next.value().caching = current.caching;
    allocator_->set_config(next.value(), change.request);
    ++out_.settings_changes;
  }

  void restore_start_state() {
    for (SegmentRecord segment : out_.start.segments) {
      segment.device = 0;
      backend_->prefer_address_for_next_reserve(0, segment.address);
      try {
        for (void* ptr : allocator_->restore_segment(segment))
          live_[reinterpret_cast<uintptr_t>(ptr)] = ptr;
      } catch (const std::invalid_argument& error) {
        out_.start.problems.push_back(std::string("could not restore a starting segment: ") +
                                      error.what());
      }
    }
    backend_->prefer_address_for_next_reserve(0, 0);
    for (const SegmentRecord& segment : out_.start.segments)
      if (!segment.pool_id.is_global()) pools_in_use_.insert(segment.pool_id);  // restored with one use
  }

  void alloc(const TraceEntry& e) {
    ++out_.allocs;
    // The recorded run's next new segment got this address; offer it to the replay's.
    const size_t next_segment = watcher_.sizes.size();
    if (next_segment < recorded_segment_addresses_.size())
      backend_->prefer_address_for_next_reserve(0, recorded_segment_addresses_[next_segment]);
    void* ptr = nullptr;
    try {
      const auto pool = allocation_pools_.find(index_);
      ptr = pool == allocation_pools_.end()
                ? allocator_->allocate(std::max<uint64_t>(e.size, 1), 0, e.stream)
                : allocate_in_pool(std::max<uint64_t>(e.size, 1), e.stream, pool->second);
    } catch (const OutOfMemoryError&) {
      ++out_.failed_allocs;
      failed_.insert(e.address);
    }
    backend_->prefer_address_for_next_reserve(0, 0);
    if (ptr == nullptr) return;
    holders_[reinterpret_cast<uint64_t>(ptr)] = {e.stack, e.size};
    auto [it, fresh] = live_.try_emplace(e.address, ptr);
    if (!fresh) {
      // Allocated twice without a free between: the trace lost events. The older block
      // stays allocated, as it would have leaked.
      ++out_.unknown_frees;
      it->second = ptr;
    }
  }

  bool completes_next(const TraceEntry& e) const {
    if (index_ + 1 >= trace_.size()) return false;
    const TraceEntry& next = trace_[index_ + 1];
    return next.action == TraceAction::kFreeCompleted && next.address == e.address;
  }

  void free_requested(const TraceEntry& e) {
    auto it = live_.find(e.address);
    if (it == live_.end()) {
      if (!erase_one(failed_, e.address)) ++out_.unknown_frees;
      return;
    }
    void* ptr = it->second;
    live_.erase(it);
    ++out_.frees;
    if (completes_next(e) || !has_free_completed_) {
      allocator_->deallocate(ptr);
      if (completes_next(e)) ++index_, ++out_.events;  // its free_completed is this free
      return;
    }
    // Completed later: the recording's block waited for another stream's work.
    const StreamId stream = next_deferred_stream_++;
    allocator_->record_stream(ptr, stream);
    allocator_->deallocate(ptr);
    deferred_[e.address] = stream;
    ++out_.deferred_frees;
  }

  void free_completed(const TraceEntry& e) {
    if (auto it = deferred_.find(e.address); it != deferred_.end()) {
      // Completed by the failing request's own recovery (it waits for every stream before it
      // gives up): pending when the request searched the cache, as the replay's request finds it.
      if (in_recovery_[index_]) {
        awaiting_oom_.push_back(it->second);
        deferred_.erase(it);
        return;
      }
      backend_->complete_events(it->second);
      allocator_->device(0).collect_completed_frees();  // reusable from here on, as recorded
      deferred_.erase(it);
      return;
    }
    if (auto it = live_.find(e.address); it != live_.end()) {
      // Freed before the trace began, completed in it.
      allocator_->deallocate(it->second);
      live_.erase(it);
      ++out_.frees;
      return;
    }
    if (!erase_one(failed_, e.address)) ++out_.unknown_frees;
  }

  // A release the replay made itself is matched. A run of releases right before a new
  // segment or an oom may be that allocation's own recovery or the program's empty_cache
  // just before it; either way the recorded run let go of exactly these segments, so the
  // replay releases the same ones (when it holds them whole), and the allocation that follows
  // recovers further by itself if it must. Releases followed by anything else are the
  // program's empty_cache, which releases everything cached.
  void segment_released(const TraceEntry& e) {
    if (!pools_in_use_.empty() && (index_ == 0 || !is_segment_shrink(trace_[index_ - 1].action)))
      release_pools_of_run();
    // A recording without caching released each segment at its block's free, not at the
    // program's empty_cache: what the replay releases is its own policy's business.
    if (!recorded_caching_) {
      erase_one(watcher_.released, e.address);
      return;
    }
    TraceEntry released = e;
    if (e.action == TraceAction::kSegmentUnmap) released.address = to_replay_address(e.address);
    release_as_recorded(released);
  }

  // An expandable segment's address space may lie elsewhere in the replay than it did in the
  // recording (its size follows the device's memory, which a snapshot may not record, so the
  // recorded place can be taken). Pages keep their offsets, so a recorded address translates
  // by the offset between the recorded and the replayed mapping of the nearest page mapped at
  // or below it; mappings are paired in order while their sizes agree.
  uint64_t to_replay_address(uint64_t recorded) {
    const size_t paired = std::min({recorded_segment_addresses_.size(), watcher_.addresses.size(),
                                    watcher_.sizes.size()});
    for (; paired_mappings_ < paired; ++paired_mappings_) {
      const size_t i = paired_mappings_;
      if (out_.recorded_segment_allocs[i] != watcher_.sizes[i]) {
        paired_mappings_ = SIZE_MAX;  // out of step: no more pairs can be trusted
        break;
      }
      address_offsets_[recorded_segment_addresses_[i]] =
          watcher_.addresses[i] - recorded_segment_addresses_[i];
    }
    auto it = address_offsets_.upper_bound(recorded);
    if (it == address_offsets_.begin()) return recorded;
    return recorded + std::prev(it)->second;
  }

  void release_as_recorded(const TraceEntry& e) {
    if (erase_one(watcher_.released, e.address)) return;
    size_t next = index_ + 1;
    while (next < trace_.size() && is_segment_shrink(trace_[next].action)) ++next;
    if (next < trace_.size() && (is_segment_growth(trace_[next].action) ||
                                 trace_[next].action == TraceAction::kOom)) {
      if (allocator_->release_cached_segment(0, reinterpret_cast<void*>(e.address)))
        erase_one(watcher_.released, e.address);
      return;
    }
    allocator_->empty_cache();
    ++out_.empty_cache_calls;
    erase_one(watcher_.released, e.address);
  }

  void oom(const TraceEntry& e) {
    ++out_.recorded_ooms;
    try {
      void* ptr = allocator_->allocate(std::max<uint64_t>(e.size, 1), 0, e.stream);
      allocator_->deallocate(ptr);  // the recorded program never got it
    } catch (const OutOfMemoryError&) {
      ++out_.reproduced_ooms;
    }
    // What the recorded recovery waited for is done now, whatever the replay's request did.
    for (StreamId stream : awaiting_oom_) backend_->complete_events(stream);
    if (!awaiting_oom_.empty()) allocator_->device(0).collect_completed_frees();
    awaiting_oom_.clear();
  }

  void compare_segment_allocs() {
    const auto& recorded = out_.recorded_segment_allocs;
    const auto& replayed = out_.replayed_segment_allocs;
    const size_t common = std::min(recorded.size(), replayed.size());
    for (size_t i = 0; i < common; ++i) {
      if (recorded[i] == replayed[i]) {
        ++out_.matched_segment_allocs;
      } else if (out_.first_segment_mismatch < 0) {
        out_.first_segment_mismatch = static_cast<int64_t>(i);
      }
    }
    if (out_.first_segment_mismatch < 0 && recorded.size() != replayed.size())
      out_.first_segment_mismatch = static_cast<int64_t>(common);
  }

  // The replay's segments as snapshot segments: each block with the stack of the allocation
  // that holds it (one made in the trace, or for blocks live at the start, the stack the
  // trace's first free of it or the final snapshot gives), free blocks with the allocation
  // that last held their first bytes.
  std::vector<SnapshotSegment> state_segments(const std::vector<SegmentRecord>& records) {
    std::unordered_map<uint64_t, StackIndex> start_stacks;
    for (const TraceEntry& e : trace_)
      if ((e.action == TraceAction::kFreeCompleted || e.action == TraceAction::kFreeRequested) &&
          e.stack != kNoStackIndex)
        start_stacks.try_emplace(e.address, e.stack);
    for (const SnapshotSegment* s : final_segments_)
      for (const SnapshotBlock& b : s->blocks)
        if (b.state != BlockState::kInactive) start_stacks.try_emplace(b.address, b.stack);
    std::vector<SnapshotSegment> out;
    for (const SegmentRecord& r : records) {
      SnapshotSegment& s = out.emplace_back();
      s.device = out_.device;
      s.address = r.address;
      s.total_size = r.size;
      s.stream = r.stream;
      s.segment_type = r.small_pool ? "small" : "large";
      s.is_expandable = r.expandable;
      s.segment_pool_id = r.pool_id;
      for (const BlockRecord& b : r.blocks) {
        SnapshotBlock& block = s.blocks.emplace_back();
        block.address = b.address;
        block.size = b.size;
        block.state = b.state;
        auto held = holders_.find(b.address);
        if (b.state != BlockState::kInactive) {
          block.requested_size = b.requested_size;
          if (held != holders_.end()) block.stack = held->second.first;
          else if (auto start = start_stacks.find(b.address); start != start_stacks.end()) block.stack = start->second;
          s.active_size += b.size;
          s.requested_size += b.requested_size;
          if (b.state == BlockState::kActiveAllocated) s.allocated_size += b.size;
        } else if (held != holders_.end()) {
          block.history.push_back({b.address, held->second.second, held->second.first});
        }
      }
    }
    return out;
  }

  void compare_final_state(const std::vector<SegmentRecord>& replayed) {
    out_.final_segments_replayed = replayed.size();
    std::map<uint64_t, const SegmentRecord*> by_address;
    for (const SegmentRecord& r : replayed) by_address[r.address] = &r;
    for (const SnapshotSegment* s : final_segments_) {
      ++out_.final_segments_recorded;
      const uint64_t offset = s->is_expandable ? to_replay_address(s->address) - s->address : 0;
      auto it = by_address.find(s->address + offset);
      if (it == by_address.end()) continue;
      const SegmentRecord& r = *it->second;
      bool same = r.size == s->total_size && r.blocks.size() == s->blocks.size() &&
                  r.pool_id == s->segment_pool_id;
      for (size_t i = 0; same && i < r.blocks.size(); ++i) {
        const BlockRecord& a = r.blocks[i];
        const SnapshotBlock& b = s->blocks[i];
        same = a.address == b.address + offset && a.size == b.size &&
               (a.state == BlockState::kInactive) == (b.state == BlockState::kInactive);
      }
      if (same) ++out_.final_segments_matched;
    }
  }

  const DeviceTrace& trace_;
  const SnapshotReplayOptions& options_;
  const bool recorded_caching_;  // the recording cached freed blocks (its settings said so)
  const std::vector<TraceStateChange> settings_changes_;  // the program's, in event order
  const bool follows_recording_;  // replaying under the recorded settings
  const AllocatorConfig start_config_;  // the replay's settings at the first event
  const RecordedCaps caps_;
  std::vector<const SnapshotSegment*> final_segments_;
  std::unordered_map<size_t, MempoolId> allocation_pools_;  // trace index -> private pool
  std::set<MempoolId> pools_in_use_;  // pools the replay holds one use of
  DeviceReplay out_;
  std::unique_ptr<CapacityOverTime> capacity_over_time_;  // with a capacity from a recorded OOM
  std::shared_ptr<SimulatedBackend> backend_;
  CachingAllocator* allocator_ = nullptr;
  SegmentWatcher watcher_;
  std::vector<uint64_t> recorded_segment_addresses_;
  std::map<uint64_t, uint64_t> address_offsets_;  // recorded mapping -> replay's minus it
  size_t paired_mappings_ = 0;
  bool has_free_completed_ = false;
  size_t index_ = 0;
  std::unordered_map<uint64_t, void*> live_;         // recorded address -> replay's block
  // Replay address -> the stack and request of the allocation that last held it.
  std::unordered_map<uint64_t, std::pair<StackIndex, uint64_t>> holders_;
  std::unordered_map<uint64_t, StreamId> deferred_;  // recorded address -> its wait stream
  std::vector<bool> in_recovery_;        // by entry: part of the run of events a recorded oom's recovery made
  std::vector<StreamId> awaiting_oom_;   // wait streams the next oom's recovery completes
  std::unordered_multiset<uint64_t> failed_;            // allocations the replay could not make
  StreamId next_deferred_stream_ = kFirstDeferredStream;
};

}  // namespace

DeviceReplay replay_device(const Snapshot& snapshot, int device, const SnapshotReplayOptions& options,
                           const AllocatorConfig& recorded) {
  return DeviceReplayer(snapshot, device, options, recorded).run();
}

}  // namespace memsnap
