// Blocks freed during a CUDA graph capture while other streams used them
// (Tensor.record_stream): events cannot be recorded or queried during a capture, so such a
// block waits. By default it waits for the capture's end; with
// graph_capture_record_stream_reuse:True (PyTorch 2.11) it may serve the same capture again
// once the capture's graph orders all later work after its last uses.
//
// When such a block is freed, the terminal nodes of its allocation stream and of every stream
// that used it are its "free markers": each use of the block lies at or before one of them. A
// later request on the block's stream may take it when every marker is an ancestor of (or is)
// one of that stream's current terminals: the work the request's caller queues next runs after
// all of them. The ancestors found are kept per capture and stream, so the graph is walked
// once however many requests ask.
//
// At the capture's end the blocks still waiting get events for the streams they were used on
// before the capture (uses recorded during it ended with it: the capture joined every stream
// back), as PyTorch does; a block used by capture streams only is free at once.
#include <algorithm>
#include <unordered_set>

#include "allocator/device_caching_allocator.h"

namespace memsnap {

void DeviceCachingAllocator::note_stream_use_in_capture(Block* block, StreamId stream) {
  std::vector<StreamId>& streams = capture_stream_uses_[block];
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
}

// The terminals of the block's streams, or none (wait for the capture's end) when one of them
// is not capturing.
std::vector<uintptr_t> DeviceCachingAllocator::free_markers(const Block* block) {
  std::vector<uintptr_t> markers;
  std::vector<StreamId> streams = block->stream_uses;
  streams.push_back(block->stream);
  for (StreamId stream : streams) {
    const DeviceBackend::CaptureState state = backend_.capture_state(device_, stream);
    if (!state.capturing) return {};
    for (uintptr_t node : state.terminals)
      if (std::find(markers.begin(), markers.end(), node) == markers.end()) markers.push_back(node);
  }
  return markers;
}

// A block freed during a capture, used on other streams: no event may be recorded now, so it
// stays active (event_count 1, no event yet) until the capture's graph or its end frees it.
void DeviceCachingAllocator::defer_events(Block* block) {
  block->event_count = 1;
  DeferredFree deferred{block, {}};
  if (config_.graph_capture_record_stream_reuse) deferred.markers = free_markers(block);
  frees_awaiting_events_.push_back(std::move(deferred));
}

void DeviceCachingAllocator::free_blocks_safe_in_capture(StreamId stream) {
  const DeviceBackend::CaptureState state = backend_.capture_state(device_, stream);
  if (!state.capturing || state.terminals.empty()) return;
  if (!capture_reuse_.count(state.capture_id)) {
    // The capture's graph is walked for the pool capturing on this stream (the last begun
    // whose filter accepts it, as requests are routed).
    const auto pool = std::find_if(allocating_to_.rbegin(), allocating_to_.rend(),
                                   [&](const auto& entry) { return entry.second(stream); });
    if (pool == allocating_to_.rend()) return;
    pool_capture_ids_[pool->first->id] = state.capture_id;
    capture_reuse_[state.capture_id];
  }
  std::unordered_set<uintptr_t>& ancestors = capture_reuse_[state.capture_id][stream];
  std::vector<uintptr_t> to_visit = state.terminals;
  while (!to_visit.empty()) {
    const uintptr_t node = to_visit.back();
    to_visit.pop_back();
    if (!ancestors.insert(node).second) continue;
    for (uintptr_t parent : backend_.node_dependencies(device_, node)) to_visit.push_back(parent);
  }
  std::vector<Block*> reusable;
  std::erase_if(frees_awaiting_events_, [&](const DeferredFree& deferred) {
    if (deferred.markers.empty() || deferred.block->stream != stream) return false;
    for (uintptr_t marker : deferred.markers)
      if (!ancestors.count(marker)) return false;
    reusable.push_back(deferred.block);
    return true;
  });
  for (Block* block : reusable) {
    // The graph orders the block's uses before any later work: no event is needed.
    block->stream_uses.clear();
    capture_stream_uses_.erase(block);
    block->event_count = 0;
    free_block(block);
  }
}

void DeviceCachingAllocator::forget_capture_of(MempoolId pool) {
  auto it = pool_capture_ids_.find(pool);
  if (it == pool_capture_ids_.end()) return;
  capture_reuse_.erase(it->second);
  pool_capture_ids_.erase(it);
}

// Blocks freed during a capture get their events now that none is underway.
void DeviceCachingAllocator::insert_deferred_events() {
  std::vector<DeferredFree> deferred = std::move(frees_awaiting_events_);
  frees_awaiting_events_.clear();
  for (DeferredFree& entry : deferred) {
    Block* block = entry.block;
    if (auto uses = capture_stream_uses_.find(block); uses != capture_stream_uses_.end()) {
      std::erase_if(block->stream_uses, [&](StreamId stream) {
        return std::find(uses->second.begin(), uses->second.end(), stream) != uses->second.end();
      });
      capture_stream_uses_.erase(uses);
    }
    block->event_count = 0;
    insert_events(block);
    if (block->event_count == 0) free_block(block);
  }
}

}  // namespace memsnap
