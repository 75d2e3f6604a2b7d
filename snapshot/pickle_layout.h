// A quick pass over a pickle held in memory that finds the parts which can be decoded on
// their own, by other threads, while the pickle machine reads the rest in order: runs of a
// long list's APPENDS batches (Python pickles a list 1,000 items to a batch; a PyTorch
// snapshot's trace is one such list), each part a sequence of whole items. The pass reads
// opcodes and their lengths only, building nothing; it stops at anything it does not follow
// (explicit memo indices, text opcodes, damage), leaving the rest to the machine, which
// checks everything anyway.
//
// It also notes where each memoized string was pickled, so a part can read the strings that
// earlier parts of the pickle memoized (dict keys, file names) without waiting for them.
#pragma once

#include <cstdint>
#include <functional>
#include <atomic>
#include <memory>
#include <optional>
#include <string_view>

namespace memsnap::pickle {

struct PicklePart {
  uint64_t mark = 0;        // offset of the MARK before the part's first item
  uint64_t end = 0;         // offset of the APPENDS after its last item
  uint64_t memo_base = 0;   // memo entries made before the part
  uint64_t memo_count = 0;  // made inside it
  uint64_t begin() const { return mark + 1; }
  uint64_t bytes() const { return end - begin(); }
};

struct LayoutOptions {
  uint64_t min_part_bytes = uint64_t{32} << 10;  // smaller lists are not worth a thread
  uint64_t max_part_bytes = uint64_t{1} << 20;   // a long list is cut into parts of about this
};

class LayoutScanner {
 public:
  static constexpr uint32_t kNotAString = ~uint32_t{0};

  LayoutScanner(std::string_view pickle, LayoutOptions options);
  // Scans from the start, calling `found` with each part as soon as it is known (in file
  // order, none inside another) and `progress` with the offset reached about every 256 KiB;
  // either may return false to stop the scan. Returns whether the scan reached STOP.
  bool scan(const std::function<bool(const PicklePart&)>& found,
            const std::function<bool(uint64_t offset)>& progress);
  // Where the string that memo entry `index` holds was pickled, or kNotAString: valid for
  // the entries below a part's memo_base once `found` was called for that part.
  uint32_t string_offset(uint64_t index) const;

 private:
  void note_memo(uint64_t index, uint64_t string_at);
  void publish_strings(uint64_t memo);

  std::string_view pickle_;
  LayoutOptions options_;
  // Which memo entries hold strings (a bit each, read and written whole, as other threads
  // read them while the scan goes on), how many strings come before each 64 entries, and
  // the strings' offsets in memo order: a few bits per entry where most are not strings.
  // Each table is allocated for the most a pickle this size can hold; only the pages
  // written are ever touched.
  std::unique_ptr<uint64_t[]> is_string_;
  std::unique_ptr<uint32_t[]> strings_before_;
  std::unique_ptr<uint32_t[]> string_offsets_;
  uint64_t memo_capacity_ = 0;
  uint64_t strings_ = 0;
  uint64_t word_ = 0;  // the bits of the 64 entries being noted
};

// The text of the string opcode (SHORT_BINUNICODE, BINUNICODE or BINUNICODE8) at `offset`,
// if one lies there whole.
std::optional<std::string_view> pickled_string_at(std::string_view pickle, uint64_t offset);

}  // namespace memsnap::pickle
