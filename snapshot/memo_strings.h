// Where each memoized string of a pickle was pickled, by memo index: what lets a thread
// decoding one part of a pickle read the strings memoized before it without the values
// (pickle_layout.h fills it while it scans).
#pragma once

#include <cstdint>
#include <memory>

namespace memsnap::pickle {

// Where each memo entry's string was pickled, for the entries that hold strings: a bit per
// entry (each word read and written whole, as other threads read them while entries are
// added), how many strings come before each 64 entries, and the strings' offsets in memo
// order. Allocated for `capacity` entries; only the pages written are ever touched.
class MemoStrings {
 public:
  explicit MemoStrings(uint64_t capacity);
  uint64_t capacity() const { return capacity_; }
  // Entry `index` (each in turn, from 0) holds the string pickled at `string_at`, or none
  // (kNone).
  void note(uint64_t index, uint64_t string_at) {
    if (index % 64 == 0) begin_word(index);
    if (string_at != kNone) {
      word_ |= uint64_t{1} << (index % 64);
      offsets_[strings_++] = static_cast<uint32_t>(string_at);
    }
  }
  // Entries `base` on are `from`'s first `count` (`base` noted here so far, `count`
  // published there).
  void append(const MemoStrings& from, uint64_t base, uint64_t count);
  // Makes the first `count` entries readable by other threads (with a lock or other
  // ordering after this).
  void publish(uint64_t count);
  // Where entry `index` (published) was pickled, or kNotAString.
  uint32_t offset(uint64_t index) const;

  static constexpr uint64_t kNone = ~uint64_t{0};
  static constexpr uint32_t kNotAString = ~uint32_t{0};

 private:
  void begin_word(uint64_t index);

  std::unique_ptr<uint64_t[]> is_string_;
  std::unique_ptr<uint32_t[]> strings_before_;
  std::unique_ptr<uint32_t[]> offsets_;
  uint64_t capacity_ = 0;
  uint64_t strings_ = 0;
  uint64_t word_ = 0;  // the bits of the 64 entries being noted
};

}  // namespace memsnap::pickle
