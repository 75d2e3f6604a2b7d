#include "allocator/block_pool.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>
#include <type_traits>

namespace memsnap {
namespace {

// Order inside a bin: (size, address), as in PyTorch's block comparator.
template <typename Entry>
bool comes_before(const Entry& entry, size_t size, uintptr_t address) {
  return entry.size != size ? entry.size < size : entry.address < address;
}

// The first entry at or after (size, address) in a bin sorted by (size, address). Bins
// hold blocks of nearly equal size and are short in practice; a bin of many equal-sized
// blocks costs a binary search and a move of the entries behind the change.
template <typename Bin>
auto position_of(Bin& bin, size_t size, uintptr_t address) {
  using Entry = typename std::remove_reference_t<Bin>::value_type;
  return std::partition_point(bin.begin(), bin.end(),
                              [&](const Entry& entry) { return comes_before(entry, size, address); });
}

}  // namespace

BlockPool::StreamBlocks* BlockPool::find_other_stream(StreamId stream) const {
  const auto found = binned_.find(stream);
  if (found == binned_.end()) return nullptr;
  last_stream_ = found->second.get();
  return last_stream_;
}

BlockPool::StreamBlocks* BlockPool::bins_for_new_stream(StreamId stream) {
  if (binned_.size() >= kStreamsBinnedOnSight) return nullptr;
  // A stream whose blocks went to the set when the binned streams were many stays there
  // until it holds more than kFewBlocks.
  if (const auto few = first_few(stream); few != few_.end() && few->stream == stream) return nullptr;
  return &add_binned_stream(stream);
}

BlockPool::StreamBlocks& BlockPool::add_binned_stream(StreamId stream) {
  if (binned_.size() >= drop_empty_at_) drop_empty_streams();
  std::unique_ptr<StreamBlocks>& blocks = binned_[stream];
  blocks = std::make_unique<StreamBlocks>(stream);
  last_stream_ = blocks.get();
  return *last_stream_;
}

// Forgets the binned streams that hold no block; the next sweep waits until the binned
// streams are twice as many as those left, so sweeps cost a constant per stream binned.
void BlockPool::drop_empty_streams() {
  for (auto it = binned_.begin(); it != binned_.end();) {
    if (!it->second->non_empty.none()) {
      ++it;
      continue;
    }
    if (last_stream_ == it->second.get()) last_stream_ = nullptr;
    it = binned_.erase(it);
  }
  drop_empty_at_ = std::max(2 * kStreamsBinnedOnSight, 2 * binned_.size());
}

void BlockPool::insert_in_order(StreamBlocks* found, Block* block, size_t bin_index) {
  if (found == nullptr) found = bins_for_new_stream(block->stream);
  if (found == nullptr) {
    insert_few(block);
    return;
  }
  add_to_bins(*found, block, bin_index);
}

void BlockPool::add_to_bins(StreamBlocks& blocks, Block* block, size_t bin_index) {
  if (bin_index >= blocks.bin_count) {
    blocks.bins.resize(bin_index + 1);
    blocks.bin_count = blocks.bins.size();
  }
  Bin& bin = blocks.bins[bin_index];
  if (bin.empty()) {
    bin.front = block;
  } else if (bin.back == nullptr && bin.front != nullptr) {
    add_second(bin, block);
  } else {
    std::vector<Entry>& many = bin.many;
    if (bin.front != nullptr) {  // a third block: all three go out of line
      many.push_back({bin.front->size, bin.front->address, bin.front});
      many.push_back({bin.back->size, bin.back->address, bin.back});
      bin.front = bin.back = nullptr;
    }
    // Appended, then moved down past the larger entries: bins are short, and this is one pass
    // where a search and an insert were two.
    const Entry entry{block->size, block->address, block};
    many.push_back(entry);
    size_t at = many.size() - 1;
    for (; at > 0; --at) {
      const Entry& before = many[at - 1];
      if (comes_before(before, entry.size, entry.address)) break;
      many[at] = before;
    }
    many[at] = entry;
  }
  blocks.non_empty.set(bin_index);
  ++size_;
}

void BlockPool::insert_few(Block* block) {
  const StreamId stream = block->stream;
  if (!few_.insert(FewEntry{stream, block->size, block->address, block}).second)
    throw std::logic_error("block pool: inserting a block the pool holds");
  ++size_;
  size_t count = 0;
  for (auto it = first_few(stream); it != few_.end() && it->stream == stream && count <= kFewBlocks; ++it)
    ++count;
  if (count > kFewBlocks) bin_stream(stream);
}

// Moves a stream's blocks from the set to bins of its own (their ages stay as they were).
void BlockPool::bin_stream(StreamId stream) {
  StreamBlocks& blocks = add_binned_stream(stream);
  const auto first = first_few(stream);
  auto last = first;
  for (; last != few_.end() && last->stream == stream; ++last) {
    add_to_bins(blocks, last->block, last->block->pool_bin);
    --size_;  // counted already
  }
  few_.erase(first, last);
}

BlockPool::FewBlocks::const_iterator BlockPool::find_few(const Block* block) const {
  const auto it = few_.find(FewEntry{block->stream, block->size, block->address, nullptr});
  return it != few_.end() && it->block == block ? it : few_.end();
}

Block* BlockPool::lower_bound_few(StreamId stream, size_t size) const {
  const auto it = few_.lower_bound(FewEntry{stream, size, 0, nullptr});
  return it != few_.end() && it->stream == stream ? it->block : nullptr;
}

void BlockPool::erase_in_order(Block* block, size_t bin_index) {
  StreamBlocks* blocks = find_stream(block->stream);
  if (blocks == nullptr) {
    if (const auto it = find_few(block); it != few_.end()) {
      few_.erase(it);
      --size_;
      return;
    }
  } else if (bin_index < blocks->bin_count) {
    Bin& bin = blocks->bins[bin_index];
    const auto it = position_of(bin.many, block->size, block->address);
    if (it != bin.many.end() && it->block == block) {
      bin.many.erase(it);
      if (bin.many.size() == 2) {  // back inline (the vector keeps its storage for next time)
        bin.front = bin.many[0].block;
        bin.back = bin.many[1].block;
        bin.many.clear();
      }
      --size_;
      return;
    }
  }
  throw std::logic_error("block pool: erasing a block the pool does not hold");
}

Block* BlockPool::lower_bound_in_bin(const StreamBlocks& blocks, size_t bin_index,
                                     size_t size) const {
  const Bin& bin = blocks.bins[bin_index];
  const auto fit = position_of(bin.many, size, 0);
  if (fit != bin.many.end()) return fit->block;
  const size_t next = blocks.non_empty.next_set(bin_index + 1);
  return next == kNoSizeBin ? nullptr : blocks.bins[next].first();
}

Block* BlockPool::next_in_order(const Block* block) const {
  const StreamBlocks* blocks = find_stream(block->stream);
  if (blocks == nullptr) {
    auto it = find_few(block);
    if (it == few_.end())
      throw std::logic_error("block pool: next_in_order of a block the pool does not hold");
    ++it;
    return it != few_.end() && it->stream == block->stream ? it->block : nullptr;
  }
  const size_t bin_index = size_bin(block->size);
  if (bin_index >= blocks->bin_count)
    throw std::logic_error("block pool: next_in_order of a block the pool does not hold");
  const Bin& bin = blocks->bins[bin_index];
  if (bin.front == block && bin.back != nullptr) return bin.back;
  if (bin.front != block && bin.back != block) {
    auto it = position_of(bin.many, block->size, block->address);
    if (it == bin.many.end() || it->block != block)
      throw std::logic_error("block pool: next_in_order of a block the pool does not hold");
    if (++it != bin.many.end()) return it->block;
  }
  const size_t next = blocks->non_empty.next_set(bin_index + 1);
  return next == kNoSizeBin ? nullptr : blocks->bins[next].first();
}

void BlockPool::insert_unmapped(Block* block) {
  if (!unmapped_.emplace(std::make_pair(block->stream, block->address), block).second)
    throw std::logic_error("block pool: unmapped range inserted twice");
}

void BlockPool::erase_unmapped(Block* block) {
  auto it = unmapped_.find({block->stream, block->address});
  if (it == unmapped_.end() || it->second != block)
    throw std::logic_error("block pool: erasing an unmapped range the pool does not hold");
  unmapped_.erase(it);
}

Block* BlockPool::unmapped_at_or_after(StreamId stream, uintptr_t address) const {
  auto it = unmapped_.lower_bound({stream, address});
  return it == unmapped_.end() || it->first.first != stream ? nullptr : it->second;
}

bool BlockPool::holds_unmapped(const Block* block) const {
  auto it = unmapped_.find({block->stream, block->address});
  return it != unmapped_.end() && it->second == block;
}

void BlockPool::append_in_order(const StreamBlocks& blocks, std::vector<Block*>& out) {
  for (size_t bin = blocks.non_empty.next_set(0); bin != kNoSizeBin;
       bin = blocks.non_empty.next_set(bin + 1))
    if (const Bin& in_bin = blocks.bins[bin]; in_bin.front != nullptr) {
      out.push_back(in_bin.front);
      if (in_bin.back != nullptr) out.push_back(in_bin.back);
    } else {
      for (const Entry& entry : in_bin.many) out.push_back(entry.block);
    }
}

// The binned streams and the set, merged in stream order (a stream is in one or the other).
std::vector<Block*> BlockPool::ordered_blocks() const {
  std::vector<Block*> out;
  out.reserve(size_);
  auto few = few_.begin();
  for (const auto& [stream, blocks] : binned_) {
    for (; few != few_.end() && few->stream < stream; ++few) out.push_back(few->block);
    append_in_order(*blocks, out);
  }
  for (; few != few_.end(); ++few) out.push_back(few->block);
  return out;
}

std::vector<Block*> BlockPool::take_inserted_since_last_look() {
  std::vector<Block*> out;
  if (inserted_unrecorded_) {
    out = ordered_blocks();
  } else {
    // Those still here, by their place in order; a block inserted twice appears twice.
    for (Block* block : inserted_)
      if (contains(block)) out.push_back(block);
    std::sort(out.begin(), out.end(), [](const Block* a, const Block* b) {
      if (a->stream != b->stream) return a->stream < b->stream;
      return precedes(a, b);
    });
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }
  inserted_.clear();
  inserted_unrecorded_ = false;
  return out;
}

std::vector<Block*> BlockPool::ordered_blocks(StreamId stream) const {
  std::vector<Block*> out;
  if (const StreamBlocks* blocks = find_stream(stream)) {
    append_in_order(*blocks, out);
  } else {
    for (auto it = first_few(stream); it != few_.end() && it->stream == stream; ++it)
      out.push_back(it->block);
  }
  return out;
}

bool BlockPool::contains(const Block* block) const {
  const StreamBlocks* blocks = find_stream(block->stream);
  if (blocks == nullptr) return find_few(block) != few_.end();
  const size_t bin_index = size_bin(block->size);
  if (bin_index >= blocks->bin_count) return false;
  const Bin& bin = blocks->bins[bin_index];
  if (bin.front != nullptr) return bin.front == block || bin.back == block;
  const auto it = position_of(bin.many, block->size, block->address);
  return it != bin.many.end() && it->block == block;
}

std::vector<std::string> BlockPool::structure_problems() const {
  std::vector<std::string> problems;
  const std::string name = is_small_ ? "small pool" : "large pool";
  size_t counted = 0;
  for (const auto& [stream, binned] : binned_) {
    const StreamBlocks& blocks = *binned;
    if (blocks.stream != stream) problems.push_back(name + ": bins filed under another stream");
    if (blocks.bin_count != blocks.bins.size())
      problems.push_back(name + ": bin count disagrees with the bins");
    if (blocks.non_empty.next_set(blocks.bins.size()) != kNoSizeBin)
      problems.push_back(name + ": bitmap marks a bin beyond those in use");
    for (size_t b = 0; b < blocks.bins.size(); ++b) {
      const bool in_use = !blocks.bins[b].empty();
      if (blocks.non_empty.test(b) != in_use)
        problems.push_back(name + ": bitmap disagrees with bin " + std::to_string(b));
      if (!in_use) continue;
      const Bin& bin = blocks.bins[b];
      if (bin.front != nullptr) {
        for (const Block* inline_block : {bin.front, bin.back}) {
          if (inline_block == nullptr) continue;
          ++counted;
          if (size_bin(inline_block->size) != b || inline_block->pool_bin != b ||
              inline_block->stream != blocks.stream)
            problems.push_back(name + ": block " + std::to_string(inline_block->address) +
                               " is in the wrong bin");
        }
        if (bin.back != nullptr && !precedes(bin.front, bin.back))
          problems.push_back(name + ": bin " + std::to_string(b) + " out of order");
        if (!bin.many.empty())
          problems.push_back(name + ": bin " + std::to_string(b) + " holds blocks both ways");
        continue;
      }
      if (bin.back != nullptr)
        problems.push_back(name + ": bin " + std::to_string(b) + " holds a second block but no first");
      if (bin.many.size() <= 2)
        problems.push_back(name + ": bin " + std::to_string(b) + " keeps " +
                           std::to_string(bin.many.size()) + " blocks out of line");
      counted += bin.many.size();
      for (size_t e = 0; e < bin.many.size(); ++e) {
        const Entry& entry = bin.many[e];
        if (size_bin(entry.size) != b || entry.block->pool_bin != b || entry.size != entry.block->size ||
            entry.address != entry.block->address || entry.block->stream != blocks.stream)
          problems.push_back(name + ": entry for block " + std::to_string(entry.address) +
                             " is stale or in the wrong bin");
        const Entry* before = e > 0 ? &bin.many[e - 1] : nullptr;
        if (before != nullptr && !comes_before(*before, entry.size, entry.address))
          problems.push_back(name + ": bin " + std::to_string(b) + " out of order");
      }
    }
  }
  size_t stream_blocks = 0;
  for (auto it = few_.begin(); it != few_.end(); ++it) {
    const FewEntry& entry = *it;
    ++counted;
    stream_blocks = it != few_.begin() && std::prev(it)->stream == entry.stream ? stream_blocks + 1 : 1;
    if (stream_blocks == kFewBlocks + 1)
      problems.push_back(name + ": stream " + std::to_string(entry.stream) + " holds more than " +
                         std::to_string(kFewBlocks) + " blocks without bins");
    if (binned_.count(entry.stream) != 0)
      problems.push_back(name + ": stream " + std::to_string(entry.stream) + " has bins and blocks without");
    if (entry.size != entry.block->size || entry.address != entry.block->address ||
        entry.stream != entry.block->stream || entry.block->pool_bin != size_bin(entry.size))
      problems.push_back(name + ": entry for block " + std::to_string(entry.address) + " is stale");
  }
  if (counted != size_)
    problems.push_back(name + ": holds " + std::to_string(counted) + " entries but counts " +
                       std::to_string(size_));
  return problems;
}

}  // namespace memsnap
