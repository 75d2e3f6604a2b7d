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
//
// On a large pickle several threads can scan at once: the others start further on, each at
// a boundary between two batches that it recognizes by its bytes (an APPENDS, then a MARK),
// and count memo entries from there. Their work is kept where the scan before them lands on
// that boundary, an opcode of its own walk: from an opcode on, the walk is the same whatever
// came before it, but for the memo entries made before (added on) and the marks still open
// (a scan that starts further on stops at the first opcode that closes a mark it did not
// see, and the scan before it goes on from there). A start that the scan before passes over
// instead (inside a string, say) is thrown away.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "snapshot/memo_strings.h"

namespace memsnap::pickle {

struct PicklePart {
  uint64_t mark = 0;        // offset of the MARK before the part's first item
  uint64_t end = 0;         // offset of the APPENDS after its last item
  uint64_t memo_base = 0;   // memo entries made before the part
  uint64_t memo_count = 0;  // made inside it
  uint64_t begin() const { return mark + 1; }
  uint64_t bytes() const { return end - begin(); }
  bool operator==(const PicklePart&) const = default;
};

struct LayoutOptions {
  uint64_t min_part_bytes = uint64_t{32} << 10;  // smaller lists are not worth a thread
  uint64_t max_part_bytes = uint64_t{1} << 20;   // a long list is cut into parts of about this
  unsigned scanners = 0;  // threads that scan at once (0 as 1; the parallel read chooses for 0)
};

class LayoutScanner {
 public:
  static constexpr uint32_t kNotAString = MemoStrings::kNotAString;

  LayoutScanner(std::string_view pickle, LayoutOptions options);
  // Scans from the start, calling `found` with each part as soon as it is known (in file
  // order, none inside another) and `scanned` with ranges of bytes the scan is done with
  // (about every 512 KiB, from any of the scanning threads); either may return false to
  // stop the scan. Returns whether the scan reached STOP. `found` is called on the calling
  // thread only.
  bool scan(const std::function<bool(const PicklePart&)>& found,
            const std::function<bool(uint64_t begin, uint64_t end)>& scanned);
  // Where the string that memo entry `index` holds was pickled, or kNotAString: valid for
  // the entries below a part's memo_base once `found` was called for that part.
  uint32_t string_offset(uint64_t index) const { return strings_.offset(index); }
  // How many scans ahead the last scan took the work of.
  unsigned scans_ahead_kept() const { return scans_ahead_kept_; }

 private:
  std::string_view pickle_;
  LayoutOptions options_;
  MemoStrings strings_;
  unsigned scans_ahead_kept_ = 0;
};

// The text of the string opcode (SHORT_BINUNICODE, BINUNICODE or BINUNICODE8) at `offset`,
// if one lies there whole.
std::optional<std::string_view> pickled_string_at(std::string_view pickle, uint64_t offset);

}  // namespace memsnap::pickle
