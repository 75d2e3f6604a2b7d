// One rank of a distributed job, boiled down to what a cross-rank table compares: how much it
// reserved and allocated (at its peak and at the end), how fragmented it was, whether it
// retried or ran out of memory, its active memory over time at a small fixed resolution, and
// its live memory at its peak by allocating call site. A few kilobytes, whatever the
// snapshot's size, so a thousand of them fit where one snapshot would.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "snapshot/snapshot.h"

namespace memsnap {

struct RankOom {
  int64_t device = 0;
  uint64_t event = 0;    // index of the oom entry in that device's trace
  int64_t time_us = 0;   // as the trace has it
  std::optional<int64_t> unix_time_us;  // when the snapshot knows its clock
  uint64_t requested_bytes = 0;
  std::optional<uint64_t> device_free_bytes;
};

struct SiteBytes {
  std::string site;  // the allocating stack's headline frame and its caller
  uint64_t bytes = 0;
};

struct RankSummary {
  std::string file;  // as given
  std::optional<int64_t> rank;
  std::string rank_from;  // "snapshot", "file name", or "--rank-pattern"
  std::string host;
  int64_t pid = 0;
  std::optional<int64_t> world_size;
  std::string source;  // "memsnap" or "pytorch"
  // The allocator settings recorded, as a configuration string ("" = PyTorch's defaults);
  // unset when the snapshot's settings cannot be read.
  std::optional<std::string> settings;
  int64_t taken_unix_us = 0;  // when the snapshot was taken, when it says (memsnap's do)
  uint64_t devices = 0;
  uint64_t trace_events = 0;

  uint64_t reserved_bytes = 0;   // at the snapshot
  uint64_t allocated_bytes = 0;
  uint64_t peak_reserved_bytes = 0;   // the process's statistics when recorded, else the trace's
  uint64_t peak_allocated_bytes = 0;
  // The program's own bytes at their peak (requests, before rounding), where known (0 when not):
  // what "the same live memory" is judged by, whatever settings rounded the blocks to.
  uint64_t peak_requested_bytes = 0;
  bool peaks_from_statistics = false;
  uint64_t segments = 0;
  double fragmentation = 0;  // free bytes stranded in segments that hold live blocks / reserved
  std::optional<int64_t> alloc_retries;  // statistics only (PyTorch pickles have none)
  uint64_t ooms = 0;
  std::optional<RankOom> last_oom;

  // Active bytes of the device with the longest trace, at kTimelinePoints evenly spaced event
  // positions (each the most in use within its stretch, so no peak is lost).
  static constexpr size_t kTimelinePoints = 96;
  std::vector<uint64_t> active_timeline;
  // Live bytes at that device's peak by call site, largest first, at most kMaxSites.
  static constexpr size_t kMaxSites = 40;
  std::vector<SiteBytes> sites_at_peak;
};

RankSummary summarize_rank(const Snapshot& snapshot, std::string file);

// The rank a file name states: the number after "rank" ("rank3", "rank_3", "RANK-3") or, failing
// that, the number ending the name before its extensions ("snapshot_3.pickle", "oom-3.pkl.gz"),
// or a folder named like the first ("rank3/snapshot.pickle").
std::optional<int64_t> rank_from_file_name(std::string_view path);
// Only an explicit "rank" followed by a number, in the file's name or its folder's: for files
// whose other numbers are more likely a pid or a count (memsnap's dump patterns).
std::optional<int64_t> rank_named_in_path(std::string_view path);

}  // namespace memsnap
