#include "history/cfi_unwinder.h"

#include <algorithm>
#include <memory>

#include "history/stack_capture.h"

#include "history/cfi_rules.h"
#include "history/raw_stack_read.h"
#include "history/stack_bounds.h"

namespace memsnap {
namespace {

// Rules by code address, direct-mapped: a walk touches few distinct addresses, and a
// collision costs one more rule lookup, not a wrong answer (the key is compared).
class RuleCache {
 public:
  RuleCache() : unloaded_(unloaded_module_count()) {}

  const FrameRule& rule(uintptr_t pc) {
    Slot& slot = slots_[(pc ^ (pc >> 12)) & (kSlots - 1)];
    if (slot.pc == pc) return slot.rule;
    // A miss is the slow path anyway: see whether modules were unloaded since the rules
    // were read, and start over if so.
    const uint64_t unloaded = unloaded_module_count();
    if (unloaded != unloaded_) {
      unloaded_ = unloaded;
      ++generation_;
      for (Slot& s : slots_) s = Slot{};
    }
    slot.rule = find_frame_rule(pc);
    slot.pc = pc;
    return slot.rule;
  }
  uint64_t generation() const { return generation_; }  // changes when rules are dropped

 private:
  static constexpr size_t kSlots = 4096;
  struct Slot {
    uintptr_t pc = 0;
    FrameRule rule;
  };
  Slot slots_[kSlots];
  uint64_t unloaded_;
  uint64_t generation_ = 0;
};

// One earlier walk, step by step: the registers before each step, the stack words each
// step read, and the return address it produced. A walk is a function of the registers it
// starts a step with, the rules (cached per address) and the words it reads; so when a new
// walk reaches a step with the same registers as a remembered one, and every word the
// remembered walk read from there on still holds the same value, the rest of the new walk
// is the remembered one. Checking costs independent loads, where walking costs a chain of
// dependent ones: the outer frames a program's allocations share come almost for free.
struct WalkMemo {
  static constexpr size_t kMaxSteps = kMaxStackDepth + 16;  // skipped frames included
  struct Registers {
    uintptr_t pc, sp, bp;
    bool operator==(const Registers&) const = default;
  };
  struct Word {
    uintptr_t address, value;
  };
  // (What every walk asks of every memo comes first, next to the first step's registers:
  // passing over a memo that does not match touches one or two cache lines, not five.)
  uint64_t rules_generation = ~uint64_t{0};
  size_t steps = 0;
  size_t word_count = 0;
  size_t step_limit = 0;  // the walk stopped here for want of room, not by itself
  bool complete = false;  // ended by itself: nothing beyond `steps` to find
  uint64_t last_used = 0;
  // The caller's note on the frames this walk gave, cut with `note_skip` and `note_max`
  // (another cut is other frames: the note starts over).
  StackNote note;
  size_t note_skip = 0;
  size_t note_max = 0;
  Registers before[kMaxSteps];
  uint16_t first_word[kMaxSteps];  // words read by step i start here
  uintptr_t produced[kMaxSteps];   // the return address step i found
  Word words[kMaxSteps * 3];

  StackNote* note_for(size_t skip, size_t max_frames) {
    if (note_skip != skip || note_max != max_frames) {
      note = StackNote{};
      note_skip = skip;
      note_max = max_frames;
    }
    return &note;
  }

  // The bits in which a remembered stack word differs from the stack now.
  MEMSNAP_READS_RAW_STACK static uintptr_t changed(const Word& word) {
    return *reinterpret_cast<const volatile uintptr_t*>(word.address) ^ word.value;
  }
  bool covers(size_t step_limit_wanted) const { return complete || step_limit >= step_limit_wanted; }
  // Whether step `i` of this walk started from `registers` and its words still hold.
  // (Four words at a time into four accumulators: the loads are independent, and a repeated
  // call path spends most of its walk here.)
  MEMSNAP_READS_RAW_STACK bool still_holds(size_t i, const Registers& registers) const {
    if (i >= steps || !(before[i] == registers)) return false;
    uintptr_t differ0 = 0, differ1 = 0, differ2 = 0, differ3 = 0;
    size_t w = first_word[i];
    for (; w + 4 <= word_count; w += 4) {
      differ0 |= changed(words[w]);
      differ1 |= changed(words[w + 1]);
      differ2 |= changed(words[w + 2]);
      differ3 |= changed(words[w + 3]);
    }
    for (; w < word_count; ++w) differ0 |= changed(words[w]);
    return (differ0 | differ1 | differ2 | differ3) == 0;
  }
};

struct ThreadWalker {
  static constexpr size_t kMemos = 4;
  const StackBounds stack = thread_stack_bounds();
  RuleCache rules;
  WalkMemo storage[kMemos + 1];
  WalkMemo* memos[kMemos] = {&storage[0], &storage[1], &storage[2], &storage[3]};
  WalkMemo* scratch = &storage[kMemos];  // the walk under way
  uint64_t clock = 0;

  // Keeps the finished walk in scratch in place of the least recently used memo.
  void keep_scratch() {
    WalkMemo** oldest = &memos[0];
    for (WalkMemo*& memo : memos)
      if (memo->last_used < (*oldest)->last_used) oldest = &memo;
    std::swap(*oldest, scratch);
  }
};

ThreadWalker& thread_walker() {
  // On the heap: tens of KiB are too much for every thread's static TLS block.
  thread_local std::unique_ptr<ThreadWalker> walker = std::make_unique<ThreadWalker>();
  return *walker;
}

// Reads a word of the thread's stack at `address` into `value` and remembers it in `memo`;
// false when it lies outside the stack.
MEMSNAP_READS_RAW_STACK bool load(const StackBounds& stack, uintptr_t low, uintptr_t address,
                                  uintptr_t& value, WalkMemo& memo) {
  if (address < low || address < stack.low || address > stack.high - sizeof(uintptr_t) ||
      address % alignof(uintptr_t) != 0)
    return false;
  value = *reinterpret_cast<const volatile uintptr_t*>(address);
  memo.words[memo.word_count++] = {address, value};
  return true;
}

// Hands out the walk's return addresses: the first `skip` are dropped, at most `max` kept.
class FrameSink {
 public:
  FrameSink(uintptr_t* frames, size_t max, size_t skip) : frames_(frames), max_(max), skip_(skip) {}
  void add(uintptr_t pc) {
    if (skip_ > 0)
      --skip_;
    else if (count_ < max_)
      frames_[count_++] = pc;
  }
  void add_all(const uintptr_t* pcs, size_t count) {
    const size_t skipped = std::min(skip_, count);
    skip_ -= skipped;
    const size_t taken = std::min(count - skipped, max_ - count_);
    std::copy_n(pcs + skipped, taken, frames_ + count_);
    count_ += taken;
  }
  size_t count() const { return count_; }

 private:
  uintptr_t* frames_;
  size_t max_;
  size_t skip_;
  size_t count_ = 0;
};

}  // namespace

__attribute__((noinline)) size_t capture_stack_cfi(uintptr_t* frames, size_t max_frames,
                                                   size_t skip, StackNote** note) {
  if (note != nullptr) *note = nullptr;
#if defined(__x86_64__)
  WalkMemo::Registers registers;
  // This function's own registers at one instruction: the walk starts from its frame.
  asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
               : "=r"(registers.pc), "=r"(registers.sp), "=r"(registers.bp));
  ThreadWalker& walker = thread_walker();
  const StackBounds& stack = walker.stack;
  if (stack.high == 0 || registers.sp < stack.low || registers.sp >= stack.high)
    return kUnsupportedStack;
  const size_t step_limit = std::min(skip + std::min(max_frames, kMaxStackDepth), WalkMemo::kMaxSteps);
  const uint64_t generation = walker.rules.generation();
  FrameSink sink(frames, max_frames, skip);
  WalkMemo& memo = *walker.scratch;
  memo.steps = memo.word_count = 0;
  memo.last_used = ++walker.clock;
  memo.note = StackNote{};
  auto finish = [&](bool complete) {
    memo.complete = complete;
    memo.step_limit = step_limit;
    memo.rules_generation = generation;
    if (walker.rules.generation() == generation) {
      walker.keep_scratch();  // swaps pointers: `memo` is still this walk
      if (note != nullptr) *note = memo.note_for(skip, max_frames);
    }
    return sink.count();
  };

  for (size_t i = 0; i < step_limit; ++i) {
    for (WalkMemo* earlier : walker.memos) {
      // (Against the rules now: a lookup on the way may have dropped them.)
      if (earlier->rules_generation != walker.rules.generation() || !earlier->covers(step_limit) ||
          !earlier->still_holds(i, registers))
        continue;
      // The rest of this walk is the earlier one's.
      earlier->last_used = walker.clock;
      const size_t end = std::min(earlier->steps, step_limit);
      sink.add_all(earlier->produced + i, end - i);
      if (i == 0) {  // the same walk again: nothing new to remember
        if (note != nullptr) *note = earlier->note_for(skip, max_frames);
        return sink.count();
      }
      // A new walk that joins a known one: remember it whole.
      const size_t word_shift = earlier->first_word[i];
      for (size_t j = i; j < earlier->steps; ++j) {
        memo.before[j] = earlier->before[j];
        memo.produced[j] = earlier->produced[j];
        memo.first_word[j] = static_cast<uint16_t>(memo.word_count + earlier->first_word[j] - word_shift);
      }
      for (size_t w = word_shift; w < earlier->word_count; ++w) memo.words[memo.word_count++] = earlier->words[w];
      memo.steps = earlier->steps;
      const size_t limit = earlier->step_limit;
      const bool complete = earlier->complete;
      finish(complete);
      memo.step_limit = limit;  // `memo` is now the kept one: std::swap moved pointers only
      return sink.count();
    }
    memo.before[i] = registers;
    memo.first_word[i] = static_cast<uint16_t>(memo.word_count);
    // A return address is just past its call; the call itself is what the rule is for.
    const FrameRule& rule = walker.rules.rule(i == 0 ? registers.pc : registers.pc - 1);
    if (rule.kind == FrameRule::Kind::kUnsupported) return kUnsupportedStack;
    if (rule.kind != FrameRule::Kind::kStep) return finish(true);
    const uintptr_t sp = registers.sp;
    uintptr_t cfa = (rule.cfa_from_rbp ? registers.bp : sp) + static_cast<intptr_t>(rule.cfa_offset);
    if (rule.cfa_deref && !load(stack, sp, cfa, cfa, memo)) return finish(true);
    if (cfa <= sp) return finish(true);  // callers' frames lie above: a rule going down is wrong
    uintptr_t return_address = 0;
    if (!load(stack, sp, cfa + static_cast<intptr_t>(rule.return_address_offset), return_address, memo))
      return finish(true);
    if (rule.rbp_saved &&
        !load(stack, sp, (rule.rbp_from_rbp ? registers.bp : cfa) + static_cast<intptr_t>(rule.rbp_offset),
              registers.bp, memo))
      return finish(true);
    registers.sp = cfa;
    registers.pc = return_address;
    if (return_address == 0) return finish(true);
    memo.produced[i] = return_address;
    memo.steps = i + 1;
    sink.add(return_address);
  }
  return finish(false);
#else
  (void)frames;
  (void)max_frames;
  (void)skip;
  return kUnsupportedStack;
#endif
}

}  // namespace memsnap
