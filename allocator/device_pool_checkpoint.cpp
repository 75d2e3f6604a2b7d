// Checkpoints of a private pool (PoolCheckpoint): what CUDA graph trees save after recording a
// graph and put back before running another, following PyTorch's setCheckpointPoolState: end
// every allocation in the pool, allocate every block of each checkpointed segment in address
// order (cut exactly as checkpointed), then free the blocks the checkpoint had free (a block
// then waiting for other streams is free in the checkpoint, as PyTorch counts it).
#include <stdexcept>

#include "allocator/device_caching_allocator.h"

namespace memsnap {
namespace {

[[noreturn]] void refuse_checkpoint(const std::string& why, MempoolId pool) {
  throw std::invalid_argument("pool " + to_string(pool) + ": " + why);
}

}  // namespace

PoolCheckpoint DeviceCachingAllocator::checkpoint_pool(MempoolId pool) const {
  PoolCheckpoint checkpoint{pool, {}};
  {
    AllocatorLockGuard lock(mutex_);
    const PrivatePool* found = find_pool(pool);
    if (found == nullptr) refuse_checkpoint("no such private pool", pool);
    if (found->use_count == 0) refuse_checkpoint("released; nothing to checkpoint", pool);
  }
  for (SegmentRecord& record : segment_records()) {
    if (record.pool_id != pool) continue;
    if (record.expandable) refuse_checkpoint("checkpoints of expandable segments are not supported", pool);
    checkpoint.segments.push_back(std::move(record));
  }
  return checkpoint;
}

PoolRestore DeviceCachingAllocator::restore_pool(const PoolCheckpoint& checkpoint) {
  AllocatorLockGuard lock(mutex_);
  const MempoolId id = checkpoint.pool;
  const PrivatePool* found = find_pool(id);
  if (found == nullptr) refuse_checkpoint("no such private pool", id);
  if (found->use_count == 0) refuse_checkpoint("released; it cannot be restored", id);
  // Everything is checked before anything changes.
  std::vector<Segment*> targets;
  for (const SegmentRecord& record : checkpoint.segments) {
    const auto segment = segments_.find(record.address);
    if (segment == segments_.end() || segment->second->pool_id != id ||
        segment->second->size != record.size || segment->second->expandable)
      refuse_checkpoint("a checkpointed segment is not one of the pool's now", id);
    uint64_t covered = 0;
    bool previous_free = false;
    for (const BlockRecord& block : record.blocks) {
      if (block.size == 0 || block.size % kMinBlockSize != 0 || block.address != record.address + covered)
        refuse_checkpoint("a checkpointed segment's blocks do not tile it", id);
      const bool free = block.state != BlockState::kActiveAllocated;
      if (free && previous_free) refuse_checkpoint("a checkpointed segment has two free blocks side by side", id);
      previous_free = free;
      covered += block.size;
    }
    if (covered != record.size || record.blocks.empty())
      refuse_checkpoint("a checkpointed segment's blocks do not tile it", id);
    targets.push_back(segment->second.get());
  }
  std::vector<Block*> live;
  for (const auto& [address, segment] : segments_) {
    if (segment->pool_id != id) continue;
    for (Block* block = segment->head; block != nullptr; block = block->next) {
      if (block->allocated) live.push_back(block);
      else if (!block->is_free() && block->mapped) refuse_checkpoint("a freed block still waits for other streams", id);
    }
  }

  PoolRestore restore;
  for (Block* block : live) {
    restore.freed.push_back(block->address);
    live_blocks_.erase(block->address);
    block->stream_uses.clear();  // the graph tree owns the memory: no stream waits on it now
    free(block);
  }
  for (size_t s = 0; s < targets.size(); ++s) {
    const SegmentRecord& record = checkpoint.segments[s];
    Block* block = targets[s]->head;
    // Every allocation ended, so the segment is one free block; cut it as checkpointed.
    for (const BlockRecord& wanted : record.blocks) {
      block->pool->erase(block);
      const size_t requested = wanted.requested_size != 0 ? wanted.requested_size : wanted.size;
      block = finish_allocation(block, wanted.size, requested, /*split_any_remainder=*/true);
      if (wanted.state == BlockState::kActiveAllocated) {
        live_blocks_.insert(block->address, block);
        restore.allocated.emplace_back(block->address, block->size);
      }
      block = block->next;
    }
    for (block = targets[s]->head; block != nullptr;) {
      Block* next = block->next;
      if (!live_blocks_.find(block->address)) free(block);
      block = next;
    }
  }
  return restore;
}

}  // namespace memsnap
