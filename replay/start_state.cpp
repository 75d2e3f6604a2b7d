#include "replay/start_state.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_map>

#include "allocator/device_stats.h"
#include "allocator/policy.h"

namespace memsnap {
namespace {

constexpr size_t kMaxProblems = 20;

struct LiveBlock {
  uint64_t address = 0;
  uint64_t size = 0;  // 0: freed in the trace, size to be inferred
  uint64_t requested = 0;
};

class Reconstruction {
 public:
  Reconstruction(const Snapshot& snapshot, int device, const AllocatorConfig& config)
      : snapshot_(snapshot), device_(device), config_(config) {
    static const DeviceTrace kNoTrace;
    trace_ = static_cast<size_t>(device) < snapshot.device_traces.size()
                 ? &snapshot.device_traces[static_cast<size_t>(device)]
                 : &kNoTrace;
  }

  StartState run() {
    find_start_segments();
    find_live_blocks();
    for (auto& [address, segment] : segments_) lay_out(segment);
    for (auto& [address, segment] : segments_) {
      state_.reserved_bytes += segment.record.size;
      state_.segments.push_back(std::move(segment.record));
    }
    if (problem_count_ > kMaxProblems)
      state_.problems.push_back("... and " + std::to_string(problem_count_ - kMaxProblems) +
                                " more");
    return std::move(state_);
  }

 private:
  struct StartSegment {
    SegmentRecord record;  // blocks filled in by lay_out
    std::vector<LiveBlock> live;
  };

  void problem(std::string text) {
    if (++problem_count_ <= kMaxProblems) state_.problems.push_back(std::move(text));
  }

  bool on_device(const SnapshotSegment& segment) const { return segment.device == device_; }

  void add_segment(uint64_t address, uint64_t size, uint64_t stream, bool small,
                   MempoolId pool = {}) {
    StartSegment& segment = segments_[address];
    segment.record.pool_id = pool;
    segment.record.device = device_;
    segment.record.address = address;
    segment.record.size = size;
    segment.record.stream = stream;
    segment.record.small_pool = small;
  }

  // A segment existed at the start when the trace frees it before allocating it, or when it
  // exists at the end without any segment event.
  void find_start_segments() {
    std::unordered_map<uint64_t, TraceAction> first;
    for (const TraceEntry& e : *trace_) {
      if (e.action != TraceAction::kSegmentAlloc && e.action != TraceAction::kSegmentFree &&
          e.action != TraceAction::kSegmentMap && e.action != TraceAction::kSegmentUnmap)
        continue;
      if (!first.try_emplace(e.address, e.action).second) continue;
      if (e.action == TraceAction::kSegmentFree)
        add_segment(e.address, e.size, e.stream, e.size <= kSmallBuffer);
    }
    check_expandable_pages_start_unmapped();
    for (const SnapshotSegment& s : snapshot_.segments) {
      if (!on_device(s) || s.is_expandable) continue;
      if (first.contains(s.address)) continue;
      add_segment(s.address, s.total_size, s.stream, s.is_small_pool(), s.segment_pool_id);
    }
  }

  // Expandable segments are replayed from nothing mapped: the pages mapped at the end, less
  // those the trace maps, plus those it unmaps (walking it backwards), must be none.
  void check_expandable_pages_start_unmapped() {
    std::map<uint64_t, uint64_t> mapped;  // start -> end, disjoint
    auto remove = [&](uint64_t start, uint64_t end) {
      if (start >= end) return;  // empty, or a hostile size that wraps
      auto it = mapped.upper_bound(start);
      if (it != mapped.begin()) --it;
      while (it != mapped.end() && it->first < end) {
        const auto [a, b] = *it;
        it = mapped.erase(it);
        if (b <= start) continue;
        if (a < start) mapped.emplace(a, start);
        if (b > end) mapped.emplace(end, b);
      }
    };
    auto add = [&](uint64_t start, uint64_t end) {
      if (start >= end) return;
      remove(start, end);
      mapped.emplace(start, end);
    };
    for (const SnapshotSegment& s : snapshot_.segments)
      if (on_device(s) && s.is_expandable) add(s.address, s.address + s.total_size);
    for (auto e = trace_->rbegin(); e != trace_->rend(); ++e) {
      if (e->action == TraceAction::kSegmentMap) remove(e->address, e->address + e->size);
      if (e->action == TraceAction::kSegmentUnmap) add(e->address, e->address + e->size);
    }
    if (mapped.empty()) return;
    uint64_t bytes = 0;
    for (const auto& [start, end] : mapped) bytes += end - start;
    problem(std::to_string(bytes) + " bytes of expandable-segment pages (from " +
            format_hex(mapped.begin()->first) +
            ") were mapped before the trace began; the replay starts them unmapped");
  }

  StartSegment* segment_holding(uint64_t address) {
    auto it = segments_.upper_bound(address);
    if (it == segments_.begin()) return nullptr;
    --it;
    const SegmentRecord& r = it->second.record;
    return address - r.address < r.size ? &it->second : nullptr;
  }

  // A block was live at the start when its first event is a free, or when it is live at the
  // end and the trace never allocated it.
  void find_live_blocks() {
    std::unordered_map<uint64_t, std::pair<TraceAction, uint64_t>> first;  // action, size
    for (const TraceEntry& e : *trace_) {
      if (e.action != TraceAction::kAlloc && e.action != TraceAction::kFreeRequested &&
          e.action != TraceAction::kFreeCompleted)
        continue;
      first.try_emplace(e.address, e.action, e.size);
    }
    std::vector<LiveBlock> live;
    for (const auto& [address, entry] : first)
      if (entry.first != TraceAction::kAlloc) live.push_back({address, 0, entry.second});
    for (const SnapshotSegment& s : snapshot_.segments) {
      if (!on_device(s) || s.is_expandable) continue;
      for (const SnapshotBlock& b : s.blocks)
        if (b.state != BlockState::kInactive && !first.contains(b.address))
          live.push_back({b.address, b.size, b.requested_size});
    }
    std::sort(live.begin(), live.end(),
              [](const LiveBlock& a, const LiveBlock& b) { return a.address < b.address; });
    for (const LiveBlock& block : live) {
      StartSegment* segment = segment_holding(block.address);
      if (segment == nullptr) {
        problem("the block at " + format_hex(block.address) + " was live before the trace began (" +
                (block.size ? "it is live at the end and never allocated in the trace"
                            : "the trace frees it without allocating it") +
                ") but lies in no segment that existed then");
        continue;
      }
      segment->live.push_back(block);
    }
  }

  // Live blocks in address order with free blocks between them; sizes of blocks freed in the
  // trace come from their requests and the split rules.
  void lay_out(StartSegment& segment) {
    SegmentRecord& r = segment.record;
    const uint64_t end = r.address + r.size;
    uint64_t cursor = r.address;
    for (size_t i = 0; i < segment.live.size(); ++i) {
      const LiveBlock& block = segment.live[i];
      const uint64_t next = i + 1 < segment.live.size() ? segment.live[i + 1].address : end;
      if (block.address < cursor) {
        problem("the live blocks at " + format_hex(block.address) + " and before it overlap");
        continue;
      }
      uint64_t size = block.size;
      if (size == 0) {
        size = round_size(std::max<uint64_t>(block.requested, 1), config_);
        if (size <= next - block.address && next - block.address > size &&
            !should_split(next - block.address, size, r.small_pool, config_))
          size = next - block.address;
      }
      if (size > next - block.address) {
        problem("the block at " + format_hex(block.address) + " (" + std::to_string(size) +
                " bytes) runs into " + (next == end ? "the end of its segment" : "the next block"));
        continue;
      }
      if (block.address > cursor)
        r.blocks.push_back({cursor, block.address - cursor, 0, BlockState::kInactive});
      r.blocks.push_back({block.address, size, std::min<uint64_t>(block.requested, size),
                          BlockState::kActiveAllocated});
      cursor = block.address + size;
      ++state_.live_blocks;
      state_.live_bytes += size;
    }
    if (cursor < end) r.blocks.push_back({cursor, end - cursor, 0, BlockState::kInactive});
  }

  const Snapshot& snapshot_;
  const int device_;
  const AllocatorConfig& config_;
  const DeviceTrace* trace_ = nullptr;
  std::map<uint64_t, StartSegment> segments_;
  StartState state_;
  size_t problem_count_ = 0;
};

}  // namespace

StartState reconstruct_start_state(const Snapshot& snapshot, int device,
                                   const AllocatorConfig& recorded) {
  return Reconstruction(snapshot, device, recorded).run();
}

}  // namespace memsnap
