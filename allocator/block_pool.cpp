#include "allocator/block_pool.h"

#include <algorithm>
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
  for (const auto& blocks : streams_) {
    if (blocks->stream == stream) {
      last_stream_ = blocks.get();
      return last_stream_;
    }
  }
  return nullptr;
}

BlockPool::StreamBlocks& BlockPool::stream_blocks(StreamId stream) {
  if (StreamBlocks* found = find_stream(stream)) return *found;
  auto position = std::lower_bound(
      streams_.begin(), streams_.end(), stream,
      [](const std::unique_ptr<StreamBlocks>& blocks, StreamId id) { return blocks->stream < id; });
  position = streams_.insert(position, std::make_unique<StreamBlocks>(stream));
  last_stream_ = position->get();
  return *last_stream_;
}

void BlockPool::insert_in_order(StreamBlocks* found, Block* block, size_t bin_index) {
  StreamBlocks& blocks = found != nullptr ? *found : stream_blocks(block->stream);
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

void BlockPool::erase_in_order(Block* block, size_t bin_index) {
  StreamBlocks* blocks = find_stream(block->stream);
  if (blocks != nullptr && bin_index < blocks->bin_count) {
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
  const size_t bin_index = size_bin(block->size);
  if (blocks == nullptr || bin_index >= blocks->bin_count)
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

std::vector<Block*> BlockPool::ordered_blocks() const {
  std::vector<Block*> out;
  out.reserve(size_);
  for (const auto& blocks : streams_) append_in_order(*blocks, out);
  return out;
}

std::vector<Block*> BlockPool::ordered_blocks(StreamId stream) const {
  std::vector<Block*> out;
  if (const StreamBlocks* blocks = find_stream(stream)) append_in_order(*blocks, out);
  return out;
}

bool BlockPool::contains(const Block* block) const {
  const StreamBlocks* blocks = find_stream(block->stream);
  const size_t bin_index = size_bin(block->size);
  if (blocks == nullptr || bin_index >= blocks->bin_count) return false;
  const Bin& bin = blocks->bins[bin_index];
  if (bin.front != nullptr) return bin.front == block || bin.back == block;
  const auto it = position_of(bin.many, block->size, block->address);
  return it != bin.many.end() && it->block == block;
}

std::vector<std::string> BlockPool::structure_problems() const {
  std::vector<std::string> problems;
  const std::string name = is_small_ ? "small pool" : "large pool";
  size_t counted = 0;
  for (size_t i = 0; i < streams_.size(); ++i) {
    const StreamBlocks& blocks = *streams_[i];
    if (i > 0 && streams_[i - 1]->stream >= blocks.stream)
      problems.push_back(name + ": streams out of order");
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
  if (counted != size_)
    problems.push_back(name + ": holds " + std::to_string(counted) + " entries but counts " +
                       std::to_string(size_));
  return problems;
}

}  // namespace memsnap
