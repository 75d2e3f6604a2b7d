#include "history/address_history.h"

#include <algorithm>
#include <limits>

namespace memsnap {
namespace {

// The end of [address, address + size), saturated so "everything from here" cannot wrap.
uintptr_t end_of(uintptr_t address, size_t size) {
  return size > std::numeric_limits<uintptr_t>::max() - address
             ? std::numeric_limits<uintptr_t>::max()
             : address + size;
}

}  // namespace

AddressHistory::SegmentEntries& AddressHistory::segment_for(uintptr_t address, size_t size,
                                                             uint32_t& hint) {
  SegmentEntries* segment = nullptr;
  if (hint < segments_.size() && segments_[hint].address == address) {
    segment = &segments_[hint];
  } else {
    auto it = std::lower_bound(segments_.begin(), segments_.end(), address,
                               [](const SegmentEntries& s, uintptr_t a) { return s.address < a; });
    if (it == segments_.end() || it->address != address) it = segments_.insert(it, {address, size, {}});
    hint = static_cast<uint32_t>(it - segments_.begin());
    segment = &*it;
  }
  segment->size = size;  // the allocator's word: expandable segments grow and shrink
  return *segment;
}

void AddressHistory::record(uintptr_t segment_address, size_t segment_size, const Entry& entry,
                            Place place) {
  std::vector<Entry>& entries = segment_for(segment_address, segment_size, place.segment).entries;
  if (place.entry < entries.size() && entries[place.entry].address == entry.address &&
      entries[place.entry].block_size == entry.block_size) {
    entries[place.entry] = entry;  // the common case: the same block reused whole
    return;
  }
  // The hint found the address but another size (the block was split or merged since), or
  // nothing: search.
  auto it = place.entry < entries.size() && entries[place.entry].address == entry.address
                ? entries.begin() + place.entry
                : std::lower_bound(entries.begin(), entries.end(), entry.address,
                                   [](const Entry& e, uintptr_t a) { return e.address < a; });
  auto first = it;
  if (first != entries.begin() && std::prev(first)->address + std::prev(first)->block_size > entry.address)
    --first;
  const uintptr_t end = end_of(entry.address, entry.block_size);
  auto last = it;
  while (last != entries.end() && last->address < end) ++last;
  if (first == last) {
    first = entries.insert(first, entry);
  } else {
    *first = entry;
    entries.erase(first + 1, last);
  }
  place.entry = static_cast<uint32_t>(first - entries.begin());
}

void AddressHistory::forget(uintptr_t address, size_t size) {
  const uintptr_t end = end_of(address, size);
  for (auto segment = segments_.begin(); segment != segments_.end();) {
    const uintptr_t segment_end = end_of(segment->address, segment->size);
    if (segment->address >= address && segment_end <= end) {
      segment = segments_.erase(segment);
      continue;
    }
    if (segment->address < end && segment_end > address)
      std::erase_if(segment->entries, [&](const Entry& e) {
        return e.address < end && end_of(e.address, e.block_size) > address;
      });
    ++segment;
  }
}

std::vector<AddressHistory::Entry> AddressHistory::within(uintptr_t address, size_t size) const {
  const uintptr_t end = end_of(address, size);
  std::vector<Entry> out;
  for (const SegmentEntries& segment : segments_) {
    if (segment.address >= end) break;
    if (end_of(segment.address, segment.size) <= address) continue;
    auto it = std::lower_bound(segment.entries.begin(), segment.entries.end(), address,
                               [](const Entry& e, uintptr_t a) { return e.address < a; });
    for (; it != segment.entries.end() && it->address < end; ++it) out.push_back(*it);
  }
  return out;
}

size_t AddressHistory::size() const {
  size_t count = 0;
  for (const SegmentEntries& segment : segments_) count += segment.entries.size();
  return count;
}

}  // namespace memsnap
