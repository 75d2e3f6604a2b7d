// A deliberately naive second implementation of expandable segments, for differential
// tests (the counterpart of reference_allocator.h for expandable_segments:True).
//
// Each segment is a vector of blocks that are allocated, free or unmapped; every change is
// made by splitting blocks and then merging neighbours of the same kind, and every search is
// a linear scan, so the rules read as docs/DESIGN.md and PyTorch state them:
//   - best fit among free blocks, where a block followed by unmapped bytes counts as the size
//     it could grow to when deciding whether to move on to the next candidate;
//   - else grow: the lowest-addressed unmapped range of the pool and stream whose room (with
//     the free block just before it) is large enough, mapping whole pages (2 MiB small,
//     20 MiB large), in a new segment of 9/8 of the device when none has room;
//   - else unmap every whole free page (pools large then small, blocks in pool order),
//     release segments left with nothing mapped, and grow again.
// Only mapped bytes are reserved; segments and split blocks are not counted.
#pragma once

#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

#include "allocator/policy.h"
#include "allocator/simulated_backend.h"
#include "reference_allocator.h"

namespace memsnap::testing {

class ReferenceExpandable {
 public:
  using Totals = ReferenceAllocator::Totals;

  ReferenceExpandable(const AllocatorConfig& config, size_t capacity)
      : config_(config), capacity_(capacity), device_(SimulatedBackend::Options{1, capacity, true}) {}

  std::optional<uintptr_t> allocate(size_t requested, StreamId stream) {
    const size_t size = round_size(requested, config_);
    const bool small = is_small_request(size);
    if (auto found = best_fit(size, stream, small)) return take(*found, size, requested);
    if (auto grown = grow(size, stream, small)) return take(*grown, size, requested);
    unmap_all_free_pages();
    ++retries_;
    if (auto grown = grow(size, stream, small)) return take(*grown, size, requested);
    return std::nullopt;
  }

  void free(uintptr_t address) {
    for (Segment& segment : segments_)
      for (Block& block : segment.blocks)
        if (block.address == address && block.state == kAllocated) {
          block.state = kFree;
          block.requested = 0;
          merge_neighbours(segment);
          return;
        }
  }

  void empty_cache() { unmap_all_free_pages(); }

  Totals totals() const {
    Totals t;
    t.retries = retries_;
    for (const Segment& segment : segments_)
      for (const Block& block : segment.blocks) {
        if (block.state != kUnmapped) t.reserved_bytes += static_cast<int64_t>(block.size);
        if (block.state == kAllocated) {
          ++t.allocations;
          t.allocated_bytes += static_cast<int64_t>(block.size);
          t.requested_bytes += static_cast<int64_t>(block.requested);
        }
      }
    return t;
  }

 private:
  enum State { kFree, kAllocated, kUnmapped };
  struct Block {
    uintptr_t address;
    size_t size;
    State state;
    size_t requested;
  };
  struct Segment {
    uintptr_t address;
    size_t size;
    size_t page;
    StreamId stream;
    bool small;
    std::vector<Block> blocks;  // in address order, tiling the segment
  };
  struct Where {
    size_t segment, block;
  };

  // The bytes a free block could grow to: itself and the unmapped range right after it.
  size_t growable_size(Where w) const {
    const auto& blocks = segments_[w.segment].blocks;
    const size_t next = w.block + 1;
    return blocks[w.block].size +
           (next < blocks.size() && blocks[next].state == kUnmapped ? blocks[next].size : 0);
  }

  std::optional<Where> best_fit(size_t size, StreamId stream, bool small) const {
    std::vector<Where> free_blocks;  // in pool order
    for (size_t s = 0; s < segments_.size(); ++s)
      if (segments_[s].stream == stream && segments_[s].small == small)
        for (size_t b = 0; b < segments_[s].blocks.size(); ++b)
          if (segments_[s].blocks[b].state == kFree) free_blocks.push_back({s, b});
    auto key = [&](Where w) {
      const Block& block = segments_[w.segment].blocks[w.block];
      return std::make_pair(block.size, block.address);
    };
    std::sort(free_blocks.begin(), free_blocks.end(),
              [&](Where a, Where b) { return key(a) < key(b); });
    size_t i = 0;
    while (i < free_blocks.size() && key(free_blocks[i]).first < size) ++i;
    if (i == free_blocks.size()) return std::nullopt;
    while (i + 1 < free_blocks.size() &&
           growable_size(free_blocks[i + 1]) < growable_size(free_blocks[i]))
      ++i;
    const Where best = free_blocks[i];
    if (!block_fits_split_rules(segments_[best.segment].blocks[best.block].size, size, config_))
      return std::nullopt;
    return best;
  }

  uintptr_t take(Where w, size_t size, size_t requested) {
    Segment& segment = segments_[w.segment];
    Block& block = segment.blocks[w.block];
    block.state = kAllocated;
    block.requested = requested;
    const uintptr_t address = block.address;
    if (block.size - size >= kMinBlockSize) {
      const Block rest{block.address + size, block.size - size, kFree, 0};
      block.size = size;
      segment.blocks.insert(segment.blocks.begin() + static_cast<long>(w.block) + 1, rest);
    }
    return address;
  }

  std::optional<Where> grow(size_t size, StreamId stream, bool small) {
    std::vector<Where> unmapped;
    for (size_t s = 0; s < segments_.size(); ++s)
      if (segments_[s].stream == stream && segments_[s].small == small)
        for (size_t b = 0; b < segments_[s].blocks.size(); ++b)
          if (segments_[s].blocks[b].state == kUnmapped) unmapped.push_back({s, b});
    std::sort(unmapped.begin(), unmapped.end(), [&](Where a, Where b) {
      return segments_[a.segment].blocks[a.block].address < segments_[b.segment].blocks[b.block].address;
    });
    std::optional<Where> start;
    for (Where u : unmapped) {
      const auto& blocks = segments_[u.segment].blocks;
      size_t first = u.block > 0 && blocks[u.block - 1].state == kFree ? u.block - 1 : u.block;
      size_t room = 0;
      for (size_t b = first; b < blocks.size() && room < size && blocks[b].state != kAllocated; ++b)
        room += blocks[b].size;
      if (room >= size) {
        start = Where{u.segment, first};
        break;
      }
    }
    if (!start) {
      const size_t page = small ? kSmallBuffer : kLargeBuffer;
      const size_t wanted = capacity_ + capacity_ / 8;
      const size_t bytes = (wanted + page - 1) / page * page;
      const std::optional<uintptr_t> address = device_.reserve_address_space(0, bytes);
      if (!address) return std::nullopt;
      segments_.push_back({*address, bytes, page, stream, small, {{*address, bytes, kUnmapped, 0}}});
      start = Where{segments_.size() - 1, 0};
    }
    Segment& segment = segments_[start->segment];
    const uintptr_t start_address = segment.blocks[start->block].address;
    // Map pages after the free bytes until the free block at the start holds the request.
    for (;;) {
      const size_t at = index_of(segment, start_address);
      const Block& block = segment.blocks[at];
      if (block.state == kFree && block.size >= size) return Where{start->segment, at};
      const size_t unmapped_index = block.state == kUnmapped ? at : at + 1;
      const size_t have = block.state == kFree ? block.size : 0;
      const Block target = segment.blocks[unmapped_index];
      const size_t bytes = (std::min(size - have, target.size) + segment.page - 1) / segment.page *
                           segment.page;
      if (!device_.map_pages(0, target.address, bytes, segment.page)) return std::nullopt;
      set_state(segment, target.address, bytes, kFree);
    }
  }

  static size_t index_of(const Segment& segment, uintptr_t address) {
    for (size_t b = 0; b < segment.blocks.size(); ++b)
      if (address - segment.blocks[b].address < segment.blocks[b].size) return b;
    return segment.blocks.size();
  }

  // Cuts [address, address + bytes) out of the block holding it (which it must lie in) and
  // gives it `state`, then merges neighbours.
  void set_state(Segment& segment, uintptr_t address, size_t bytes, State state) {
    const size_t at = index_of(segment, address);
    const Block whole = segment.blocks[at];
    std::vector<Block> pieces;
    if (address > whole.address) pieces.push_back({whole.address, address - whole.address, whole.state, 0});
    pieces.push_back({address, bytes, state, 0});
    const uintptr_t end = address + bytes;
    if (end < whole.address + whole.size) pieces.push_back({end, whole.address + whole.size - end, whole.state, 0});
    segment.blocks.erase(segment.blocks.begin() + static_cast<long>(at));
    segment.blocks.insert(segment.blocks.begin() + static_cast<long>(at), pieces.begin(), pieces.end());
    merge_neighbours(segment);
  }

  static void merge_neighbours(Segment& segment) {
    auto& blocks = segment.blocks;
    for (size_t b = 1; b < blocks.size();) {
      if (blocks[b].state != kAllocated && blocks[b].state == blocks[b - 1].state) {
        blocks[b - 1].size += blocks[b].size;
        blocks.erase(blocks.begin() + static_cast<long>(b));
      } else {
        ++b;
      }
    }
  }

  void unmap_all_free_pages() {
    for (bool small : {false, true}) {
      std::vector<std::tuple<StreamId, size_t, uintptr_t>> order;  // pool order
      for (const Segment& segment : segments_)
        if (segment.small == small)
          for (const Block& block : segment.blocks)
            if (block.state == kFree) order.emplace_back(segment.stream, block.size, block.address);
      std::sort(order.begin(), order.end());
      for (const auto& [stream, size, address] : order) unmap_whole_pages(address, size);
    }
  }

  void unmap_whole_pages(uintptr_t address, size_t size) {
    for (size_t s = 0; s < segments_.size(); ++s) {
      Segment& segment = segments_[s];
      if (address - segment.address >= segment.size) continue;
      const uintptr_t offset = address - segment.address;
      const uintptr_t first = (offset + segment.page - 1) / segment.page * segment.page;
      const uintptr_t last = (offset + size) / segment.page * segment.page;
      if (first >= last) return;
      device_.unmap_pages(0, segment.address + first, last - first, segment.page, segment.stream);
      set_state(segment, segment.address + first, last - first, kUnmapped);
      if (segment.blocks.size() == 1) {
        device_.release_address_space(0, segment.address, segment.size);
        segments_.erase(segments_.begin() + static_cast<long>(s));
      }
      return;
    }
  }

  AllocatorConfig config_;
  size_t capacity_;
  SimulatedBackend device_;
  std::vector<Segment> segments_;
  int64_t retries_ = 0;
};

}  // namespace memsnap::testing
