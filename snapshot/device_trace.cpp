#include "snapshot/device_trace.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace memsnap {

void DeviceTrace::reserve(size_t events) {
  rows_.reserve(events);
  run_times_.reserve((events >> kRunShift) + 1);
}

void DeviceTrace::clear() {
  rows_.clear();
  run_times_.clear();
  stream_count_ = 0;
  last_slot_ = 0;
  wholes_.clear();
}

void DeviceTrace::shrink_to_fit() {
  rows_.shrink_to_fit();
  run_times_.shrink_to_fit();
  wholes_.shrink_to_fit();
}

DeviceTrace::Row DeviceTrace::encode(size_t i, const TraceEntry& entry) {
  constexpr Row kInWholes{0, uint64_t{kWhole} << kActionShift, 0, 0};
  const auto action = static_cast<uint8_t>(entry.action);
  int64_t offset = 0;
  if (action == kWhole || entry.size > kSizeMask ||
      __builtin_sub_overflow(entry.time_us, run_times_[i >> kRunShift], &offset) || offset != static_cast<int32_t>(offset))
    return kInWholes;
  if (stream_count_ == 0 || streams_[last_slot_] != entry.stream) {
    size_t slot = 0;
    while (slot < stream_count_ && streams_[slot] != entry.stream) ++slot;
    if (slot == streams_.size()) return kInWholes;
    if (slot == stream_count_) streams_[stream_count_++] = entry.stream;
    last_slot_ = static_cast<uint8_t>(slot);
  }
  return row_of(entry, last_slot_, offset);
}

void DeviceTrace::push_back_slow(const TraceEntry& entry) {
  const size_t i = rows_.size();
  if ((i & kRunMask) == 0) run_times_.push_back(entry.time_us);
  Row row = encode(i, entry);
  if (is_whole(row)) {
    row.address = wholes_.size();
    wholes_.emplace_back(i, entry);
  }
  rows_.push_back(row);
}

void DeviceTrace::set(size_t i, const TraceEntry& entry) {
  Row row = encode(i, entry);
  if (is_whole(row)) {
    if (is_whole(rows_[i])) {
      row.address = rows_[i].address;
      wholes_[row.address].second = entry;
    } else {
      row.address = wholes_.size();
      wholes_.emplace_back(i, entry);
    }
  } else if (is_whole(rows_[i])) {
    forget_whole(i);
  }
  rows_[i] = row;
}

void DeviceTrace::erase(const_iterator first, const_iterator last) {
  DeviceTrace kept;
  kept.reserve(size() - static_cast<size_t>(last - first));
  for (const_iterator it = begin(); it != end(); ++it)
    if (it < first || it >= last) kept.push_back(*it);
  *this = std::move(kept);
}

void DeviceTrace::erase(const_iterator at) { erase(at, at + 1); }

// The last event kept whole takes the place of event i's.
void DeviceTrace::forget_whole(size_t i) {
  const uint64_t place = rows_[i].address;
  if (place + 1 != wholes_.size()) {
    wholes_[place] = wholes_.back();
    rows_[wholes_[place].first].address = place;
  }
  wholes_.pop_back();
}

TraceEntry DeviceTrace::whole(size_t i) const {
  return wholes_[rows_[i].address].second;  // a row marked whole has its event's place there
}

TraceEntry DeviceTrace::at(size_t i) const {
  if (i >= size())
    throw std::out_of_range("trace event " + std::to_string(i) + " of " + std::to_string(size()));
  return (*this)[i];
}

bool DeviceTrace::operator==(const DeviceTrace& other) const {
  if (size() != other.size()) return false;
  for (size_t i = 0; i < size(); ++i)
    if (!((*this)[i] == other[i])) return false;
  return true;
}

size_t DeviceTrace::bytes_held() const {
  return rows_.capacity() * sizeof(Row) + run_times_.capacity() * sizeof(int64_t) + sizeof(streams_) +
         wholes_.capacity() * sizeof(wholes_[0]);
}

}  // namespace memsnap
