/// @file
/// memsnap::Recording: what happened to an Allocator's memory and who asked for it, as snapshots
/// that `memsnap serve`, every `memsnap` command and PyTorch's memory_viz read.
///
/// @code
/// memsnap::Allocator allocator;
/// memsnap::Recording recording(allocator);                    // every allocation, with its stack
/// recording.write_snapshot_on_out_of_memory("oom-{pid}-{n}.msgpack");
/// {
///   memsnap::Recording::Phase step(recording, "step 12");    // names a phase in the trace
///   ...                                                       // allocate and free as usual
/// }
/// recording.write_snapshot("run.msgpack");
/// @endcode
///
/// Stacks are the program's C++ call stacks, symbolized when a snapshot is written: build with
/// `-g` for files and lines. Every call is thread-safe and may run while other threads allocate.
/// Every failure is a memsnap::Error (memsnap/errors.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "memsnap/allocator.h"
#include "memsnap/errors.h"

namespace memsnap {

/// What a Recording keeps.
struct RecordingOptions {
  /// How stacks are taken.
  enum class Stacks {
    kNone,           ///< no stacks: the events alone
    kDwarf,          ///< walked with the program's DWARF unwind tables: right at any optimization
    kFramePointers,  ///< walked by frame pointer: much cheaper, for code built with
                     ///< `-fno-omit-frame-pointer` (frames without them are skipped)
  };
  /// Keep the trace of events (allocations, frees, segments reserved and released, out-of-memory
  /// errors, phases) besides each block's last allocation; without it a snapshot shows what is
  /// allocated and by whom, not what happened before.
  bool trace = true;
  /// The trace entries kept per device; the oldest go first.
  std::size_t max_entries = 100000;
  /// How stacks are taken.
  Stacks stacks = Stacks::kDwarf;
};

/// Records an Allocator's history from its construction until its destruction.
///
/// A Recording shares the allocator's state: either may be destroyed first (cached memory goes
/// back when the last of them does).
class Recording {
 public:
  /// Starts recording `allocator`. Throws Error when it already has a Recording.
  explicit Recording(Allocator& allocator, RecordingOptions options = {});
  /// Records as the `MEMSNAP_*` variables of the environment say, so whoever runs the program
  /// chooses: `MEMSNAP_HISTORY` (`all`, `alloc`, `state` or `off`; unset or off records nothing),
  /// `MEMSNAP_MAX_ENTRIES`, `MEMSNAP_STACKS` (`cpp` or `none`), `MEMSNAP_OOM_SNAPSHOT` (a pattern
  /// as write_snapshot_on_out_of_memory takes) and `MEMSNAP_SNAPSHOT_AT_EXIT` (a path written
  /// when the Recording is destroyed). Throws Error naming the variable for a bad value, or an
  /// output whose folder is missing or not writable.
  static Recording from_environment(Allocator& allocator);
  /// Stops recording; writes the `MEMSNAP_SNAPSHOT_AT_EXIT` snapshot of from_environment() (a
  /// failure is one line on stderr).
  ~Recording();
  Recording(Recording&&) noexcept;             ///< Moves the recording; the source is empty.
  Recording& operator=(Recording&&) noexcept;  ///< Moves the recording; the source is empty.
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;

  /// Writes a snapshot (every segment and block, the allocations that lived in each block's
  /// bytes with their stacks, the trace, phases, settings and statistics) to `path`: as PyTorch's
  /// snapshot pickle when the path ends in `.pickle`, else as memsnap's msgpack; whole or not at
  /// all (a new temporary file beside it, then a rename). Throws Error when it cannot be written.
  void write_snapshot(const std::string& path) const;
  /// From now on each out-of-memory error first writes a snapshot to a path made from `pattern`,
  /// whose placeholders are filled in: `{pid}`, `{device}`, `{n}` (this process's count of such
  /// snapshots, from 1), `{host}`, `{rank}` and `{local_rank}` (a torchrun-style job's, else 0).
  /// It is written without the allocator's lock and without device memory. Throws Error now when
  /// the first file's folder is missing or not writable; later failures are one line on stderr,
  /// and the program still gets its OutOfMemoryError.
  void write_snapshot_on_out_of_memory(const std::string& pattern);

  /// Marks the start (`start` true) or end of a named phase of the program in the trace, on
  /// every device; `memsnap growth` reads repeated phases as steps.
  void annotate(const std::string& name, bool start);

  /// A phase of the program from construction to destruction (Recording::annotate's start and
  /// end).
  class Phase {
   public:
    /// Marks the start of `name`.
    Phase(Recording& recording, std::string name);
    /// Marks its end.
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

   private:
    Recording& recording_;
    std::string name_;
  };

 private:
  struct State;
  explicit Recording(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace memsnap
