// Private pools (private_pool.h): which pool serves a request, and a pool's life, with the rules
// of PyTorch's createOrIncrefPool, beginAllocateToPool, endAllocateToPool and releasePool.
#include <stdexcept>

#include "allocator/device_caching_allocator.h"

namespace memsnap {
namespace {

[[noreturn]] void refuse_pool_call(const std::string& what, MempoolId pool) {
  throw std::invalid_argument(what + " " + to_string(pool));
}

}  // namespace

// The pool begun last whose filter accepts the stream (an inner scope wins over an outer one),
// else the global pools.
BlockPool& DeviceCachingAllocator::routed_pool_for(size_t rounded_size, StreamId stream) {
  const bool small = is_small_request(rounded_size);
  for (auto it = allocating_to_.rbegin(); it != allocating_to_.rend(); ++it)
    if (it->second(stream)) return small ? it->first->small_blocks : it->first->large_blocks;
  return small ? small_blocks_ : large_blocks_;
}

PrivatePool* DeviceCachingAllocator::find_pool(MempoolId pool) const {
  const auto it = private_pools_.find(pool);
  return it == private_pools_.end() ? nullptr : it->second.get();
}

// The pool, made with one use when it does not exist; true when made here.
std::pair<PrivatePool*, bool> DeviceCachingAllocator::find_or_make_pool(MempoolId pool,
                                                                        std::shared_ptr<SegmentSource> source) {
  auto [it, made] = private_pools_.try_emplace(pool);
  if (made) {
    it->second = std::make_unique<PrivatePool>(pool);
    it->second->segment_source = std::move(source);
  }
  return {it->second.get(), made};
}

// A new pool starts with one use. A released pool whose memory has not all gone back yet cannot
// be taken up again (PyTorch asserts).
PrivatePool& DeviceCachingAllocator::add_pool_use(MempoolId pool) {
  auto [found, made] = find_or_make_pool(pool);
  if (!made) {
    if (found->use_count == 0) refuse_pool_call("pool was released and still holds memory:", pool);
    found->use_count += 1;
  }
  return *found;
}

void DeviceCachingAllocator::create_or_incref_pool(MempoolId pool, std::shared_ptr<SegmentSource> source) {
  if (pool.is_global()) refuse_pool_call("the global pools are not a private pool:", pool);
  AllocatorLockGuard lock(mutex_);
  if (source == nullptr) {
    add_pool_use(pool);
    return;
  }
  // A pool's source is given when it is made, never to a pool that exists (PyTorch asserts).
  if (find_pool(pool) != nullptr) refuse_pool_call("a segment source can only be given to a new pool, not to", pool);
  find_or_make_pool(pool, std::move(source));
}

void DeviceCachingAllocator::begin_allocate_to_pool(MempoolId pool, PoolFilter filter) {
  if (pool.is_global()) refuse_pool_call("cannot allocate to the global pools as a private pool:", pool);
  if (!filter) refuse_pool_call("allocating to a pool needs a filter:", pool);
  AllocatorLockGuard lock(mutex_);
  for (const auto& [underway, _] : allocating_to_)
    if (underway->id == pool) refuse_pool_call("already allocating to pool", pool);
  allocating_to_.emplace_back(&add_pool_use(pool), std::move(filter));
}

void DeviceCachingAllocator::end_allocate_to_pool(MempoolId pool) {
  AllocatorLockGuard lock(mutex_);
  for (auto it = allocating_to_.begin(); it != allocating_to_.end(); ++it) {
    if (it->first->id == pool) {
      forget_capture_of(pool);
      allocating_to_.erase(it);
      return;
    }
  }
  refuse_pool_call("not allocating to pool", pool);
}

void DeviceCachingAllocator::release_pool(MempoolId pool) {
  AllocatorLockGuard lock(mutex_);
  PrivatePool* found = find_pool(pool);
  if (found == nullptr || found->use_count == 0) refuse_pool_call("release_pool: no use left of pool", pool);
  found->use_count -= 1;
}

int DeviceCachingAllocator::pool_use_count(MempoolId pool) const {
  AllocatorLockGuard lock(mutex_);
  const PrivatePool* found = find_pool(pool);
  return found == nullptr ? 0 : found->use_count;
}

bool DeviceCachingAllocator::allocating_to_pool() const {
  AllocatorLockGuard lock(mutex_);
  return !allocating_to_.empty();
}

void DeviceCachingAllocator::empty_cache(MempoolId pool) {
  AllocatorLockGuard lock(mutex_);
  release_cached_memory(pool);
}

void DeviceCachingAllocator::set_use_on_oom(MempoolId pool, bool use_on_oom) {
  AllocatorLockGuard lock(mutex_);
  PrivatePool* found = find_pool(pool);
  if (found == nullptr) refuse_pool_call("set_use_on_oom: no pool", pool);
  found->use_on_oom = use_on_oom;
}

void DeviceCachingAllocator::set_no_split(MempoolId pool) {
  AllocatorLockGuard lock(mutex_);
  PrivatePool* found = find_pool(pool);
  if (found == nullptr) refuse_pool_call("set_no_split: no pool", pool);
  found->no_split = true;
}

// A global request the device could not serve takes a cached block of a pool made with
// use_on_oom (never a new segment of it), first pool in id order that has one.
Block* DeviceCachingAllocator::take_from_fallback_pools(bool small, StreamId stream,
                                                        size_t rounded_size) {
  for (auto& [id, pool] : private_pools_) {
    if (!pool->use_on_oom || pool->use_count == 0) continue;
    BlockPool& blocks = small ? pool->small_blocks : pool->large_blocks;
    if (Block* block = take_free_block(blocks, stream, rounded_size)) return block;
  }
  return nullptr;
}

// Free cached bytes in private pools: what PyTorch's out-of-memory message calls "allocated in
// private pools".
size_t DeviceCachingAllocator::private_pool_free_bytes() const {
  size_t bytes = 0;
  for (const auto& [id, pool] : private_pools_)
    for (const BlockPool* blocks : {&pool->small_blocks, &pool->large_blocks})
      for (const Block* block : blocks->ordered_blocks()) bytes += block->size;
  return bytes;
}

}  // namespace memsnap
