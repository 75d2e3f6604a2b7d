// Interned stacks: each distinct call path is stored once and named by a small id, so a trace
// entry or a block's history holds 4 bytes instead of a list of frames, and a path seen
// before costs one hash lookup. Bounded: past `max_frames` stored addresses it
// stops taking new stacks (intern returns kNoStack) rather than grow without limit.
// Not thread-safe: the recorder keeps one table per device, guarded by the device's
// allocator lock its hooks already hold, so interning takes no lock of its own.
//
// `key()` names the table's contents: unique in the process, and new after clear(). A caller
// that remembers "this path is id N of table K" (the stack walker's memo, stack_capture.h)
// can skip intern while the key is unchanged, and can never hand an id to the wrong table.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>


namespace memsnap {

using StackId = uint32_t;
inline constexpr StackId kNoStack = std::numeric_limits<StackId>::max();

class StackTable {
 public:
  // (At most 2^32 - 1 frames, whatever `max_frames` says: a slot holds their offset in 32 bits.)
  explicit StackTable(size_t max_frames = size_t{16} << 20)
      : max_frames_(std::min<size_t>(max_frames, std::numeric_limits<uint32_t>::max())) {}

  StackId intern(const uintptr_t* frames, size_t count);
  // The frames of a stack, innermost first (empty for kNoStack or an unknown id).
  std::vector<uintptr_t> frames(StackId id) const;
  // Copies the first `max` frames of a stack into `out`; returns how many (0 for an unknown id).
  size_t copy_frames(StackId id, uintptr_t* out, size_t max) const;
  size_t size() const;
  void clear();
  uint64_t key() const { return key_; }

 private:
  struct Span {
    uint32_t offset = 0;
    uint32_t count = 0;
  };
  bool same(const Span& span, const uintptr_t* frames, size_t count) const;
  void grow_index();

  // Open addressing, linear probing: id kNoStack when empty. Kept at most half full. A
  // lookup is one probe into a flat array, not a node walk, and the slot says where the
  // stack's frames are: comparing them waits for no other lookup.
  struct Slot {
    uint32_t hash = 0;
    StackId id = kNoStack;
    Span span{};
  };

  static uint64_t next_key();

  const size_t max_frames_;
  uint64_t key_ = next_key();
  std::vector<uintptr_t> frames_;  // every stack's frames, back to back
  std::vector<Span> spans_;        // by id
  std::vector<Slot> index_;  // size a power of two
};

}  // namespace memsnap
