// A deliberately naive second implementation of the caching policy, for differential tests.
//
// It keeps segments as plain vectors of blocks and finds everything by linear scans, so it
// is easy to check against docs/DESIGN.md by eye. It shares only the size rules of policy.h
// (tested on their own) and the simulated device's placement (its own instance), so any
// difference in which block is chosen, when segments are reserved or released, or in the
// statistics shows up as a different address or number.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include "allocator/policy.h"
#include "allocator/simulated_backend.h"

namespace memsnap::testing {

class ReferenceAllocator {
 public:
  struct Block {
    uintptr_t address;
    size_t size;
    bool allocated;
    size_t requested;
  };
  struct Segment {
    uintptr_t address;
    size_t size;
    StreamId stream;
    bool small;
    std::vector<Block> blocks;  // in address order
  };
  struct Totals {
    int64_t allocated_bytes = 0, reserved_bytes = 0, requested_bytes = 0, segments = 0,
            allocations = 0, inactive_split = 0, inactive_split_bytes = 0, retries = 0;
  };

  ReferenceAllocator(const AllocatorConfig& config, size_t capacity)
      : config_(config), device_(SimulatedBackend::Options{1, capacity, true}) {}

  // Returns the address, or nullopt for out of memory.
  std::optional<uintptr_t> allocate(size_t requested, StreamId stream) {
    const size_t size = round_size(requested, config_);
    const bool small = is_small_request(size);
    if (auto found = best_fit(size, stream, small)) return take(*found, size, requested);
    const size_t segment_size = segment_size_for(size, config_);
    if (auto fresh = reserve(segment_size, stream, small)) return take(*fresh, size, requested);
    if (release_oversize(size, stream, small)) {
      if (auto fresh = reserve(segment_size, stream, small)) return take(*fresh, size, requested);
    }
    release_all_unsplit();
    ++retries_;
    if (auto fresh = reserve(segment_size, stream, small)) return take(*fresh, size, requested);
    return std::nullopt;
  }

  void free(uintptr_t address) {
    for (Segment& segment : segments_) {
      auto& blocks = segment.blocks;
      for (size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i].address != address) continue;
        blocks[i].allocated = false;
        blocks[i].requested = 0;
        if (i + 1 < blocks.size() && !blocks[i + 1].allocated) {
          blocks[i].size += blocks[i + 1].size;
          blocks.erase(blocks.begin() + static_cast<long>(i) + 1);
        }
        if (i > 0 && !blocks[i - 1].allocated) {
          blocks[i - 1].size += blocks[i].size;
          blocks.erase(blocks.begin() + static_cast<long>(i));
        }
        return;
      }
    }
  }

  void empty_cache() { release_all_unsplit(); }

  Totals totals() const {
    Totals t;
    t.retries = retries_;
    for (const Segment& segment : segments_) {
      ++t.segments;
      t.reserved_bytes += static_cast<int64_t>(segment.size);
      for (const Block& block : segment.blocks) {
        if (block.allocated) {
          ++t.allocations;
          t.allocated_bytes += static_cast<int64_t>(block.size);
          t.requested_bytes += static_cast<int64_t>(block.requested);
        } else if (segment.blocks.size() > 1) {
          ++t.inactive_split;
          t.inactive_split_bytes += static_cast<int64_t>(block.size);
        }
      }
    }
    return t;
  }

 private:
  struct Where {
    size_t segment, block;
  };

  // Smallest block of the pool and stream that fits, lowest address on ties.
  std::optional<Where> best_fit(size_t size, StreamId stream, bool small) const {
    std::optional<Where> best;
    for (size_t s = 0; s < segments_.size(); ++s) {
      const Segment& segment = segments_[s];
      if (segment.stream != stream || segment.small != small) continue;
      for (size_t b = 0; b < segment.blocks.size(); ++b) {
        const Block& block = segment.blocks[b];
        if (block.allocated || block.size < size) continue;
        if (best) {
          const Block& current = segments_[best->segment].blocks[best->block];
          if (std::make_pair(block.size, block.address) >= std::make_pair(current.size, current.address))
            continue;
        }
        best = Where{s, b};
      }
    }
    if (!best) return std::nullopt;
    // The max_split_size rules apply to the best candidate only (no second search).
    if (!block_fits_split_rules(segments_[best->segment].blocks[best->block].size, size, config_))
      return std::nullopt;
    return best;
  }

  uintptr_t take(Where where, size_t size, size_t requested) {
    Segment& segment = segments_[where.segment];
    Block& block = segment.blocks[where.block];
    block.allocated = true;
    block.requested = requested;
    if (should_split(block.size, size, segment.small, config_)) {
      Block rest{block.address + size, block.size - size, false, 0};
      block.size = size;
      const uintptr_t address = block.address;
      segment.blocks.insert(segment.blocks.begin() + static_cast<long>(where.block) + 1, rest);
      return address;
    }
    return block.address;
  }

  std::optional<Where> reserve(size_t size, StreamId stream, bool small) {
    const std::optional<uintptr_t> address = device_.reserve(0, size);
    if (!address) return std::nullopt;
    segments_.push_back({*address, size, stream, small, {{*address, size, false, 0}}});
    return Where{segments_.size() - 1, 0};
  }

  void release(size_t index) {
    device_.release(0, segments_[index].address, segments_[index].size);
    segments_.erase(segments_.begin() + static_cast<long>(index));
  }

  static bool unsplit_free(const Segment& segment) {
    return segment.blocks.size() == 1 && !segment.blocks[0].allocated;
  }

  // Free unsplit segments in pool order: stream, then size, then address.
  std::vector<size_t> cached_in_order(bool small) const {
    std::vector<size_t> order;
    for (size_t i = 0; i < segments_.size(); ++i)
      if (segments_[i].small == small && unsplit_free(segments_[i])) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const Segment& x = segments_[a];
      const Segment& y = segments_[b];
      return std::tie(x.stream, x.size, x.address) < std::tie(y.stream, y.size, y.address);
    });
    return order;
  }

  void release_addresses(const std::vector<uintptr_t>& addresses) {
    for (uintptr_t address : addresses)
      for (size_t i = 0; i < segments_.size(); ++i)
        if (segments_[i].address == address) {
          release(i);
          break;
        }
  }

  bool release_oversize(size_t size, StreamId stream, bool small) {
    if (config_.max_split_size == kNoMaxSplitSize) return false;
    const size_t wanted = std::max(size, config_.max_split_size);
    // Free blocks of this pool and stream, largest first (split blocks are candidates in
    // the order but cannot be released).
    struct Candidate {
      size_t size;
      uintptr_t address;
      bool unsplit;
    };
    std::vector<Candidate> blocks;
    for (const Segment& segment : segments_)
      if (segment.small == small && segment.stream == stream)
        for (const Block& block : segment.blocks)
          if (!block.allocated) blocks.push_back({block.size, block.address, segment.blocks.size() == 1});
    std::sort(blocks.begin(), blocks.end(), [](const Candidate& a, const Candidate& b) {
      return std::tie(a.size, a.address) < std::tie(b.size, b.address);
    });
    auto fit = std::find_if(blocks.begin(), blocks.end(), [&](const Candidate& c) { return c.size >= wanted; });
    if (fit != blocks.end()) {
      if (!fit->unsplit) return false;
      release_addresses({fit->address});
      return true;
    }
    size_t released = 0;
    std::vector<uintptr_t> to_release;
    for (auto it = blocks.rbegin(); it != blocks.rend() && released < wanted; ++it) {
      if (it->size < config_.max_split_size) break;
      if (!it->unsplit) continue;
      released += it->size;
      to_release.push_back(it->address);
    }
    release_addresses(to_release);
    return released >= wanted;
  }

  void release_all_unsplit() {
    for (bool small : {false, true}) {
      std::vector<uintptr_t> addresses;
      for (size_t i : cached_in_order(small)) addresses.push_back(segments_[i].address);
      release_addresses(addresses);
    }
  }

  AllocatorConfig config_;
  SimulatedBackend device_;
  std::vector<Segment> segments_;
  int64_t retries_ = 0;
};

}  // namespace memsnap::testing
