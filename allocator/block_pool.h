// A pool of free blocks ordered by (stream, size, address).
//
// Best fit is one ordered search: the first block at or after (stream, size, 0) is the
// smallest block on that stream that is large enough, ties going to the lower address —
// the same order PyTorch keeps, which also fixes the order in which cached segments are
// released. Each free block remembers its position, so removing it needs no search, and tree
// nodes are recycled so the hot path does not call malloc.
#pragma once

#include "allocator/block.h"

namespace memsnap {

class BlockPool {
 public:
  using Set = BlockSet;
  using iterator = Set::iterator;

  explicit BlockPool(bool small)
      : is_small_(small), blocks_(BlockOrder{}, NodeRecyclingAllocator<Block*>(&node_memory_)) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  bool is_small() const { return is_small_; }

  void insert(Block* block) {
    block->gc_count_base = free_block_searches_;
    block->pool_position = blocks_.insert(block).first;
  }
  void erase(Block* block) { blocks_.erase(block->pool_position); }
  iterator erase(iterator it) { return blocks_.erase(it); }

  // First block in order at or after (stream, size, 0): a best-fit candidate when it is on
  // `stream`.
  iterator lower_bound(StreamId stream, size_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    return blocks_.lower_bound(&key);
  }

  iterator begin() { return blocks_.begin(); }
  iterator end() { return blocks_.end(); }
  Set::const_iterator begin() const { return blocks_.begin(); }
  Set::const_iterator end() const { return blocks_.end(); }
  size_t size() const { return blocks_.size(); }
  // A real search (not the remembered position), for the invariant checker.
  bool contains(Block* block) const {
    auto it = blocks_.find(block);
    return it != blocks_.end() && it == block->pool_position;
  }

  // Searches made while garbage collection is on; a free block's age is the number of
  // searches since it became free.
  void count_search() { ++free_block_searches_; }
  uint64_t age_of(const Block* block) const { return free_block_searches_ - block->gc_count_base; }

 private:
  bool is_small_;
  NodeFreeList node_memory_;  // declared before blocks_, so it outlives the tree
  Set blocks_;
  uint64_t free_block_searches_ = 0;
};

}  // namespace memsnap
